"""Issue 14, item 2: trainer events name no server files, and their bodies follow one schema.

A trainer (or anyone holding its attempt's token) reports events; before this issue the
supervisor copied whatever paths an event named into the job's downloadable artifacts, made the
job's model from any `best` path, and deleted *.pt files in whatever folder a checkpoint event
named. These tests send those events for real (through the HTTP ingest and straight into the
job's Redis stream, as a local trainer writes) and let the real supervisor handle them.
"""

import json
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.storage import default_storage
from django.utils import timezone

from tests.training.conftest import detect_version, gpu_local, project, workers  # noqa: F401 (fixtures)
from tests.training.helpers import submit, wait_state
from training.models import AttemptEnd, JobState, TrainedModel, TrainingAttempt, TrainingJob
from training.process.supervisor import Supervisor, lease_take
from training.providers.base import Machine
from training.streams import stream_key, training_redis
from training.trainer_events import events_token

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def secret() -> bytes:
    """What the files outside any job hold: unique to each test, so that files an earlier test
    left in storage never count."""
    return b"\x89PNG\r\n\x1a\n the worker's private bytes " + uuid.uuid4().hex.encode()


@pytest.fixture
def outside(tmp_path, secret) -> Path:
    """A folder of the worker's that no job owns, holding files a job must never get."""
    folder = tmp_path / "outside"
    folder.mkdir()
    for name in ("hostname", "secret.png", "best.pt", "last.pt", "keep.pt"):
        (folder / name).write_bytes(secret + name.encode())
    return folder


@pytest.fixture
def new_job(team, project, detect_version, gpu_local):  # noqa: F811 (the fixtures imported above)
    """Submits a job of the team's (yolo11n from scratch, imgsz 64) on this machine."""
    return lambda **overrides: submit(team, project, detect_version, gpu_local, **overrides)


@pytest.fixture
def supervisor(new_job, tmp_path) -> Supervisor:
    """A job whose first attempt is under way, supervised in this process."""
    job = new_job()
    sup = Supervisor(lease_take(job.pk, "here:1:test"))
    sup.machine = Machine(provider="local", name="test", device="cpu", workdir=str(tmp_path / "m"))
    TrainingJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    sup.job.state = JobState.RUNNING
    training_redis().delete(stream_key(job.pk))
    sup.fed = "0-0"  # the stream entries handled so far (see `send`)
    return sup


