"""Reads of training jobs and trained models. Rows are reached through the caller's workspace."""

from django.core.files import File
from django.core.files.storage import default_storage
from django.db.models import Case, FloatField, Max, OuterRef, QuerySet, Subquery, When
from django.db.models.fields.json import KT
from django.db.models.functions import Cast
from django.http import Http404

from datasets.models import DatasetVersion, Task
from training.models import EpochMetric, LogChunk, TrainedModel, TrainingJob
from workspaces.models import Workspace
from workspaces.selectors import WorkspaceAccess, workspace_access_for_caller

# The metric that ranks a job's epochs, per task: the one Ultralytics reports first for it.
PRIMARY_METRIC = {
    Task.DETECT: ("metrics/mAP50(B)", "mAP50"),
    Task.OBB: ("metrics/mAP50(B)", "mAP50"),
    Task.SEGMENT: ("metrics/mAP50(M)", "mask mAP50"),
    Task.POSE: ("metrics/mAP50(P)", "pose mAP50"),
    Task.CLASSIFY: ("metrics/accuracy_top1", "top-1 accuracy"),
}
LOG_TAIL_LINES = 200
LOG_TAIL_CHUNKS = 400  # a chunk holds at least one line


def _best_primary_metric() -> Subquery:
    """The best value of the job's primary metric over its epochs, computed in PostgreSQL."""
    value = Case(
        *[
            When(job__task=task, then=KT(f"values__{key}"))
            for task, (key, _) in PRIMARY_METRIC.items()
        ]
    )
    best = (
        EpochMetric.objects.filter(job=OuterRef("pk"))
        .order_by()
        .values("job")
        .annotate(best=Max(Cast(value, FloatField())))
        .values("best")[:1]
    )
    return Subquery(best, output_field=FloatField())


def job_list(*, workspace: Workspace) -> QuerySet[TrainingJob]:
    return (
        TrainingJob.objects.for_workspace(workspace)
        .select_related("project", "gpu_type", "dataset_version__dataset")
        .annotate(best_metric=_best_primary_metric())
    )


def job_get(*, workspace: Workspace, pk: int) -> TrainingJob:
    job = (
        TrainingJob.objects.for_workspace(workspace)
        .select_related(
            "project", "gpu_type", "dataset_version__dataset", "created_by", "base_model"
        )
        .filter(pk=pk)
        .first()
    )
    if job is None:
        raise Http404("No such training job.")
    return job


def job_access_for_caller(*, auth, user, pk: int) -> tuple[WorkspaceAccess, TrainingJob]:
    """For API routes naming a job by id only: 404 unless the caller reaches its workspace."""
    slug = TrainingJob.objects.filter(pk=pk).values_list("workspace__slug", flat=True).first()
    if slug is None:
        raise Http404("No such training job.")
    access = workspace_access_for_caller(auth=auth, user=user, slug=slug)
    return access, job_get(workspace=access.workspace, pk=pk)


def job_epoch_metrics(*, job: TrainingJob) -> QuerySet[EpochMetric]:
    return EpochMetric.objects.filter(job=job).order_by("epoch")


def job_log_tail(*, job: TrainingJob, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines the trainer printed, over all attempts."""
    chunks = list(
        LogChunk.objects.filter(job=job)
        .order_by("-attempt", "-seq")
        .values_list("text", flat=True)[:LOG_TAIL_CHUNKS]
    )
    text = "\n".join(reversed(chunks))
    return "\n".join(text.splitlines()[-lines:])


def model_list(*, workspace: Workspace) -> QuerySet[TrainedModel]:
    return TrainedModel.objects.for_workspace(workspace).select_related(
        "project", "job", "dataset_version__dataset"
    )


def model_get(*, workspace: Workspace, pk: int) -> TrainedModel:
    model = model_list(workspace=workspace).filter(pk=pk).first()
    if model is None:
        raise Http404("No such model.")
    return model


def model_access_for_caller(*, auth, user, pk: int) -> tuple[WorkspaceAccess, TrainedModel]:
    slug = TrainedModel.objects.filter(pk=pk).values_list("workspace__slug", flat=True).first()
    if slug is None:
        raise Http404("No such model.")
    access = workspace_access_for_caller(auth=auth, user=user, slug=slug)
    return access, model_get(workspace=access.workspace, pk=pk)


def trainable_versions(*, workspace: Workspace) -> QuerySet[DatasetVersion]:
    """Versions of the workspace's datasets, newest first: what a job can train on."""
    return (
        DatasetVersion.objects.filter(dataset__workspace=workspace)
        .select_related("dataset")
        .order_by("-created_at", "-id")
    )


def trainable_version_get(*, workspace: Workspace, pk: int) -> DatasetVersion:
    version = trainable_versions(workspace=workspace).filter(pk=pk).first()
    if version is None:
        raise Http404("No such dataset version.")
    return version


def stored_file_open(key: str) -> File:
    """A stored checkpoint, plot or weights file, opened for streaming; 404 when it is gone."""
    if not key:
        raise Http404("No file is stored.")
    try:
        return default_storage.open(key, "rb")
    except FileNotFoundError:
        raise Http404("The file is no longer stored.") from None
