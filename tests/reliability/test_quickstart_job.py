"""A training job under the real `make run` (scripts/run.sh, supervisord) while each of its
processes is killed: the job finishes with every epoch once and the right bill."""

import os
import signal

import pytest
import redis
from django.db import transaction

from tests.reliability.helpers import assert_billed_once, trainer_at
from tests.reliability.runner import Runner
from tests.servers import free_port, subprocess_database_url
from tests.training.helpers import job_reload, submit, wait_for
from training.models import AttemptEnd, EpochMetric, JobState
from training.reaper import jobs_reap

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.same_on_any_database("the quick start (`make run`) runs on SQLite", on="sqlite"),
]


@pytest.fixture
def runner(tmp_path, settings, monkeypatch, transactional_db):
    """`make run` on this test's database, with a Redis it starts itself (none answers at its
    REDIS_URL), on its own queues; jobs submitted here are sent to its training worker."""
    redis_url = f"redis://127.0.0.1:{free_port()}"
    run = Runner(
        tmp_path / "var",
        redis_url=redis_url,
        database_url=subprocess_database_url(),
        name="job-run",
    )
    # The quick start's own queues (the suite's are per test database); heartbeats of 4 s, so
    # a Redis restarted by supervisord (about a second) is well within the lease (12 s).
    run.env.update(
        TRAINING_QUEUE="training", CELERY_DEFAULT_QUEUE="default", TRAINING_HEARTBEAT_SECONDS="4"
    )
    settings.TRAINING_REDIS_URL = f"{redis_url}/0"
    settings.TRAINING_HEARTBEAT_SECONDS = 4.0  # the reaper here judges as the runner's would
    from kombu import Connection

    from training import tasks
    from training.services import jobs

    def enqueue(job_id: int) -> None:
        def send() -> None:
            with Connection(f"{redis_url}/1") as conn:
                tasks.run_job.apply_async((job_id,), connection=conn, queue="training")

        transaction.on_commit(send)

    monkeypatch.setattr(jobs, "_enqueue", enqueue)
    try:
        run.start()
        yield run
    finally:
        run.stop()


def test_each_process_of_make_run_killed_leaves_the_job_unharmed(
    team, project, detect_version, gpu_local, runner
):
    """Fault: while a job trains under `make run`, each of its processes is killed with
    SIGKILL in turn: web, worker, model server, beat and Redis (supervisord restarts each),
    then the training worker itself (restarted; the job is reaped and resumed from its
    checkpoint). Before: the first death stopped all of Kestrel and the job sat "running"."""
    gpu_local.hourly_price = "3.600"
    gpu_local.save()
    epochs = 40
    job = submit(team, project, detect_version, gpu_local, epochs=epochs)
    # The trainer's own epoch 2, from its stream: the epochs the supervisor stored lag it by as
    # long as the supervisor is held up, and the run once ended before the last kill.
    trainer_at(redis.Redis.from_url(f"{runner.redis_url}/0"), job)
    for name in ("web", "worker", "inference", "beat", "redis"):
        old = runner.status()[name][1]
        os.kill(old, signal.SIGKILL)
        wait_for(lambda n=name, o=old: runner.restarted(n, o), timeout=60, what=f"{name} again")
        assert job_reload(job).state == JobState.RUNNING
    # The training worker last, at once: waiting for the web to answer first took 15 s, 30 of
    # the 40 epochs. Its pool and the trainer die with it.
    before = job_reload(job)
    assert before.state == JobState.RUNNING and before.attempts == 1
    old = runner.status()["training"][1]
    os.kill(old, signal.SIGKILL)
    wait_for(lambda: runner.restarted("training", old), timeout=60, what="training again")
    wait_for(lambda: runner.web_answers(), timeout=60, what="the web again")

    def finished():
        jobs_reap()  # what beat runs every minute, without the minute
        fresh = job_reload(job)
        return fresh if fresh.is_final else None

    job = wait_for(finished, timeout=400, every=1.0, what="the job to end")
    assert job.state == JobState.SUCCEEDED, job.error
    history = list(EpochMetric.objects.filter(job=job).order_by("epoch"))
    assert [m.epoch for m in history] == list(range(1, epochs + 1))
    rows = list(job.attempt_rows.order_by("number"))
    assert [r.end_reason for r in rows] == [AttemptEnd.LOST, AttemptEnd.FINISHED]
    assert job.dropped_events == 0
    assert_billed_once(job)
    assert "exited: training (terminated by SIGKILL; not expected)" in runner.log("supervisord")
