"""Issue 31, item 2: an ended run still accepted writes.

A run reported by the stock `ultralytics` client (the platform webhooks) had ended, yet its
unexpired upload URL still took a PUT (200, `stored: best.pt`) and a `checkpoint_saved` for it
replaced the job's best.pt after the model was made from it. Now every route of an ended run
answers 410 and changes nothing, and an upload URL is bound to its attempt and dies with it,
as a remote trainer's already did (and now also when its attempt ended but the job is queued
again). The requests go through Django's test client with the bodies the stock client sends
(tests/training/test_platform_webhooks.py); the files are real, in the suite's storage.
"""

import hashlib
import io
import json

import pytest
from django.core.files.storage import default_storage
from django.utils import timezone

from core.errors import ServiceError
from core.storage import storage_exists
from tests.training.conftest import detect_version, gpu_local, project  # noqa: F401 (fixtures)
from tests.training.helpers import submit
from tests.training.test_platform_webhooks import (
    UPLOAD,
    checkpoint_bytes,
    complete,
    epoch_data,
    send,
    start,
    started_data,
    upload,
    upload_url,
)
from training import remote
from training.models import (
    AttemptEnd,
    ExternalUpload,
    JobState,
    TrainedModel,
    TrainingAttempt,
    TrainingJob,
)
from training.services.external_uploads import external_upload_store
from training.services.jobs import job_stop
from training.trainer_events import events_token
from workspaces.models import Project
from workspaces.services.keys import api_key_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def bird_watch(team) -> Project:
    return Project.objects.create(
        workspace=team.workspace, name="Bird Watch", created_by=team.owner
    )


@pytest.fixture
def key(team) -> str:
    return api_key_create(access=team.access("admin"), name="laptop", scopes=["train"])[1]


def other_weights(marker: bytes) -> bytes:
    """A zip as torch.save writes one (what the PUT checks), unlike any other of the test."""
    buffer = io.BytesIO()
    import zipfile

    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr(zipfile.ZipInfo("archive/data.pkl", (2026, 1, 1, 0, 0, 0)), marker)
    return buffer.getvalue()


def finished_run(client, key) -> tuple[dict, TrainingJob, TrainedModel, dict]:
    """A run that uploaded its best.pt and ended with its model; and an upload URL it was
    handed while it ran (unexpired, never used)."""
    answer = start(client, key)
    model_id, run_id = answer["modelId"], answer["runId"]
    send(client, key, "epoch_end", epoch_data(0), modelId=model_id)
    spare = upload_url(client, key, model_id)  # held back by whoever has the client's key
    body, put = upload(client, key, model_id, run_id, checkpoint_bytes())
    assert put.status_code == 200, put.content
    saved = {"modelPath": body["gcsPath"], "runId": run_id}
    assert send(client, key, "checkpoint_saved", saved, modelId=model_id).status_code == 200
    assert complete(client, key, model_id, run_id, body["gcsPath"]).status_code == 200
    job = TrainingJob.objects.get(pk=model_id)
    assert job.state == JobState.SUCCEEDED
    return answer, job, TrainedModel.objects.get(job=job), spare


def _stored_bytes(job: TrainingJob, model: TrainedModel) -> dict[str, bytes]:
    """Every file of the job's and its model's, by storage key."""
    found = {}
    for folder in (f"training/jobs/{job.pk}", f"models/{model.pk}"):
        stack = [folder]
        while stack:
            here = stack.pop()
            if not default_storage.exists(here):
                continue
            folders, files = default_storage.listdir(here)
            stack += [f"{here}/{name}" for name in folders]
            for name in files:
                with default_storage.open(f"{here}/{name}", "rb") as f:
                    found[f"{here}/{name}"] = f.read()
    return found


