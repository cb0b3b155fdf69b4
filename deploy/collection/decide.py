"""The collection decision, in the web process once a prediction's answer has gone out."""

import json
import secrets
from datetime import timedelta

from django.utils import timezone

from core.tasks import task_send
from datasets.models import Task
from deploy.collection.rules import COLLECT_TASKS, count_key, utc_day
from deploy.models import CollectionRule
from deploy.ratelimit import _redis
from training.models import TrainedModel

PAYLOAD_TTL = 3600  # seconds a selected image waits in Redis for the worker
COUNT_TTL = 2 * 86400
FULL_RETRY = timedelta(minutes=10)  # after the plan's storage was full, offer again after this


def payload_key(token: str) -> str:
    return f"kestrel:collect:payload:{token}"


def answer_confidence(*, task: str, image: dict, rule: CollectionRule) -> float | None:
    """The confidence that selects this image's answer under `rule`, or None. A classifier:
    its top-1, if of a chosen class and inside the band; other tasks: the least confident
    prediction of a chosen class inside the band."""
    chosen = {c.lower() for c in rule.classes or []}
    rows = [r for r in image.get("results") or [] if isinstance(r.get("confidence"), int | float)]
    if task == Task.CLASSIFY:
        rows = sorted(rows, key=lambda r: -r["confidence"])[:1]
    inside = [
        float(r["confidence"])
        for r in rows
        if (not chosen or str(r.get("name", "")).lower() in chosen)
        and rule.conf_min <= r["confidence"] <= rule.conf_max
    ]
    return min(inside) if inside else None


def collection_offer(
    *,
    rule_id: int,
    model: TrainedModel,
    deployment_id: int | None,
    image: bytes,
    answer: bytes,
    draw: float | None = None,
) -> bool:
    """Decide whether this answered call's image is collected; if so, hand it to the worker.
    `draw` (0..1) is the sampling draw, random unless given."""
    rule = (
        CollectionRule.objects.filter(pk=rule_id)
        .only(
            "pk",
            "enabled",
            "dataset_id",
            "conf_min",
            "conf_max",
            "classes",
            "sample_rate",
            "daily_cap",
            "storage_full_at",
        )
        .first()
    )
    if rule is None or not rule.enabled or rule.dataset_id is None:
        return False
    if model.task not in COLLECT_TASKS:
        return False
    now = timezone.now()
    if rule.storage_full_at and now - rule.storage_full_at < FULL_RETRY:
        return False
    try:
        images = json.loads(answer).get("images") or []
    except (ValueError, AttributeError):
        return False
    if len(images) != 1 or not isinstance(images[0], dict):
        return False
    confidence = answer_confidence(task=model.task, image=images[0], rule=rule)
    if confidence is None:
        return False
    if draw is None:
        draw = secrets.randbelow(1_000_000) / 1_000_000
    if draw >= rule.sample_rate:
        return False
    day = utc_day(now)
    r = _redis()
    counter = count_key(rule.pk, day)
    pipe = r.pipeline()
    pipe.incr(counter)
    pipe.expire(counter, COUNT_TTL)
    count, _ = pipe.execute()
    if count > rule.daily_cap:
        return False
    token = secrets.token_hex(16)
    key = payload_key(token)
    try:
        # One transaction: a key is never left without its expiry.
        pipe = r.pipeline(transaction=True)
        pipe.hset(key, mapping={"image": image, "answer": answer})
        pipe.expire(key, PAYLOAD_TTL)
        pipe.execute()
        task_send(
            "deploy.collection_store",
            rule.pk,
            token,
            model.pk,
            deployment_id,
            confidence,
            now.isoformat(),
        )
    except Exception:
        r.delete(key)
        r.decr(counter)
        raise
    return True
