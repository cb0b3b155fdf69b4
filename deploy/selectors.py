"""Reads: the Models table, and inference calls per day, per key and per model."""

from datetime import timedelta

from django.db.models import Case, Exists, FloatField, OuterRef, QuerySet, Subquery, Sum, When
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, NullIf
from django.utils import timezone

from deploy.models import Deployment, ExportState, ModelExport, UsageDay
from training import selectors as training_selectors
from training.models import TrainedModel
from training.selectors import MAIN_METRIC
from workspaces.models import Workspace

# What a prediction call reads of its model, and nothing more: the JSON columns (classes,
# arguments, metrics) and the job's history cost milliseconds to fetch and decode on every call.
PREDICT_MODEL_FIELDS = (
    "id", "name", "task", "imgsz", "weights_key", "weights_sha256", "inspect_state",
    "inspect_error", "workspace__id", "workspace__slug", "workspace__plan__id",
    "workspace__plan__name", "workspace__plan__predict_requests_per_minute", "job__id",
    "job__state",
)  # fmt: skip


def models_for_predict() -> QuerySet[TrainedModel]:
    """Models as a prediction call reads them, in one query: the columns it needs, the
    workspace's plan (its rate limit), the run's state, and the newest ONNX export (id and file)
    that a model server would run instead of the .pt."""
    onnx = (
        ModelExport.objects.filter(model=OuterRef("pk"), format="onnx", state=ExportState.SUCCEEDED)
        .exclude(file_key="")
        .order_by("-finished_at")
    )
    return (
        TrainedModel.objects.select_related("workspace__plan", "job")
        .only(*PREDICT_MODEL_FIELDS)
        .annotate(
            onnx_id=Subquery(onnx.values("pk")[:1]), onnx_key=Subquery(onnx.values("file_key")[:1])
        )
    )


def inference_usage(*, workspace, days: int = 30) -> dict:
    since = timezone.now().date() - timedelta(days=days - 1)
    rows = UsageDay.objects.filter(workspace=workspace, day__gte=since)
    totals = {"calls": Sum("calls"), "errors": Sum("errors"), "images": Sum("images")}
    return {
        "days": days,
        "by_day": list(rows.values("day").annotate(**totals).order_by("-day")),
        "by_key": list(
            rows.values("api_key__name", "api_key__prefix").annotate(**totals).order_by("-calls")
        ),
        "by_model": list(
            rows.values("model_id", "model__name").annotate(**totals).order_by("-calls")
        ),
    }


def deployment_usage_by_day(*, deployment: Deployment, days: int = 14) -> list[dict]:
    """Calls, errors and the mean latency of the answered calls (ms; None when none was
    answered) per day of the deployment's endpoint, newest first."""
    answered = NullIf(Sum("calls") - Sum("errors"), 0)
    return list(
        UsageDay.objects.filter(deployment=deployment)
        .values("day")
        .annotate(mean_ms=Sum("total_ms") / answered)  # before calls and errors take the names
        .annotate(calls=Sum("calls"), errors=Sum("errors"))
        .order_by("-day")[:days]
    )


def models_for_table(*, workspace: Workspace) -> QuerySet[TrainedModel]:
    """The workspace's models with their main metric (per task, as runs are compared) and
    whether a deployment serves them, computed in PostgreSQL."""
    metric = Case(
        *[When(task=task, then=KT(f"metrics__{key}")) for task, (key, _) in MAIN_METRIC.items()]
    )
    return training_selectors.model_list(workspace=workspace).annotate(
        main_metric=Cast(metric, FloatField()),
        deployed=Exists(Deployment.objects.filter(model=OuterRef("pk"))),
    )