def test_an_upload_url_of_an_ended_run_takes_nothing(client, key, bird_watch):
    _, job, model, spare = finished_run(client, key)
    before = _stored_bytes(job, model)
    late = client.put(
        spare["uploadUrl"], other_weights(b"late"), content_type="application/octet-stream"
    )
    assert late.status_code == 410, late.content
    assert "has ended (succeeded)" in late.json()["error"]
    assert _stored_bytes(job, model) == before  # nothing stored, nothing replaced
    assert not storage_exists(ExternalUpload.objects.get(token=spare["gcsPath"]).key)
    model.refresh_from_db()
    with default_storage.open(model.weights_key, "rb") as f:
        assert hashlib.sha256(f.read()).hexdigest() == model.weights_sha256


def test_checkpoint_saved_after_the_end_changes_nothing(client, key, bird_watch):
    """A second file PUT while the run went on (never named by checkpoint_saved), named after
    the run ended: 410, and the job's files and model stay those it ended with."""
    answer = start(client, key)
    model_id, run_id = answer["modelId"], answer["runId"]
    body, put = upload(client, key, model_id, run_id, checkpoint_bytes())
    assert put.status_code == 200
    swap, put = upload(client, key, model_id, run_id, other_weights(b"swapped in later"))
    assert put.status_code == 200
    assert complete(client, key, model_id, run_id, body["gcsPath"]).status_code == 200
    job = TrainingJob.objects.get(pk=model_id)
    model = TrainedModel.objects.get(job=job)
    before, artifacts = _stored_bytes(job, model), dict(job.artifacts)

    saved = {"modelPath": swap["gcsPath"], "runId": run_id}
    response = send(client, key, "checkpoint_saved", saved, modelId=model_id)
    assert response.status_code == 410, response.content
    assert "has ended" in response.json()["error"]
    job.refresh_from_db()
    assert job.artifacts == artifacts and job.state == JobState.SUCCEEDED
    assert _stored_bytes(job, model) == before
    model.refresh_from_db()
    assert model.weights_sha256 == hashlib.sha256(checkpoint_bytes()).hexdigest()


