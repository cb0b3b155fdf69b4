"""Inference usage: counted per call in Redis (cheap, shared), added to UsageDay rows by a beat
task every minute, so pages read plain rows."""

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from deploy.models import Deployment, UsageDay
from deploy.ratelimit import _redis
from training.models import TrainedModel
from workspaces.models import ApiKey

PENDING = "kestrel:usage:pending"  # a hash: "<ws>|<day>|<key>:<model>:<deployment>|<field>" → n


def usage_count(
    *, workspace_id: int, api_key_id, model_id, deployment_id, ok: bool, ms: float, images: int
) -> None:
    day = timezone.now().date().isoformat()
    scope = f"{api_key_id or 0}:{model_id or 0}:{deployment_id or 0}"
    base = f"{workspace_id}|{day}|{scope}"
    pipe = _redis().pipeline()
    pipe.hincrby(PENDING, f"{base}|calls", 1)
    if not ok:
        pipe.hincrby(PENDING, f"{base}|errors", 1)
    pipe.hincrby(PENDING, f"{base}|images", images)
    if ok:  # the time of answered calls only: a refusal's few milliseconds are not latency
        pipe.hincrbyfloat(PENDING, f"{base}|total_ms", round(ms, 3))
    pipe.execute()


def usage_flush() -> int:
    """Move the counts gathered in Redis into UsageDay rows. Safe to run concurrently: the hash
    is renamed away atomically before it is read, so each count is added once."""
    r = _redis()
    taking = f"{PENDING}:flushing:{timezone.now().timestamp()}"
    try:
        r.rename(PENDING, taking)
    except Exception:  # nothing pending (RENAME of a missing key is an error)
        return 0
    counts: dict[tuple, dict] = {}
    for field, value in r.hgetall(taking).items():
        ws, day, scope, name = field.decode().split("|")
        counts.setdefault((int(ws), day, scope), {})[name] = float(value)
    with transaction.atomic():
        for (ws, day, scope), values in counts.items():
            key_id, model_id, deployment_id = (int(v) or None for v in scope.split(":"))
            # A key, model or deployment deleted since: its calls still count, unattributed.
            key_id = key_id if ApiKey.objects.filter(pk=key_id).exists() else None
            model_id = model_id if TrainedModel.objects.filter(pk=model_id).exists() else None
            deployment_id = (
                deployment_id if Deployment.objects.filter(pk=deployment_id).exists() else None
            )
            row, _ = UsageDay.objects.get_or_create(
                workspace_id=ws,
                day=day,
                scope=scope,
                defaults={
                    "api_key_id": key_id,
                    "model_id": model_id,
                    "deployment_id": deployment_id,
                },
            )
            UsageDay.objects.filter(pk=row.pk).update(
                calls=F("calls") + int(values.get("calls", 0)),
                errors=F("errors") + int(values.get("errors", 0)),
                images=F("images") + int(values.get("images", 0)),
                total_ms=F("total_ms") + values.get("total_ms", 0.0),
            )
    r.delete(taking)
    return len(counts)