def post(client, job_id: int, token: str, body) -> object:
    return client.post(
        f"/api/v1/trainer/jobs/{job_id}/events",
        data=body if isinstance(body, bytes | str) else json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


def send(client, sup: Supervisor, route: str, kind: str, data: dict, seq: int = 1):
    """The event as a remote trainer (HTTP) or a local one (Redis) would send it; then the
    supervisor handles whatever reached the stream, as its loop does."""
    job_id, attempt = sup.job.pk, sup.attempt.number
    response = None
    if route == "http":
        event = {"s": seq, "t": kind, "d": data}
        response = post(client, job_id, events_token(job_id, attempt), {"events": [event]})
    else:
        fields = {"j": job_id, "a": attempt, "s": seq, "t": kind, "d": json.dumps(data)}
        training_redis().xadd(stream_key(job_id), fields)
    # What reached the stream since the last read, as the supervisor's loop reads it.
    for _, entries in training_redis().xread({stream_key(job_id): sup.fed}) or []:
        for entry_id, fields in entries:
            sup.fed = entry_id
            sup._handle(fields)
    return response


def stored_secrets(job_id: int, secret: bytes) -> list[str]:
    """Storage keys, anywhere a job's files go, whose bytes came from outside the job."""
    found = []

    def walk(folder: str) -> None:
        if not default_storage.exists(folder):
            return
        folders, files = default_storage.listdir(folder)
        for name in files:
            key = f"{folder}/{name}"
            with default_storage.open(key, "rb") as f:
                if secret in f.read():
                    found.append(key)
        for name in folders:
            walk(f"{folder}/{name}")

    walk(f"training/jobs/{job_id}")
    walk("models")
    return found


def dropped(job_id: int) -> int:
    return TrainingJob.objects.get(pk=job_id).dropped_events


@pytest.mark.parametrize("route", ["http", "redis"])
def test_train_end_naming_server_files_stores_none_of_them(
    client, supervisor, outside, secret, route
):
    job_id = supervisor.job.pk
    forged = {
        "save_dir": str(outside),
        "best": str(outside / "best.pt"),
        "names": ["object"],
        "plots": ["/etc/hostname", str(outside / "secret.png")],
        "results_csv": str(outside / "hostname"),
        "results": {},
    }
    response = send(client, supervisor, route, "train_end", forged)
    send(client, supervisor, route, "done", {"stopped": False}, seq=2)
    supervisor._succeed(stopped=False)  # the trainer exited 0 after `done`

    job = TrainingJob.objects.get(pk=job_id)
    assert not stored_secrets(job_id, secret)
    assert not {"hostname", "secret.png", "results.csv"} & set(job.artifacts)
    assert not TrainedModel.objects.filter(job_id=job_id).exists()  # no model from best.pt
    assert dropped(job_id) == 1
    if route == "http":
        assert response.status_code == 400, response.content


@pytest.mark.parametrize("route", ["http", "redis"])
def test_a_forged_checkpoint_touches_no_other_folder(client, supervisor, outside, secret, route):
    job_id = supervisor.job.pk
    forged = {"epoch": 1, "last": str(outside / "last.pt"), "best": str(outside / "best.pt")}
    response = send(client, supervisor, route, "checkpoint", forged)

    assert sorted(p.name for p in outside.iterdir()) == [
        "best.pt",
        "hostname",
        "keep.pt",
        "last.pt",
        "secret.png",
    ]  # nothing deleted there
    job = TrainingJob.objects.get(pk=job_id)
    assert not stored_secrets(job_id, secret)
    assert job.checkpoint_epoch is None and not job.artifacts
    assert dropped(job_id) == 1
    if route == "http":
        assert response.status_code == 400, response.content


def test_checkpoint_files_that_link_out_of_the_folder_are_not_followed(
    client, supervisor, outside, secret
):
    """A checkpoint event in today's shape (an epoch, no path) whose file is a planted link."""
    checkpoints = supervisor._workdir() / f"attempt-{supervisor.attempt.number}" / "checkpoints"
    checkpoints.mkdir(parents=True)
    (checkpoints / "last-1.pt").symlink_to(outside / "last.pt")
    (checkpoints / "best-1.pt").symlink_to(outside / "best.pt")
    send(client, supervisor, "http", "checkpoint", {"epoch": 1, "best": True})
    assert not stored_secrets(supervisor.job.pk, secret)
    assert TrainingJob.objects.get(pk=supervisor.job.pk).checkpoint_epoch is None
    assert (outside / "last.pt").exists() and (outside / "best.pt").exists()


@pytest.mark.parametrize("linked", ["run", "run/weights"])
def test_a_run_folder_that_links_out_is_not_followed(client, supervisor, outside, secret, linked):
    """The run folder, or weights/ in it, replaced by a link to a folder of the worker's that
    holds files by the names a train_end event may say."""
    (outside / "weights").mkdir()
    (outside / "weights" / "best.pt").write_bytes(secret)
    (outside / "results.csv").write_bytes(secret)
    link = supervisor._workdir() / linked
    link.parent.mkdir(parents=True)
    link.symlink_to(outside / "weights" if linked.endswith("weights") else outside)
    end = {"names": ["object"], "results": {}, "best": True, "plots": ["secret.png"]}
    send(client, supervisor, "http", "train_end", end)
    send(client, supervisor, "http", "done", {"stopped": False}, seq=2)
    supervisor._succeed(stopped=False)
    assert not stored_secrets(supervisor.job.pk, secret)
    assert not TrainedModel.objects.filter(job_id=supervisor.job.pk).exists()
    # Removing the finished job's folder removed the link, not what it pointed to.
    assert (outside / "weights" / "best.pt").read_bytes() == secret


def test_a_link_planted_in_the_run_folder_is_not_followed(new_job, workers, outside, secret):  # noqa: F811
    """A real run whose run folder holds, before it starts, a plot-named link to a file of the
    worker's: the job succeeds with its own plots and never with that file."""
    job = new_job(epochs=1, extra_args={"plots": True})
    run = Path(settings.TRAINING_DIR) / "jobs" / str(job.pk) / "run"
    run.mkdir(parents=True)
    (run / "zzz.png").symlink_to(outside / "secret.png")
    workers.start()
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED)
    assert job.state == JobState.SUCCEEDED, job.error
    assert "results.png" in job.artifacts  # its own plots are still collected
    assert "zzz.png" not in job.artifacts
    assert not stored_secrets(job.pk, secret)
    assert (outside / "secret.png").read_bytes() == secret + b"secret.png"


