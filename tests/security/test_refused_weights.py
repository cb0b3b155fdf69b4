"""Issue 31, item 3 (and "the inspection error names no storage key"): weights that failed
inspection were served anyway.

A best.pt whose pickle calls `os.system`, uploaded through the stock client's route, was
refused as a model (deleted from models/) but stayed at training/jobs/<id>/best.pt, the job
said "succeeded" with no error, and the job's files served it to every member; a teammate who
loaded it with plain `torch.load` ran the code. Now every checkpoint Kestrel keeps, whichever way
it came (the trainer, a remote trainer, the stock client, an upload), passes the same inspection
before it is kept or served: until then nothing links to it or serves it, one that fails is
deleted, and the job says why. The hostile files are the ones tests/security/
test_checkpoint_attacks.py writes opcode by opcode; the inspection is the real worker process
(through a real Celery worker where the flow sends it one).
"""

import json
import shutil
import time
from pathlib import Path

import pytest
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse

from core.storage import storage_exists
from tests.security.test_checkpoint_attacks import marker, shell_checkpoint  # noqa: F401
from tests.security.test_trainer_events import new_job, send, supervisor  # noqa: F401
from tests.training.conftest import detect_version, gpu_local, project  # noqa: F401 (fixtures)
from tests.training.test_platform_webhooks import complete, start, upload
from training.models import FailureKind, InspectState, JobState, TrainedModel, TrainingJob
from training.providers.base import Machine
from training.services.inspection import model_inspect_run
from training.services.models import model_upload
from training.trainer_events import events_token
from workspaces.models import Project
from workspaces.selectors import workspace_access_for_user
from workspaces.services.keys import api_key_create


@pytest.fixture(scope="module")
def clean_weights(tmp_path_factory) -> Path:
    """A real YOLO11n checkpoint (built from its YAML: nothing is downloaded here)."""
    from annotation.assist import _ultralytics_env

    _ultralytics_env()  # offline, restricted loading, as every process that opens weights
    from ultralytics import YOLO

    path = tmp_path_factory.mktemp("clean-weights") / "yolo11n.pt"
    YOLO("yolo11n.yaml").save(path)
    return path


@pytest.fixture
def hostile(tmp_path, marker) -> bytes:  # noqa: F811 - the fixture imported above
    """A best.pt whose pickle runs `touch <marker>` through os.system when fully unpickled."""
    return shell_checkpoint(tmp_path / "best.pt", marker).read_bytes()


def member_of(team) -> Client:
    viewer = Client()
    viewer.force_login(team.viewer)
    return viewer


def job_file(team, job_id: int, name: str) -> str:
    ws = team.workspace.slug
    return reverse("job_artifact", kwargs={"ws_slug": ws, "pk": job_id, "name": name})


def weights_urls(team, model_id: int) -> list[str]:
    ws = team.workspace.slug
    return [
        reverse("model_weights", kwargs={"ws_slug": ws, "pk": model_id}),
        f"/api/v1/models/{model_id}/weights",
    ]


def stored_with(data: bytes, *folders: str) -> list[str]:
    """Storage keys under `folders` whose bytes are `data`."""
    found, stack = [], list(folders)
    while stack:
        here = stack.pop()
        if not default_storage.exists(here):
            continue
        sub, files = default_storage.listdir(here)
        stack += [f"{here}/{name}" for name in sub]
        for name in files:
            with default_storage.open(f"{here}/{name}", "rb") as f:
                if f.read() == data:
                    found.append(f"{here}/{name}")
    return found


def _no_storage_key(text: str, model: TrainedModel) -> None:
    assert model.weights_key not in text and model.weights_sha256[:16] not in text, text
    assert "training/jobs/" not in text and "models/" not in text, text


# --- the stock client ------------------------------------------------------------------------


