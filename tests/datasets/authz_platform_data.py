"""Authorisation-matrix rows for ul:// resolution (issue 20, config/platform_urls.py).

Stock `ultralytics` sends a workspace key (tests/training/test_platform_resolve.py checks keys,
scopes and the 401 rules); a signed-in person may resolve too, as any member who can read.
With no key and no session the answer is 401, never a login page. The signed downloads take no
session at all: without their signature everyone gets 403."""

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from datasets.models import DatasetVersion
from tests.authz import Row
from training.models import TrainedModel
from workspaces.models import Project


def platform_ctx(values: dict) -> dict:
    project = Project.objects.get(pk=values["project"])  # "Birds"
    model = TrainedModel.objects.create(
        workspace=project.workspace,
        project=project,
        name="run1",
        task="detect",
        architecture="yolo11n",
        class_names=["bird"],
        imgsz=64,
        weights_key="",
        weights_size=4,
    )
    model.weights_key = default_storage.save(f"models/{model.pk}/w.pt", ContentFile(b"PK\3\4"))
    model.save(update_fields=["weights_key"])
    version = DatasetVersion.objects.get(dataset_id=values["dataset"], number=values["version"])
    return {"platform_model": model.pk, "platform_version": version.pk}


CTX = [platform_ctx]

_SIGNED = {"anonymous": 403, "stranger": 403}
ROUTES = [
    Row(
        "platform_dataset_export",
        "get",
        "viewer",
        200,
        {"owner": "acme", "slug": "birds-ds"},  # the context's "Birds DS", by its slug
        anonymous=401,
    ),
    Row(
        "platform_model_files",
        "get",
        "viewer",
        200,
        {"owner": "acme", "project": "birds", "model": "run1"},
        anonymous=401,
    ),
    Row(
        "platform_dataset_ndjson",
        "get",
        None,
        403,
        {"pk": "@platform_version", "filename": "birds-ds.ndjson"},
        **_SIGNED,
    ),
    Row(
        "platform_dataset_image",
        "get",
        None,
        403,
        {"sha256": "a" * 64, "filename": "a" * 32 + ".png"},
        **_SIGNED,
    ),
    Row(
        "platform_model_weights",
        "get",
        None,
        403,
        {"pk": "@platform_model", "filename": "best.pt"},
        **_SIGNED,
    ),
]
