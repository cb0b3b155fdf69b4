"""JSON API for datasets: create, read (stats). Uploads, versions, clone, export live beside."""

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status

from core.errors import ServiceError
from datasets import selectors
from datasets.models import Task
from datasets.services import datasets as services
from workspaces.permissions import Perm
from workspaces.selectors import workspace_access_for_caller, workspace_slugs_for_caller

router = Router(tags=["datasets"])


class DatasetIn(Schema):
    name: str = Field(max_length=100)
    task: Task = Task.DETECT
    classes: list[str] = Field(default_factory=list, max_length=10_000)
    description: str = Field("", max_length=10_000)
    depth_scale: float | None = Field(
        None,
        description="Depth datasets: the 16-bit PNG value of one metre (default 1000: mm).",
    )
    workspace: str | None = Field(
        None, description="Workspace slug; optional with an API key (the key's workspace)."
    )


class DatasetOut(Schema):
    id: int
    workspace: str
    name: str
    task: str
    depth_scale: float | None
    description: str
    is_public: bool
    classes: list[str]
    images: int
    splits: dict[str, int]
    labels_per_class: dict[str, int]


def dataset_out(dataset) -> DatasetOut:
    classes = services.dataset_class_counts(dataset=dataset)
    splits = services.dataset_split_counts(dataset=dataset)
    return DatasetOut(
        id=dataset.pk,
        workspace=dataset.workspace.slug,
        name=dataset.name,
        task=dataset.task,
        depth_scale=dataset.depth_scale,
        description=dataset.description,
        is_public=dataset.is_public,
        classes=[c.name for c in classes],
        images=sum(splits.values()),
        splits=splits,
        labels_per_class={c.name: c.label_total for c in classes},
    )


@router.post("/datasets", response={201: DatasetOut})
def dataset_create(request: HttpRequest, payload: DatasetIn):
    slug = payload.workspace
    if slug is None:
        slugs = workspace_slugs_for_caller(auth=request.auth, user=request.user)
        if len(slugs) != 1:
            raise ServiceError("Say which workspace: the `workspace` field takes its slug.")
        slug = slugs[0]
    access = workspace_access_for_caller(auth=request.auth, user=request.user, slug=slug)
    dataset = services.dataset_create(
        access=access,
        name=payload.name,
        task=payload.task,
        class_names=services.class_names_parse("\n".join(payload.classes)),
        description=payload.description,
        depth_scale=payload.depth_scale,
    )
    return Status(201, dataset_out(dataset))


@router.get("/datasets/{dataset_id}", response=DatasetOut)
def dataset_get(request: HttpRequest, dataset_id: int):
    access, dataset = selectors.dataset_access_for_caller(
        auth=request.auth, user=request.user, pk=dataset_id
    )
    access.require(Perm.READ)
    return dataset_out(dataset)
