"""Resume is offered only where another attempt can get past what ended the job: a stopped
job, a lost one, Kestrel's own error, or out of memory or a crash after a checkpoint; never a
failure that would repeat as it is (refused while preparing, a download, refused weights,
training that never began). The job page's button, its live data, the API's job and the
resume service read one rule (training.services.jobs_resume.job_resume_refusal).

And a fine-tune is labelled with its base model's family and size, not the form's default."""

import html
import json
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from core.errors import ServiceError
from tests.training.factories import job_row
from tests.training.helpers import job_reload
from training.models import AttemptEnd, FailureKind, JobState, TrainedModel, TrainingAttempt
from training.process.runner import failure_kind
from training.reaper import jobs_reap
from training.services.jobs import job_resume
from workspaces.services.keys import api_key_create

pytestmark = pytest.mark.django_db


def _url(route: str, **kwargs) -> str:
    return reverse(route, kwargs={"ws_slug": "acme", **kwargs})


def _tag(page: str, testid: str) -> str:
    match = re.search(rf'<[a-z]+ [^>]*data-testid="{testid}"[^>]*>', page)
    assert match, f"no {testid} on the page"
    return match.group(0)


def _live_job(page: str) -> dict:
    match = re.search(
        r'<script id="job-live-data" type="application/json">(.*?)</script>', page, re.S
    )
    return json.loads(match.group(1))["job"]


def _failed(project, version, gpu, kind, checkpoint_epoch=None):
    return job_row(
        project=project,
        version=version,
        gpu=gpu,
        name="run",
        state=JobState.FAILED,
        attempts=1,
        epochs=10,
        epochs_done=checkpoint_epoch or 0,
        checkpoint_epoch=checkpoint_epoch,
        error="what the supervisor said",
        failure_kind=kind,
        finished_at=timezone.now(),
    )


REPEATS = [
    (
        FailureKind.REFUSED,
        None,
        "it was refused while preparing, before training, and would be again; start a new "
        "job once what its reason says is changed",
    ),
    (
        FailureKind.DOWNLOAD,
        None,
        "its pretrained weights could not be downloaded, and that would fail again; start a "
        "new job once the file is on the server, or train from scratch",
    ),
    (
        FailureKind.WEIGHTS,
        None,
        "its weights file was refused, and would be again; start a new job from other weights",
    ),
    (
        FailureKind.START,
        3,  # a resumed run whose next attempt could not start: a checkpoint does not help
        "training never began (Ultralytics refused the model, the data or the arguments), and "
        "would not again; start a new job with what its reason says changed",
    ),
    (
        FailureKind.OUT_OF_MEMORY,
        None,
        "it ran out of memory before its first checkpoint, and would again with the same batch "
        "and image size; start a new job with a lower batch or image size",
    ),
    (
        FailureKind.CRASH,
        None,
        "it failed before its first checkpoint, so there is nothing to continue from; start a "
        "new job",
    ),
]


@pytest.mark.parametrize(("kind", "checkpoint", "why"), REPEATS, ids=[r[0] for r in REPEATS])
def test_a_failure_that_would_repeat_offers_no_resume_and_is_refused(
    client, team, project, detect_version, gpu_local, kind, checkpoint, why
):
    job = _failed(project, detect_version, gpu_local, kind, checkpoint)
    client.force_login(team.editor)
    page = client.get(_url("job_detail", pk=job.pk)).content.decode()

    reason = f"run cannot be resumed: {why}."
    assert "hidden" in _tag(page, "job-resume-form")
    note = re.search(r'<p [^>]*data-testid="job-no-resume"[^>]*>(.*?)</p>', page, re.S)
    assert "hidden" not in _tag(page, "job-no-resume") and html.unescape(note.group(1)) == reason
    live = _live_job(page)  # what the page's script keeps the button to
    assert live["resumable"] is False and live["no_resume"] == reason

    with pytest.raises(ServiceError) as refused:
        job_resume(access=team.access("editor"), job=job)
    assert str(refused.value) == reason
    response = client.post(_url("job_resume", pk=job.pk), follow=True)
    assert reason in html.unescape(response.content.decode())
    assert job_reload(job).state == JobState.FAILED

    _, raw = api_key_create(access=team.access("owner"), name="ci", scopes=["read", "train"])
    api = Client(headers={"Authorization": f"Bearer {raw}"})
    read = api.get(f"/api/v1/training/jobs/{job.pk}").json()
    assert read["resumable"] is False and read["failure_kind"] == kind
    response = api.post(f"/api/v1/training/jobs/{job.pk}/resume")
    assert response.status_code == 400 and response.json()["detail"] == reason
    assert job_reload(job).state == JobState.FAILED


RESUMABLE = [
    ("stopped", None, None),
    ("stopped", None, 2),
    ("failed", FailureKind.LOST, None),
    ("failed", FailureKind.PLATFORM, None),
    ("failed", FailureKind.OUT_OF_MEMORY, 4),
    ("failed", FailureKind.CRASH, 4),
    ("failed", "", None),  # failed before Kestrel kept the kind: as before, it may be resumed
]