LOG = {"lines": ["ok"]}
BAD_BODIES = {
    "not json": b"{not json",
    "not a list": {"events": "many"},
    "unknown kind": {"events": [{"s": 1, "t": "shell", "d": {"cmd": "id"}}]},
    "extra field in an event": {"events": [{"s": 1, "t": "log", "d": LOG, "path": "/etc"}]},
    "extra field in data": {
        "events": [{"s": 1, "t": "epoch", "d": {"epoch": 1, "metrics": {}, "path": "/etc"}}]
    },
    "extra top-level field": {"events": [{"s": 1, "t": "log", "d": LOG}], "also": 1},
    "wrong type": {"events": [{"s": 1, "t": "epoch", "d": {"epoch": "one", "metrics": {}}}]},
    "negative epoch": {"events": [{"s": 1, "t": "epoch", "d": {"epoch": -3, "metrics": {}}}]},
    "seq not a number": {"events": [{"s": "1", "t": "log", "d": LOG}]},
    "a huge line": {"events": [{"s": 1, "t": "log", "d": {"lines": ["x" * 100_000]}}]},
    "too many lines": {"events": [{"s": 1, "t": "log", "d": {"lines": ["x"] * 20_000}}]},
    "too many events": {"events": [{"s": i + 1, "t": "log", "d": LOG} for i in range(5000)]},
    "a metric not a number": {
        "events": [{"s": 1, "t": "epoch", "d": {"epoch": 1, "metrics": {"loss": "NaN!"}}}]
    },
    "too big a body": b'{"events": [], "pad": "' + b"x" * 3_000_000 + b'"}',
}


@pytest.mark.parametrize("name", BAD_BODIES)
def test_bodies_outside_the_schema_are_refused_and_counted(client, supervisor, name):
    job_id = supervisor.job.pk
    response = post(client, job_id, events_token(job_id, 1), BAD_BODIES[name])
    assert response.status_code == 400, response.content
    assert response.json()["detail"]  # a reason the trainer's log can show
    assert not training_redis().exists(stream_key(job_id))
    assert dropped(job_id) == 1


def test_a_token_dies_with_its_attempt(client, supervisor):
    job_id = supervisor.job.pk
    token = events_token(job_id, 1)
    body = {"events": [{"s": 1, "t": "log", "d": LOG}]}
    assert post(client, job_id, token, body).status_code == 200
    training_redis().delete(stream_key(job_id))
    # The reaper ends the attempt as lost and puts the job back in the queue: no new attempt
    # yet, so the job's attempt count is still the token's.
    TrainingAttempt.objects.filter(pk=supervisor.attempt.pk).update(
        ended_at=timezone.now() - timedelta(seconds=5), end_reason=AttemptEnd.LOST
    )
    TrainingJob.objects.filter(pk=job_id).update(state=JobState.QUEUED, lease_owner="")
    assert post(client, job_id, token, body).status_code == 410
    assert not training_redis().exists(stream_key(job_id))


def test_a_token_works_for_its_own_job_only(client, supervisor, new_job):
    other = new_job()
    lease_take(other.pk, "here:2:test")
    training_redis().delete(stream_key(other.pk))
    body = {"events": [{"s": 1, "t": "log", "d": LOG}]}
    # Both jobs are at attempt 1: only the job id tells the tokens apart.
    assert post(client, other.pk, events_token(supervisor.job.pk, 1), body).status_code == 403
    assert post(client, 10**9, events_token(supervisor.job.pk, 1), body).status_code == 403
    assert not training_redis().exists(stream_key(other.pk))
    assert dropped(other.pk) == 0  # a stranger's bodies are not counted on the job
