"""Reads: the Models table, and inference calls per day, per key and per model."""

from datetime import timedelta

from django.db.models import Case, Exists, FloatField, OuterRef, QuerySet, Sum, When
from django.db.models.fields.json import KT
from django.db.models.functions import Cast
from django.utils import timezone

from deploy.models import Deployment, UsageDay
from training import selectors as training_selectors
from training.models import TrainedModel
from training.selectors import MAIN_METRIC
from workspaces.models import Workspace


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
