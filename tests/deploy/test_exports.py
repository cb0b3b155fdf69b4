"""Exports and inspection of uploads, end to end: a real Ultralytics model exported by a real
Celery worker through the worker process, downloaded from the model page and run again with
Ultralytics; broken and hostile weights; the plan's upload limit."""

import io
import os
import pickle
import time
import zipfile
from pathlib import Path

import pytest
from django.core.exceptions import PermissionDenied
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile, UploadedFile
from django.test import Client

from billing.models import Plan
from core.errors import ServiceError
from deploy.export_formats import format_availability, format_catalog
from deploy.exports import export_start
from deploy.models import ExportState, ModelExport
from tests.annotation.weights import confident_weights_save
from tests.training.factories import trained_model_row
from tests.workspaces.factories import ProjectFactory
from training.models import TrainedModel
from training.services.models import model_upload

COCO = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "coco8"
IMAGE = COCO / "images" / "val" / "000000000036.jpg"


@pytest.fixture(scope="session")
def detect_weights(tmp_path_factory) -> Path:
    """A real YOLO11n detect checkpoint (built from its YAML: nothing can be downloaded here),
    sure of class 0 everywhere, so every image gets boxes to compare."""
    return confident_weights_save(tmp_path_factory.mktemp("export-weights") / "detect.pt")


@pytest.fixture(scope="session")
def detect_names(detect_weights) -> list[str]:
    from ultralytics import YOLO

    names = YOLO(str(detect_weights)).names
    return [names[i] for i in sorted(names)]


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _wait(row, states, timeout=300.0, field="state"):
    deadline = time.monotonic() + timeout
    while getattr(row, field) not in states:
        assert time.monotonic() < deadline, f"still {getattr(row, field)} after {timeout}s"
        time.sleep(0.5)
        row.refresh_from_db()
    return row


def _boxes(weights: Path, task: str = "detect"):
    from ultralytics import YOLO

    result = YOLO(str(weights), task=task).predict(str(IMAGE), imgsz=64, device="cpu")[0]
    return result.names, result.orig_shape, result.boxes.data.cpu().numpy()


