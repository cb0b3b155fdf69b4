"""JSON API for dataset versions, exports and clones."""

from datetime import datetime

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status

from core.errors import ServiceError
from core.files import generated_file_response
from datasets import selectors
from datasets.api import DatasetOut, dataset_out
from datasets.models import Dataset, DatasetVersion
from datasets.services import versions as services
from datasets.services.clone import dataset_clone
from datasets.services.export import export_filename, export_run
from workspaces.permissions import Perm
from workspaces.selectors import workspace_access_for_caller, workspace_slugs_for_caller

router = Router(tags=["datasets"])


class VersionIn(Schema):
    note: str = Field("", max_length=200)


class VersionOut(Schema):
    number: int
    note: str
    content_hash: str
    summary: dict
    created_at: datetime
    created_by: str | None

    @staticmethod
    def resolve_created_by(version: DatasetVersion) -> str | None:
        return version.created_by.email if version.created_by else None


class CloneIn(Schema):
    workspace: str | None = Field(
        None,
        description="Slug of the workspace to clone into; optional with an API key (the key's "
        "workspace) or when the dataset is private (its own workspace).",
    )
    name: str | None = Field(None, max_length=100)


@router.get("/datasets/{dataset_id}/versions", response=list[VersionOut])
def version_list(request: HttpRequest, dataset_id: int):
    access, dataset = selectors.dataset_access_for_caller(
        auth=request.auth, user=request.user, pk=dataset_id
    )
    access.require(Perm.READ)
    return services.version_list(dataset=dataset)


@router.post("/datasets/{dataset_id}/versions", response={201: VersionOut})
def version_create(request: HttpRequest, dataset_id: int, payload: VersionIn):
    """Freeze the dataset as it is now. 400 when nothing changed since the last version."""
    access, dataset = selectors.dataset_access_for_caller(
        auth=request.auth, user=request.user, pk=dataset_id
    )
    version = services.version_create(access=access, dataset=dataset, note=payload.note)
    return Status(201, version)


@router.get("/datasets/{dataset_id}/export")
def dataset_export(
    request: HttpRequest, dataset_id: int, format: str = "yolo", version: int | None = None
):
    """A zip of the dataset (or of version `version`, exactly as saved) in `format`: yolo, coco,
    ndjson, cvat (CVAT for images 1.1) or label-studio (Label Studio JSON)."""
    access, dataset = selectors.dataset_access_for_caller(
        auth=request.auth, user=request.user, pk=dataset_id
    )
    access.require(Perm.READ)
    frozen = selectors.version_get(dataset=dataset, number=version) if version else None
    archive = export_run(fmt=format, dataset=None if frozen else dataset, version=frozen)
    return generated_file_response(
        archive,
        filename=export_filename(dataset=dataset, fmt=format, version=frozen),
        content_type="application/zip",
    )


def _clone_source(request: HttpRequest, pk: int) -> Dataset:
    """A public dataset for anyone; a private one only for callers reaching its workspace."""
    source = Dataset.objects.public().filter(pk=pk).select_related("workspace").first()
    if source is not None:
        return source
    _, source = selectors.dataset_access_for_caller(auth=request.auth, user=request.user, pk=pk)
    return source


@router.post("/datasets/{dataset_id}/clone", response={201: DatasetOut})
def dataset_clone_api(request: HttpRequest, dataset_id: int, payload: CloneIn):
    """Copy the dataset's classes, images and labels into a workspace; images are shared."""
    source = _clone_source(request, dataset_id)
    slug = payload.workspace
    if slug is None:
        slugs = workspace_slugs_for_caller(auth=request.auth, user=request.user)
        if not source.is_public and source.workspace.slug in slugs:
            slug = source.workspace.slug
        elif len(slugs) == 1:
            slug = slugs[0]
        else:
            raise ServiceError("Say which workspace: the `workspace` field takes its slug.")
    access = workspace_access_for_caller(auth=request.auth, user=request.user, slug=slug)
    clone = dataset_clone(access=access, source=source, name=payload.name)
    return Status(201, dataset_out(clone))
