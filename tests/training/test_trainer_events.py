"""Trainers that cannot reach Redis report over HTTP with a per-attempt token into the same
stream: the endpoint's refusals, and a real job trained that way end to end."""

import json

import pytest
from django.test import override_settings
from django.utils import timezone

from tests.training.helpers import submit, wait_state
from training.models import (
    AttemptEnd,
    EpochMetric,
    JobState,
    TrainedModel,
    TrainingAttempt,
    TrainingJob,
)
from training.streams import control_key, kept_key, sent_key, stream_key, training_redis
from training.trainer_events import SEQ_AHEAD_MAX, events_token

pytestmark = pytest.mark.django_db(transaction=True)


def post(client, job_id, token, events):
    return client.post(
        f"/api/v1/trainer/jobs/{job_id}/events",
        data=json.dumps({"events": events}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {token}",
    )


@pytest.fixture
def running(team, project, detect_version, gpu_local):
    job = submit(team, project, detect_version, gpu_local)
    TrainingJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING, attempts=2)
    # The first attempt was lost; the second runs now.
    TrainingAttempt.objects.create(
        job=job, number=1, worker="w:1:a", ended_at=timezone.now(), end_reason=AttemptEnd.LOST
    )
    TrainingAttempt.objects.create(job=job, number=2, worker="w:1:b")
    training_redis().delete(
        stream_key(job.pk), control_key(job.pk), kept_key(job.pk), sent_key(job.pk, 2)
    )
    return job


def log(seq: int) -> dict:
    return {"s": seq, "t": "log", "d": {"lines": [f"line {seq}"]}}


def test_events_with_the_attempts_token_go_into_the_stream(client, running):
    training_redis().set(control_key(running.pk), "stop")
    event = {"s": 1, "t": "epoch", "d": {"epoch": 1, "metrics": {}}}
    response = post(client, running.pk, events_token(running.pk, 2), [event])
    assert response.status_code == 200, response.content
    assert response.json() == {
        "accepted": 1,
        "ignored": 0,
        "kept": 0,
        "attempt": 2,
        "control": "stop",
    }
    [(_, fields)] = training_redis().xrange(stream_key(running.pk))
    assert fields[b"a"] == b"2" and fields[b"t"] == b"epoch" and fields[b"s"] == b"1"


def test_the_answer_says_what_is_kept_and_what_was_stored_before_is_ignored(client, running):
    token = events_token(running.pk, 2)
    assert post(client, running.pk, token, [log(1), log(2), log(3)]).json()["accepted"] == 3
    training_redis().set(kept_key(running.pk), 2)  # the supervisor stored 1 and 2
    # The answer to that batch was lost: the trainer sends it again, with what came after.
    answer = post(client, running.pk, token, [log(1), log(2), log(3), log(4)]).json()
    assert (answer["accepted"], answer["ignored"], answer["kept"]) == (2, 2, 2)
    seqs = [f[b"s"] for _, f in training_redis().xrange(stream_key(running.pk))]
    assert seqs == [b"1", b"2", b"3", b"3", b"4"]  # 3 twice: the supervisor tells it by number
    running.refresh_from_db()
    assert running.resent_events == 2 and running.dropped_events == 0
    # An empty batch only asks what is kept.
    answer = post(client, running.pk, token, []).json()
    assert (answer["accepted"], answer["kept"]) == (0, 2)


def test_the_job_page_says_how_many_events_were_sent_again(client, running, team):
    from django.urls import reverse

    TrainingJob.objects.filter(pk=running.pk).update(resent_events=3)
    client.force_login(team.owner)
    page = client.get(
        reverse("job_detail", kwargs={"ws_slug": running.workspace.slug, "pk": running.pk})
    )
    said = "3 messages the trainer sent again after a lost answer, kept once"
    assert said in page.content.decode()


