"""What a remote trainer fetches and uploads (training.remote): each route takes only the live
attempt's token, and an upload URL is good for one file of one attempt, for a few minutes."""

import io
import json
import zipfile
from urllib.parse import urlsplit

import pytest
from django.utils import timezone

from core.storage import storage_delete, storage_exists, storage_get_file
from tests.training.helpers import submit
from training import remote
from training.models import AttemptEnd, JobState, TrainingAttempt, TrainingJob
from training.streams import kept_key, sent_key, training_redis
from training.trainer_events import events_token

pytestmark = pytest.mark.django_db


@pytest.fixture
def running(team, project, detect_version, gpu_local):
    job = submit(team, project, detect_version, gpu_local)
    TrainingJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING, attempts=2)
    TrainingAttempt.objects.create(
        job=job, number=1, worker="w:1:a", ended_at=timezone.now(), end_reason=AttemptEnd.LOST
    )
    TrainingAttempt.objects.create(job=job, number=2, worker="w:1:b")
    spec = {"job_id": job.pk, "attempt": 2, "task": "detect", "model": "yolo11n.yaml"}
    spec |= {"train_args": {"epochs": 2, "data": "/srv/x/data.yaml", "project": "/srv/x"}}
    spec |= {"system_sample_seconds": 5, "spool_drain_seconds": 40}
    remote.remote_spec_store(spec, base_url="https://kestrel.example.com", subset=None)
    yield job
    training_redis().delete(remote.spec_key(job.pk, 2))


def auth(job, attempt=2) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {events_token(job.pk, attempt)}"}


def base(job) -> str:
    return f"/api/v1/trainer/jobs/{job.pk}"


def test_the_spec_has_urls_where_the_workers_has_paths(client, running):
    spec = client.get(f"{base(running)}/spec", **auth(running)).json()
    job_url = f"https://kestrel.example.com/api/v1/trainer/jobs/{running.pk}"
    assert spec["dataset_url"] == f"{job_url}/dataset"
    assert spec["events_url"] == f"{job_url}/events"
    assert spec["train_args"] == {"epochs": 2}  # no path of the worker's machine
    assert spec["model"] == "yolo11n.yaml" and spec["model_url"] is None
    assert spec["lease_seconds"] == 40
    assert "/srv/x" not in json.dumps(spec)


def test_a_replaced_machine_resumes_and_numbers_its_events_after_the_old_ones(client, running):
    """A preempted spot machine, replaced by the provider within the same attempt: its new
    trainer asks for the spec again and gets the last checkpoint and where to number from."""
    first = client.get(f"{base(running)}/spec", **auth(running)).json()
    assert first["resume_url"] is None and first["seq_from"] == 0
    TrainingJob.objects.filter(pk=running.pk).update(checkpoint_epoch=3)
    redis = training_redis()
    redis.set(kept_key(running.pk), 40)
    redis.set(sent_key(running.pk, 2), 47)
    again = client.get(f"{base(running)}/spec", **auth(running)).json()
    assert again["resume_url"].endswith(f"/trainer/jobs/{running.pk}/weights/resume")
    assert again["seq_from"] == 47
    redis.delete(kept_key(running.pk), sent_key(running.pk, 2))


@pytest.mark.parametrize("route", ["spec", "dataset", "weights/model"])
def test_only_the_live_attempts_token_opens_a_route(client, running, route):
    url = f"{base(running)}/{route}"
    assert client.get(url).status_code == 403
    assert client.get(url, HTTP_AUTHORIZATION="Bearer 2.forged").status_code == 403
    other = {"HTTP_AUTHORIZATION": f"Bearer {events_token(running.pk + 1, 2)}"}
    assert client.get(url, **other).status_code == 403
    assert client.get(url, **auth(running, attempt=1)).status_code == 409
    TrainingAttempt.objects.filter(job=running, number=2).update(ended_at=timezone.now())
    assert client.get(url, **auth(running)).status_code == 410


def test_the_dataset_is_a_yolo_zip_built_once(client, running):
    response = client.get(f"{base(running)}/dataset", **auth(running))
    assert response.status_code == 200
    body = b"".join(response.streaming_content)
    names = zipfile.ZipFile(io.BytesIO(body)).namelist()
    assert "data.yaml" in names and any(n.startswith("images/train/") for n in names)
    version = running.dataset_version
    assert storage_exists(remote.dataset_archive_key(version.content_hash, None))


def test_weights_come_from_the_jobs_rows_only(client, running):
    assert client.get(f"{base(running)}/weights/model", **auth(running)).status_code == 404
    assert client.get(f"{base(running)}/weights/resume", **auth(running)).status_code == 404
    assert client.get(f"{base(running)}/weights/..%2F..%2Fetc", **auth(running)).status_code == 404


def _upload_url(client, job, name="last-1.pt"):
    answer = client.post(
        f"{base(job)}/uploads",
        data=json.dumps({"name": name}),
        content_type="application/json",
        **auth(job),
    )
    return answer


def _put(client, url, body=b"weights", **extra):
    parts = urlsplit(url)
    return client.put(
        f"{parts.path}?{parts.query}",
        data=body,
        content_type="application/octet-stream",
        **extra,
    )


def test_an_upload_url_stores_one_file_of_the_attempt(client, running, tmp_path):
    answer = _upload_url(client, running)
    assert answer.status_code == 200
    url = answer.json()["url"]
    assert _put(client, url).status_code == 200  # no Authorization: the URL is the key
    key = remote.attempt_files_key(running.pk, 2, "last-1.pt")
    storage_get_file(key, tmp_path / "got.pt")
    assert (tmp_path / "got.pt").read_bytes() == b"weights"
    # The same signature for another name, a forged one, and an expired one are refused.
    parts = urlsplit(url)
    other = url.replace("last-1.pt", "best-1.pt")
    assert _put(client, other).status_code == 403
    assert _put(client, f"{parts.scheme}://x{parts.path}?exp=9999999999&sig=00").status_code == 403
    expired = remote._upload_signature(running.pk, 2, "last-1.pt", 1)
    assert _put(client, f"http://x{parts.path}?exp=1&sig={expired}").status_code == 403


@pytest.mark.parametrize("name", ["../last-1.pt", "last-x.pt", "evil.sh", "", None, "a" * 200])
def test_upload_names_are_checkpoints_and_run_files_only(client, running, name):
    assert _upload_url(client, running, name).status_code == 400


def test_an_upload_after_its_attempt_ended_or_too_big_is_refused(client, running):
    key = remote.attempt_files_key(running.pk, 2, "last-1.pt")
    if storage_exists(key):  # SQLite hands ids out again: an earlier test's job 1 stored it
        storage_delete(key)
    url = _upload_url(client, running).json()["url"]
    too_big = _put(client, url, CONTENT_LENGTH=str(remote.MAX_WEIGHTS_BYTES + 1))
    assert too_big.status_code == 413
    assert _put(client, url, CONTENT_LENGTH="").status_code == 411  # its size unsaid
    TrainingJob.objects.filter(pk=running.pk).update(attempts=3)
    assert _put(client, url).status_code == 410
    assert not storage_exists(key)
