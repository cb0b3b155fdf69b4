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
from training.streams import control_key, stream_key, training_redis
from training.trainer_events import events_token

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
    training_redis().delete(stream_key(job.pk), control_key(job.pk))
    return job


def test_events_with_the_attempts_token_go_into_the_stream(client, running):
    training_redis().set(control_key(running.pk), "stop")
    event = {"s": 1, "t": "epoch", "d": {"epoch": 1, "metrics": {}}}
    response = post(client, running.pk, events_token(running.pk, 2), [event])
    assert response.status_code == 200, response.content
    assert response.json() == {"accepted": 1, "attempt": 2, "control": "stop"}
    [(_, fields)] = training_redis().xrange(stream_key(running.pk))
    assert fields[b"a"] == b"2" and fields[b"t"] == b"epoch" and fields[b"s"] == b"1"


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