@pytest.mark.parametrize(
    ("state", "kind", "checkpoint"),
    RESUMABLE,
    ids=[f"{s}-{k or 'unknown'}-{c}" for s, k, c in RESUMABLE],
)
def test_what_another_attempt_can_get_past_offers_resume_and_queues_again(
    client, team, project, detect_version, gpu_local, state, kind, checkpoint
):
    job = _failed(project, detect_version, gpu_local, kind or "", checkpoint)
    job.state = state
    job.save(update_fields=["state"])
    client.force_login(team.editor)
    page = client.get(_url("job_detail", pk=job.pk)).content.decode()

    assert "hidden" not in _tag(page, "job-resume-form")
    assert "hidden" in _tag(page, "job-no-resume")
    assert _live_job(page)["resumable"] is True

    response = client.post(_url("job_resume", pk=job.pk))
    assert response.status_code == 302
    job = job_reload(job)
    assert job.state == JobState.QUEUED and job.failure_kind == "" and job.error == ""


def test_a_job_lost_too_many_times_fails_as_lost_and_can_be_resumed(
    client, team, project, detect_version, gpu_local
):
    long_ago = timezone.now() - timedelta(minutes=5)
    job = job_row(
        project=project,
        version=detect_version,
        gpu=gpu_local,
        state=JobState.RUNNING,
        heartbeat_at=long_ago,
        lost_attempts=2,
        attempts=3,
        lease_owner="gone:1:x",
        lease_until=long_ago,
    )
    TrainingAttempt.objects.create(job=job, number=3, worker="gone:1:x")
    assert jobs_reap() == 1

    job = job_reload(job)
    assert job.state == JobState.FAILED and job.failure_kind == FailureKind.LOST
    client.force_login(team.editor)
    page = client.get(_url("job_detail", pk=job.pk)).content.decode()
    assert "hidden" not in _tag(page, "job-resume-form")
    job_resume(access=team.access("editor"), job=job)
    assert job_reload(job).state == JobState.QUEUED


def test_the_trainer_names_what_failed_by_when_and_what_it_was():
    import torch

    oom = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert failure_kind(oom, started=False) == "oom"
    assert failure_kind(oom, started=True) == "oom"
    assert failure_kind(RuntimeError("DefaultCPUAllocator: out of memory"), started=True) == "oom"
    download = ConnectionError("Download failure for https://example.org/yolo11n.pt.")
    assert failure_kind(download, started=False) == "download"
    assert failure_kind(SyntaxError("'lr00' is not a valid YOLO argument."), started=False) == (
        "start"
    )
    assert failure_kind(FileNotFoundError("images/val"), started=False) == "start"
    assert failure_kind(RuntimeError("CUDA error: an illegal memory access"), started=True) == (
        "crash"
    )


@pytest.mark.django_db(transaction=True)
def test_refused_weights_fail_the_job_for_good(team, project, detect_version, gpu_local):
    """A real attempt: the trainer refuses a base model's weights, and the job says Resume
    cannot help."""
    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage

    from training.process.supervisor import run_job
    from training.services.arguments import TrainParams
    from training.services.jobs import job_submit

    key = default_storage.save("models/broken.pt", ContentFile(b"PK\x03\x04 not a checkpoint"))
    base = TrainedModel.objects.create(
        workspace=team.workspace,
        project=project,
        name="broken",
        task="detect",
        architecture="yolo11n",
        imgsz=64,
        weights_key=key,
    )
    params = TrainParams(
        task="detect", model_family="yolo11", model_size="n", weights="model", epochs=1, imgsz=64
    )
    job = job_submit(
        access=team.access("editor"),
        project=project,
        version=detect_version,
        gpu_type_id=gpu_local.pk,
        params=params,
        base_model=base,
    )
    run_job(job.pk)

    job = job_reload(job)
    assert job.state == JobState.FAILED and job.failure_kind == FailureKind.WEIGHTS, job.error
    assert job.error.startswith("The weights file was refused: ")
    assert job.attempt_rows.get().end_reason == AttemptEnd.FAILED
    with pytest.raises(ServiceError, match="its weights file was refused, and would be again"):
        job_resume(access=team.access("editor"), job=job)


# --- the fine-tune's label ------------------------------------------------------------------------


def test_a_fine_tune_takes_its_base_models_family_and_size(
    client, team, project, detect_version, gpu_local
):
    base = TrainedModel.objects.create(
        workspace=team.workspace,
        project=project,
        name="last week's detector",
        task="detect",
        architecture="yolo11n",
        imgsz=64,
        weights_key="models/base.pt",
    )
    client.force_login(team.editor)
    data = {
        "dataset_version": detect_version.pk,
        "task": "",
        "model_family": "yolo26",  # the form's defaults, untouched
        "model_size": "s",
        "weights": "model",
        "base_model": base.pk,
        "epochs": 3,
        "imgsz": 64,
        "batch": "auto",
        "patience": 100,
        "optimizer": "auto",
        "seed": 0,
        "gpu_type": gpu_local.pk,
        "extra_args": "",
        "start": "1",
    }
    response = client.post(_url("job_create", pk=project.pk), data)
    assert response.status_code == 302, html.unescape(response.content.decode())[:3000]
    job = base.project.jobs.get()
    assert (job.model_family, job.model_size, job.model_name) == ("yolo11", "n", "yolo11n")
    assert job.base_model == base

    page = html.unescape(client.get(response["Location"]).content.decode())
    assert "<dt>Model</dt><dd><code>yolo11n</code> · a previous kestrel model: " in page
    runs = html.unescape(client.get(_url("job_list")).content.decode())
    row = re.search(r'<tr data-testid="job-row">.*?</tr>', runs, re.S).group(0)
    assert "<code>yolo11n</code>" in row and "yolo26" not in row