@pytest.mark.same_on_any_database(
    "the stock client's upload and the inspection are what is tested; the rows are written as in "
    "the other tests here, which run on both"
)
@pytest.mark.django_db(transaction=True)
def test_a_stock_clients_best_pt_is_served_only_once_it_passed(
    client,
    team,
    celery_worker_process,
    clean_weights,
    hostile,
    marker,  # noqa: F811
):
    """Two runs through the stock client's routes, one with a hostile best.pt and one with a
    clean one; a real worker inspects both. Pending: neither is linked or served. Then the
    clean one is; the hostile one never is, is stored nowhere, and its job says why."""
    Project.objects.create(workspace=team.workspace, name="Bird Watch", created_by=team.owner)
    key = api_key_create(access=team.access("admin"), name="laptop", scopes=["train"])[1]
    runs = {}
    for name, data in (("evil", hostile), ("fine", clean_weights.read_bytes())):
        answer = start(client, key, name=name, save_dir=f"/home/me/{name}")
        model_id, run_id = answer["modelId"], answer["runId"]
        body, put = upload(client, key, model_id, run_id, data)
        assert put.status_code == 200, put.content  # a zip, as torch.save writes
        saved = {"modelPath": body["gcsPath"], "runId": run_id}
        response = client.post(
            "/api/webhooks/training/metrics",
            json.dumps({"modelId": model_id, "event": "checkpoint_saved", "data": saved}),
            content_type="application/json",
            HTTP_AUTHORIZATION=f"Bearer {key}",
        )
        assert response.status_code == 200
        # Its best.pt now, not yet inspected: linked and served nowhere.
        assert member_of(team).get(job_file(team, int(model_id), "best.pt")).status_code == 404
        # While training_complete is answered, the worker may already take the model.
        assert complete(client, key, model_id, run_id, body["gcsPath"]).status_code == 200
        runs[name] = TrainingJob.objects.get(pk=model_id)

    viewer = member_of(team)
    for job in runs.values():
        model = TrainedModel.objects.get(job=job)
        if model.inspect_state == InspectState.PENDING:  # not served while pending
            assert viewer.get(job_file(team, job.pk, "best.pt")).status_code == 404
            for url in weights_urls(team, model.pk):
                assert viewer.get(url).status_code == 404, url

    deadline = time.monotonic() + 180
    while TrainedModel.objects.filter(inspect_state=InspectState.PENDING).exists():
        assert time.monotonic() < deadline, "the weights were never inspected"
        time.sleep(0.5)

    evil, fine = (TrainingJob.objects.get(pk=runs[n].pk) for n in ("evil", "fine"))
    evil_model, fine_model = (TrainedModel.objects.get(job=j) for j in (evil, fine))
    assert not marker.exists()
    # The hostile one: refused, said on the job, linked and served nowhere, stored nowhere.
    assert evil_model.inspect_state == InspectState.FAILED
    assert "refused" in evil.error and "posix.system" in evil.error, evil.error
    assert "best.pt" in evil.error and "cannot be used" in evil.error
    _no_storage_key(evil.error, evil_model)
    _no_storage_key(evil_model.inspect_error, evil_model)
    assert "best.pt" not in evil.artifacts_served
    assert viewer.get(job_file(team, evil.pk, "best.pt")).status_code == 404
    for url in weights_urls(team, evil_model.pk):
        assert viewer.get(url).status_code == 404, url
    page = viewer.get(reverse("job_detail", kwargs={"ws_slug": "acme", "pk": evil.pk}))
    assert job_file(team, evil.pk, "best.pt") not in page.content.decode()
    assert "posix.system" in page.content.decode()  # the page says why
    assert not stored_with(hostile, f"training/jobs/{evil.pk}", f"models/{evil_model.pk}")
    # The clean one: served once it passed, the very bytes that were inspected.
    assert fine_model.inspect_state == InspectState.OK, fine_model.inspect_error
    assert fine.error == "" and fine.artifacts_served["best.pt"] == fine_model.weights_key
    response = viewer.get(job_file(team, fine.pk, "best.pt"))
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == clean_weights.read_bytes()
    page = viewer.get(reverse("job_detail", kwargs={"ws_slug": "acme", "pk": fine.pk}))
    assert job_file(team, fine.pk, "best.pt") in page.content.decode()


# --- uploads -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_uploaded_weights_are_not_served_while_pending(team, project):  # noqa: F811
    access = workspace_access_for_user(user=team.editor, slug=team.workspace.slug)
    model = model_upload(
        access=access,
        project=project,
        name="",
        task="detect",
        upload=SimpleUploadedFile("mine.pt", b"PK\x03\x04 not inspected yet"),
    )
    viewer = member_of(team)
    for url in weights_urls(team, model.pk):
        assert viewer.get(url).status_code == 404, url
    page = viewer.get(reverse("model_detail", kwargs={"ws_slug": "acme", "pk": model.pk}))
    assert weights_urls(team, model.pk)[0] not in page.content.decode()


@pytest.mark.django_db(transaction=True)
def test_the_inspection_error_names_the_file_never_its_storage_key(
    team,
    project,  # noqa: F811
    hostile,
    marker,  # noqa: F811
):
    access = workspace_access_for_user(user=team.editor, slug=team.workspace.slug)
    model = model_upload(
        access=access,
        project=project,
        name="From home",
        task="detect",
        upload=SimpleUploadedFile("mine.pt", hostile),
    )
    model_inspect_run(model_id=model.pk)  # what the inspection worker does
    model.refresh_from_db()
    assert model.inspect_state == InspectState.FAILED
    assert "mine.pt would call posix.system" in model.inspect_error, model.inspect_error
    _no_storage_key(model.inspect_error, model)


