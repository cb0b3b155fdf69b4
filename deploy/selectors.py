"""Reads for usage tables: inference calls per day, per key and per model."""

from datetime import timedelta

from django.db.models import Sum
from django.utils import timezone

from deploy.models import UsageDay


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