def _checkpoint_zip(pickled: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("archive/data.pkl", pickled)
        zf.writestr("archive/version", "3\n")
    return buffer.getvalue()


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.same_on_any_database(
    "the exported files are what is tested; the export's rows are written as in the other export "
    "tests, which run on both"
)
@pytest.mark.django_db(transaction=True)
def test_onnx_and_torchscript_exports_run_in_the_worker_and_predict_like_the_pt(
    team, detect_weights, detect_names, celery_worker_process, tmp_path
):
    import numpy as np

    model = trained_model_row(
        workspace=team.workspace, class_names=detect_names, weights=detect_weights.read_bytes()
    )
    editor = _client(team.editor)
    page = editor.get(f"/w/acme/models/{model.pk}/").content.decode()
    assert 'data-testid="export-onnx"' in page and 'data-testid="export-torchscript"' in page
    assert 'data-testid="unavailable-mnn"' in page and "Alibaba Cloud" in page
    for fmt in ("onnx", "torchscript"):
        response = editor.post(f"/w/acme/models/{model.pk}/exports/start/", {"format": fmt})
        assert response.status_code == 302
    exports = {e.format: e for e in ModelExport.objects.filter(model=model)}
    assert set(exports) == {"onnx", "torchscript"}
    # While they run, the card asks htmx to poll it.
    # While they run (importing torch alone takes the worker seconds), the card polls itself.
    card = editor.get(f"/w/acme/models/{model.pk}/exports/").content.decode()
    assert 'hx-trigger="every 2s"' in card and "<progress" in card

    expected_names, expected_shape, expected = _boxes(detect_weights)
    assert len(expected) > 0
    for fmt, suffix in (("onnx", ".onnx"), ("torchscript", ".torchscript")):
        export = _wait(exports[fmt], (ExportState.SUCCEEDED, ExportState.FAILED))
        assert export.state == ExportState.SUCCEEDED, f"{export.error}\n{export.log[-2000:]}"
        seconds = (export.finished_at - export.created_at).total_seconds()
        print(f"{fmt} export: {seconds:.1f}s, {export.file_size} bytes")
        name = f"kestrel-model-{model.pk}{suffix}"
        assert export.progress == 100
        assert export.file_key == f"exports/{model.pk}/{export.pk}/1/{name}"  # attempt 1
        response = editor.get(f"/w/acme/exports/{export.pk}/download/")
        assert response.status_code == 200
        assert name in response["Content-Disposition"]
        downloaded = tmp_path / name
        downloaded.write_bytes(b"".join(response.streaming_content))
        assert downloaded.stat().st_size == export.file_size > 1_000_000
        names, shape, boxes = _boxes(downloaded)
        assert names == expected_names and shape == expected_shape
        assert boxes.shape == expected.shape
        assert set(boxes[:, 5].tolist()) == set(expected[:, 5].tolist()) == {0.0}
        assert np.allclose(boxes[:, :4], expected[:, :4], atol=2.0)
    card = editor.get(f"/w/acme/models/{model.pk}/exports/").content.decode()
    assert 'hx-trigger="every 2s"' not in card
    for export in exports.values():
        assert f'data-testid="export-download-{export.pk}"' in card
    # A viewer sees and downloads exports but starts none.
    viewer = _client(team.viewer)
    card = viewer.get(f"/w/acme/models/{model.pk}/exports/").content.decode()
    assert 'data-testid="export-onnx"' not in card
    assert viewer.get(f"/w/acme/exports/{exports['onnx'].pk}/download/").status_code == 200


@pytest.mark.same_on_any_database(
    "the worker process's failure is what is tested; the export's rows are written as in the "
    "other export tests, which run on both"
)
@pytest.mark.django_db(transaction=True)
def test_broken_weights_fail_the_export_with_a_clear_error_and_store_nothing(
    team, detect_weights, celery_worker_process
):
    data = detect_weights.read_bytes()
    truncated = trained_model_row(
        workspace=team.workspace, class_names=["a"], weights=data[: len(data) // 2]
    )
    unloadable = trained_model_row(
        workspace=team.workspace, class_names=["a"], weights=_checkpoint_zip(pickle.dumps(None))
    )
    access = team.access("editor")
    runs = [
        (export_start(access=access, model=m, fmt="onnx"), match)
        for m, match in (
            (truncated, "not a PyTorch checkpoint"),
            (unloadable, "The ONNX export failed: "),
        )
    ]
    for export, match in runs:
        export = _wait(export, (ExportState.SUCCEEDED, ExportState.FAILED), timeout=120)
        assert export.state == ExportState.FAILED
        assert export.error.startswith("The ONNX export failed: ") and match in export.error
        assert export.file_key == "" and export.file_size == 0
        assert not default_storage.exists(f"exports/{export.model_id}")
    # A failed export does not block the next try.
    again = export_start(access=access, model=truncated, fmt="onnx")
    assert again.state == ExportState.QUEUED


@pytest.mark.django_db
def test_unavailable_unknown_and_duplicate_exports_are_refused(team, detect_weights):
    catalog = {entry.key: entry for entry in format_catalog()}
    assert catalog["onnx"].available and catalog["torchscript"].available
    unavailable = [e for e in catalog.values() if not e.available]
    assert unavailable and all(e.reason for e in unavailable)
    assert "TensorRT" in format_availability("engine").format.label

    model = trained_model_row(workspace=team.workspace, class_names=["a"])
    access = team.access("editor")
    with pytest.raises(ServiceError, match="MNN export is not available here: MNN's converter"):
        export_start(access=access, model=model, fmt="mnn")
    with pytest.raises(ServiceError, match="does not export to “tflite2”"):
        export_start(access=access, model=model, fmt="tflite2")
    with pytest.raises(PermissionDenied):
        export_start(access=team.access("viewer"), model=model, fmt="onnx")
    export_start(access=access, model=model, fmt="onnx")
    with pytest.raises(ServiceError, match="already being exported to ONNX"):
        export_start(access=team.access("admin"), model=model, fmt="onnx")
    export_start(access=access, model=model, fmt="torchscript")  # another format may run
    for state, match in (("pending", "still being inspected"), ("failed", "failed its inspection")):
        TrainedModel.objects.filter(pk=model.pk).update(inspect_state=state)
        model.refresh_from_db()
        with pytest.raises(ServiceError, match=match):
            export_start(access=access, model=model, fmt="openvino")
    assert ModelExport.objects.count() == 2
    # Through the page, the reason is shown.
    TrainedModel.objects.filter(pk=model.pk).update(inspect_state="ok")
    response = _client(team.editor).post(
        f"/w/acme/models/{model.pk}/exports/start/", {"format": "mnn"}, follow=True
    )
    assert "MNN export is not available here" in response.content.decode()
    assert ModelExport.objects.count() == 2


@pytest.mark.django_db
def test_an_upload_larger_than_the_plan_allows_is_refused(team):
    free = Plan.objects.get(slug="free")
    team.workspace.plan = free
    team.workspace.save(update_fields=["plan"])
    project = ProjectFactory(workspace=team.workspace)
    big = UploadedFile(
        io.BytesIO(b"PK\x03\x04"), name="big.pt", size=free.max_model_upload_bytes + 1
    )
    with pytest.raises(ServiceError, match=r"big.pt is larger than the Free plan.s limit.* 200 MB"):
        model_upload(
            access=team.access("editor"), project=project, name="", task="detect", upload=big
        )
    assert not TrainedModel.objects.exists()


@pytest.mark.same_on_any_database(
    "the worker process's inspection is what is tested; the rows are written as in "
    "tests/training/test_model_upload.py, which runs on both"
)
@pytest.mark.django_db(transaction=True)
def test_uploads_are_inspected_in_the_worker_and_hostile_ones_never_loaded(
    team, detect_weights, detect_names, celery_worker_process, tmp_path
):
    project = ProjectFactory(workspace=team.workspace)
    editor = _client(team.editor)
    url = f"/w/acme/projects/{project.pk}/models/upload/"
    # The person says "segment"; the file is a detector, and the file wins.
    upload = SimpleUploadedFile("mine.pt", detect_weights.read_bytes())
    editor.post(url, {"weights": upload, "name": "From home", "task": "segment"})
    model = TrainedModel.objects.get(name="From home")
    # Pending until the worker has loaded it (it takes seconds to import torch alone).
    assert model.inspect_state == "pending"
    page = editor.get(f"/w/acme/models/{model.pk}/").content.decode()
    assert "a worker is checking the weights" in page and 'data-testid="export-onnx"' not in page
    with pytest.raises(ServiceError, match="still being inspected"):
        export_start(access=team.access("editor"), model=model, fmt="onnx")
    model = _wait(model, ("ok", "failed"), timeout=120, field="inspect_state")
    assert model.inspect_state == "ok", model.inspect_error
    assert model.task == "detect" and model.class_names == detect_names
    assert "its task was set to that (the upload said segment)" in model.train_args["inspect_note"]
    page = editor.get(f"/w/acme/models/{model.pk}/").content.decode()
    assert "the upload said segment" in page and 'data-testid="export-onnx"' in page

    marker = tmp_path / "pwned"
    hostile = SimpleUploadedFile(
        "nice.pt", _checkpoint_zip(pickle.dumps(_Payload(marker), protocol=4))
    )
    editor.post(url, {"weights": hostile, "name": "Nice", "task": "detect"})
    model = _wait(
        TrainedModel.objects.get(name="Nice"), ("ok", "failed"), timeout=120, field="inspect_state"
    )
    assert model.inspect_state == "failed"
    assert "would call posix.system when loaded" in model.inspect_error
    assert not marker.exists() and model.class_names == []
    page = editor.get(f"/w/acme/models/{model.pk}/").content.decode()
    assert "posix.system" in page and 'data-testid="export-onnx"' not in page


@pytest.mark.django_db
def test_an_export_already_taken_or_finished_is_left_alone(team):
    from deploy.tasks import export_run

    model = trained_model_row(workspace=team.workspace, class_names=["a"])
    for state in (ExportState.RUNNING, ExportState.SUCCEEDED, ExportState.FAILED):
        export = ModelExport.objects.create(
            workspace=team.workspace, model=model, format="onnx", state=state, progress=40
        )
        export_run(export.pk)  # a redelivered message
        export.refresh_from_db()
        assert (export.state, export.progress, export.file_key) == (state, 40, "")
    export_run(10**9)  # deleted meanwhile
