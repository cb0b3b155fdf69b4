"""An export's metadata names the dataset version the model was trained on, never the path of
the training's files on the server (issue 33): Ultralytics writes "trained on <data>" from the
checkpoint's train_args into the ONNX file's metadata."""

import pytest
from django.core.files.storage import default_storage

from datasets.services.versions import version_create
from deploy.exports import export_run_once, export_start
from deploy.models import ExportState
from tests.annotation.weights import confident_weights_save
from tests.datasets.factories import DatasetFactory, ImageFactory
from tests.training.factories import trained_model_row

SERVER_PATH = "/srv/kestrel/var/training/job-7/data/data.yaml"


@pytest.fixture
def trained_on_the_server(tmp_path) -> bytes:
    """A checkpoint as training leaves it: its train_args name the server's data.yaml."""
    import torch

    path = confident_weights_save(tmp_path / "detect.pt")
    checkpoint = torch.load(path, map_location="cpu", weights_only=False)
    checkpoint["train_args"] = {
        **(checkpoint.get("train_args") or {}),
        "data": SERVER_PATH,
        "imgsz": 64,
        "task": "detect",
    }
    torch.save(checkpoint, path)
    return path.read_bytes()


@pytest.mark.django_db
def test_the_onnx_metadata_names_the_dataset_version_not_the_server_path(
    team, trained_on_the_server
):
    import onnx

    dataset = DatasetFactory(workspace=team.workspace, name="Birds DS")
    ImageFactory(dataset=dataset)
    version = version_create(access=team.access("owner"), dataset=dataset)
    model = trained_model_row(
        workspace=team.workspace, class_names=["bird"], weights=trained_on_the_server
    )
    model.dataset_version = version
    model.save(update_fields=["dataset_version"])

    export = export_start(access=team.access("editor"), model=model, fmt="onnx")
    export_run_once(export.pk)  # what the deploy.export_run task does, here in the test
    export.refresh_from_db()
    assert export.state == ExportState.SUCCEEDED, f"{export.error}\n{export.log[-2000:]}"

    with default_storage.open(export.file_key) as f:
        metadata = {p.key: p.value for p in onnx.load_model_from_string(f.read()).metadata_props}
    everything = " ".join(metadata.values())
    assert "/srv/" not in everything and "data.yaml" not in everything, metadata
    assert metadata["description"].endswith("trained on Birds DS v1"), metadata["description"]
    assert metadata["task"] == "detect" and "imgsz" in metadata  # the rest is kept