# --- Kestrel's trainers ----------------------------------------------------------------------


def _checkpoints(sup) -> Path:
    folder = Path(sup.machine.workdir, *sup._checkpoint_parts())
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.django_db(transaction=True)
def test_a_hostile_checkpoint_from_the_trainer_is_kept_nowhere_and_ends_the_run(
    client,
    team,
    supervisor,  # noqa: F811
    clean_weights,
    tmp_path,
    marker,  # noqa: F811
):
    """Epoch 1's checkpoints are clean and stored; epoch 2's last.pt calls os.system: it is
    stored nowhere, the trainer is stopped, and the run fails saying why, keeping no
    checkpoint (a trainer that writes such files is not resumed)."""
    sup, job_id = supervisor, supervisor.job.pk
    folder = _checkpoints(sup)
    for name in ("last-1.pt", "best-1.pt"):
        shutil.copyfile(clean_weights, folder / name)
    send(client, sup, "redis", "checkpoint", {"epoch": 1, "best": True}, seq=1)
    job = TrainingJob.objects.get(pk=job_id)
    assert job.checkpoint_epoch == 1, job.notice
    assert set(job.artifacts) == {"last.pt", "best.pt (training)"}
    viewer = member_of(team)
    assert viewer.get(job_file(team, job_id, "last.pt")).status_code == 200

    hostile = shell_checkpoint(folder / "last-2.pt", marker).read_bytes()
    send(client, sup, "redis", "checkpoint", {"epoch": 2, "best": False}, seq=2)
    job = TrainingJob.objects.get(pk=job_id)
    assert job.checkpoint_epoch == 1  # not stored
    assert not stored_with(hostile, f"training/jobs/{job_id}", "models")
    assert "epoch 2" in sup.refused and "posix.system" in sup.refused
    assert not (folder / "last-2.pt").exists()

    sup._finish()  # the trainer it stopped has exited
    job = TrainingJob.objects.get(pk=job_id)
    assert job.state == JobState.FAILED and job.failure_kind == FailureKind.WEIGHTS
    assert "refused" in job.error and "last-2.pt would call posix.system" in job.error
    assert "training/jobs/" not in job.error
    assert not any(key.endswith(".pt") for key in job.artifacts.values())
    assert not storage_exists(job.checkpoint_key) and not storage_exists(job.best_key)
    assert viewer.get(job_file(team, job_id, "last.pt")).status_code == 404
    assert not marker.exists()


@pytest.mark.django_db(transaction=True)
def test_a_remote_trainers_hostile_final_weights_make_no_model(
    client,
    team,
    supervisor,  # noqa: F811
    hostile,
    marker,  # noqa: F811
):
    """A remote trainer (or whoever holds its attempt's token) uploads a best.pt that calls
    os.system through its signed URL and reports the end of training: no model is made from
    it, it is stored nowhere, and the run fails saying why."""
    sup, job_id = supervisor, supervisor.job.pk
    sup.machine = Machine(
        provider="command",
        name="remote",
        device="cpu",
        workdir=sup.machine.workdir,
        details={"remote": True},
    )
    auth = {"HTTP_AUTHORIZATION": f"Bearer {events_token(job_id, sup.attempt.number)}"}
    asked = client.post(
        f"/api/v1/trainer/jobs/{job_id}/uploads",
        json.dumps({"name": "best.pt"}),
        content_type="application/json",
        **auth,
    )
    assert asked.status_code == 200, asked.content
    put = client.put(asked.json()["url"], hostile, content_type="application/octet-stream")
    assert put.status_code == 200, put.content
    end = {"names": ["object"], "plots": [], "best": True, "results": {}}
    send(client, sup, "http", "train_end", end, seq=1)
    send(client, sup, "http", "done", {"stopped": False}, seq=2)
    sup._succeed(stopped=False)  # the trainer exited 0 after `done`

    job = TrainingJob.objects.get(pk=job_id)
    assert not TrainedModel.objects.filter(job_id=job_id).exists()
    assert job.state == JobState.FAILED and job.failure_kind == FailureKind.WEIGHTS
    assert "final weights were refused" in job.error and "posix.system" in job.error
    assert not stored_with(hostile, f"training/jobs/{job_id}", "models")
    assert not marker.exists()