def test_a_sequence_number_far_past_the_last_sent_is_refused(client, running):
    token = events_token(running.pk, 2)
    assert post(client, running.pk, token, [log(1)]).status_code == 200
    far = post(client, running.pk, token, [log(2 + SEQ_AHEAD_MAX)])
    assert far.status_code == 400 and "sequence number" in far.json()["detail"]
    near = post(client, running.pk, token, [log(1 + SEQ_AHEAD_MAX)])  # a long outage's gap
    assert near.status_code == 200
    assert len(training_redis().xrange(stream_key(running.pk))) == 2
    running.refresh_from_db()
    assert running.dropped_events == 1


@pytest.mark.parametrize(
    ("token", "status"),
    [
        ("", 403),
        ("2.forged", 403),
        (lambda job: events_token(job.pk + 1, 2), 403),  # another job's
        (lambda job: events_token(job.pk, 1), 409),  # an older attempt's
    ],
)
def test_wrong_tokens_are_refused(client, running, token, status):
    token = token(running) if callable(token) else token
    response = post(client, running.pk, token, [{"s": 1, "t": "log", "d": {"lines": []}}])
    assert response.status_code == status
    assert not training_redis().exists(stream_key(running.pk))


def test_bad_bodies_and_ended_jobs_are_refused(client, running):
    token = events_token(running.pk, 2)
    assert post(client, running.pk, token, [{"s": "x", "t": "epoch", "d": {}}]).status_code == 400
    assert post(client, running.pk, token, [{"s": 1, "t": "shell", "d": {}}]).status_code == 400
    TrainingJob.objects.filter(pk=running.pk).update(state=JobState.CANCELED)
    assert post(client, running.pk, token, []).status_code == 410


def test_a_job_trains_with_its_events_over_http(
    team, project, detect_version, gpu_local, workers, live_server
):
    workers.env_extra["TRAINING_EVENTS_URL"] = live_server.url
    job = submit(team, project, detect_version, gpu_local, epochs=2)
    with override_settings(TRAINING_EVENTS_URL=live_server.url):
        workers.start()
        job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED)
    assert job.state == JobState.SUCCEEDED, job.error
    assert [m.epoch for m in EpochMetric.objects.filter(job=job)] == [1, 2]
    assert job.checkpoint_epoch == 2 and job.log_chunks.exists()
    assert TrainedModel.objects.filter(job=job).exists()


def test_a_logged_in_owner_without_the_token_is_refused(client, running, team):
    client.force_login(team.owner)
    response = post(client, running.pk, "", [{"s": 1, "t": "log", "d": {"lines": []}}])
    assert response.status_code == 403


def _wait(predicate, timeout=15.0):
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_remote_trainer_keeps_its_events_until_kestrel_stored_them(
    running, live_server, tmp_path
):
    """The trainer's side: what Kestrel took but did not store (its Redis restarted empty) is
    sent again after a while; what it stored is forgotten, and close() waits for that."""
    from training.process.events import HttpEvents

    (tmp_path / "checkpoints").mkdir()
    events = HttpEvents(
        {
            "events_url": f"{live_server.url}/api/v1/trainer/jobs/{running.pk}/events",
            "events_token": events_token(running.pk, 2),
            "attempt": 2,
            "checkpoint_dir": str(tmp_path / "checkpoints"),
            "kept_stall_seconds": 1.0,
            "spool_drain_seconds": 10,
        }
    )
    redis = training_redis()
    key = stream_key(running.pk)
    for n in range(3):
        events.emit("log", {"lines": [f"line {n}"]})
    assert _wait(lambda: redis.xlen(key) == 3)
    assert events.spool.kept == 0 and events.spool.size > 0  # sent, not yet stored
    redis.delete(key)  # lost before the supervisor read it
    assert _wait(lambda: redis.xlen(key) == 3), "not sent again"
    redis.set(kept_key(running.pk), 3)  # the supervisor stored them
    assert _wait(lambda: events.spool.size == 0), "stored events are still kept on disk"
    events.emit("done", {"stopped": False})
    redis.set(kept_key(running.pk), 4)
    events.close()
    assert events.spool.size == 0
    assert [f[b"t"] for _, f in redis.xrange(key)][-1] == b"done"