def test_every_route_of_an_ended_run_answers_410(client, key, bird_watch):
    answer, job, model, _ = finished_run(client, key)
    model_id, run_id = answer["modelId"], answer["runId"]
    epochs, finished_at = job.epochs_done, job.finished_at
    events = [
        ("epoch_end", epoch_data(2)),
        ("console_output", {"chunkId": 1764670000009, "content": "after the end"}),
        ("system_metrics", {"cpu": 1.0}),
        ("training_progress", {}),
        ("checkpoint_saved", {"modelPath": "anything", "runId": run_id}),
        ("training_complete", {"results": {"metrics": {"fitness": 0.9}}, "runId": run_id}),
    ]
    for event, data in events:
        response = send(client, key, event, data, modelId=model_id)
        assert response.status_code == 410, (event, response.content)
        assert "has ended (succeeded)" in response.json()["error"], event
    asked = client.post(
        UPLOAD,
        json.dumps({"modelId": model_id, "runId": run_id, "filename": "best.pt"}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )
    assert asked.status_code == 410, asked.content
    job.refresh_from_db()
    assert (job.epochs_done, job.finished_at) == (epochs, finished_at)
    assert job.final_metrics == {"metrics/mAP50(B)": 0.42, "fitness": 0.3}
    assert not job.log_chunks.filter(text__contains="after the end").exists()
    # The one exception: resuming an ended run is answered `cancelled`, so that the client
    # reports a new run (a 410 would leave it untracked); the ended one stays as it was.
    resumed = send(client, key, "training_started", started_data(), modelId=model_id)
    assert resumed.status_code == 200 and resumed.json()["cancelled"] is True
    assert TrainingJob.objects.get(pk=model_id).state == JobState.SUCCEEDED


def test_an_upload_url_dies_with_its_attempt(client, key, team, bird_watch):
    """A stopped run resumed with resume=True: the first attempt's URL takes nothing, the
    second attempt's does."""
    answer = start(client, key)
    model_id = answer["modelId"]
    first = upload_url(client, key, model_id)
    job_stop(access=team.access("editor"), job=TrainingJob.objects.get(pk=model_id))
    assert complete(client, key, model_id, answer["runId"]).status_code == 200
    resumed = send(client, key, "training_started", started_data(), modelId=model_id).json()
    assert TrainingJob.objects.get(pk=model_id).attempts == 2

    stale = client.put(
        first["uploadUrl"], checkpoint_bytes(), content_type="application/octet-stream"
    )
    assert stale.status_code == 410, stale.content
    assert "attempt 1" in stale.json()["error"]
    assert not storage_exists(ExternalUpload.objects.get(token=first["gcsPath"]).key)
    # The live attempt's URL works, and the first attempt's upload cannot be named for it.
    body, put = upload(client, key, model_id, resumed["runId"], checkpoint_bytes())
    assert put.status_code == 200, put.content
    saved = {"modelPath": first["gcsPath"], "runId": resumed["runId"]}
    assert send(client, key, "checkpoint_saved", saved, modelId=model_id).status_code in (404, 410)


class _EndsTheRunMidway(io.RawIOBase):
    """The body of a PUT during which the run ends: training_complete arrives between two
    of its blocks, as it would from the client's other thread."""

    def __init__(self, blocks: list[bytes], end_run):
        self.blocks, self.end_run = list(blocks), end_run

    def read(self, size=-1) -> bytes:
        if not self.blocks:
            return b""
        if len(self.blocks) == 1:
            self.end_run()
        return self.blocks.pop(0)


def test_a_put_under_way_when_the_run_ends_keeps_nothing(client, key, bird_watch):
    from training.services.external_runs.events import external_complete

    answer = start(client, key)
    model_id = answer["modelId"]
    body = upload_url(client, key, model_id)
    token = body["gcsPath"]
    query = dict(part.split("=", 1) for part in body["uploadUrl"].split("?", 1)[1].split("&"))
    data = checkpoint_bytes()

    def end_run() -> None:
        external_complete(job=TrainingJob.objects.get(pk=model_id), data={"results": {}})

    with pytest.raises(ServiceError, match="has ended"):  # RunEnded: the view's 410
        external_upload_store(
            token=token,
            expires=query["exp"],
            signature=query["sig"],
            body=_EndsTheRunMidway([data[:10], data[10:]], end_run),
            declared=str(len(data)),
        )
    row = ExternalUpload.objects.get(token=token)
    assert row.size == 0 and "has ended" in row.error
    assert not storage_exists(row.key)
    assert not TrainedModel.objects.filter(job_id=model_id).exists()


def test_a_remote_trainers_upload_url_dies_with_its_attempt_even_before_the_next(
    client,
    team,
    project,  # noqa: F811 - the fixtures imported above
    detect_version,  # noqa: F811
    gpu_local,  # noqa: F811
):
    """The reaper ended attempt 1 and queued the job again; attempt 2 has not started: the
    URL attempt 1 was handed takes nothing (before, only a final job or a newer attempt
    number refused it)."""
    job = submit(team, project, detect_version, gpu_local)
    TrainingJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING, attempts=1)
    attempt = TrainingAttempt.objects.create(job=job, number=1, worker="w:1:a")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {events_token(job.pk, 1)}"}
    asked = client.post(
        f"/api/v1/trainer/jobs/{job.pk}/uploads",
        json.dumps({"name": "last-1.pt"}),
        content_type="application/json",
        **auth,
    )
    assert asked.status_code == 200, asked.content
    TrainingAttempt.objects.filter(pk=attempt.pk).update(
        ended_at=timezone.now(), end_reason=AttemptEnd.LOST
    )
    TrainingJob.objects.filter(pk=job.pk).update(state=JobState.QUEUED)
    put = client.put(
        asked.json()["url"], checkpoint_bytes(), content_type="application/octet-stream"
    )
    assert put.status_code == 410, put.content
    assert not storage_exists(remote.attempt_files_key(job.pk, 1, "last-1.pt"))
