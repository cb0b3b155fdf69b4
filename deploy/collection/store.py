"""The worker's half of collection: the selected image into the rule's dataset, the model's
predictions as its suggestions, and where it came from."""

import json
import logging
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from datasets.models import Image, LabelStatus, Task
from deploy.collection.decide import payload_key
from deploy.collection.rules import count_key, utc_day, workspace_storage_bytes
from deploy.models import CollectedImage, CollectionRule, Deployment
from deploy.ratelimit import _redis
from training.models import TrainedModel

logger = logging.getLogger(__name__)
POLYGON_MAX_POINTS = 200


def source_name(*, deployment: Deployment | None, model: TrainedModel) -> str:
    if deployment is not None:
        return f"deployment “{deployment.name}”"
    return f"the shared API ({model.name})"


def _payload_take(token: str) -> dict[bytes, bytes]:
    pipe = _redis().pipeline(transaction=True)
    pipe.hgetall(payload_key(token))
    pipe.delete(payload_key(token))
    payload, _ = pipe.execute()
    return payload


def _clamp(value) -> float:
    return round(min(max(float(value), 0.0), 1.0), 6)


def _subsample(xs: list, ys: list, limit: int) -> list[tuple]:
    points = list(zip(xs, ys, strict=False))
    if len(points) <= limit:
        return points
    step = len(points) / limit
    return [points[int(i * step)] for i in range(limit)]


def answer_predictions(*, task: str, image: dict, classes: list[str]) -> list[tuple]:
    """The answer's predictions (of the chosen classes) as (kind, class index, data,
    confidence), with data as datasets.models.Label stores it, normalised to the image."""
    height, width = (float(v) or 1.0 for v in image.get("shape") or (1, 1))
    chosen = {c.lower() for c in classes or []}
    rows = [
        r
        for r in image.get("results") or []
        if isinstance(r.get("class"), int)
        and isinstance(r.get("confidence"), int | float)
        and (not chosen or str(r.get("name", "")).lower() in chosen)
    ]
    out = []
    if task == Task.CLASSIFY:
        top = max(rows, key=lambda r: r["confidence"], default=None)
        return [("tag", top["class"], [], float(top["confidence"]))] if top else []
    for row in rows:
        box = row.get("box") or {}
        try:
            if task == Task.OBB:
                data = [
                    _clamp(box[f"{axis}{i}"] / (width if axis == "x" else height))
                    for i in range(1, 5)
                    for axis in ("x", "y")
                ]
                out.append(("obb", row["class"], data, float(row["confidence"])))
                continue
            x1, y1 = box["x1"] / width, box["y1"] / height
            x2, y2 = box["x2"] / width, box["y2"] / height
            xywh = [
                _clamp((x1 + x2) / 2), _clamp((y1 + y2) / 2), _clamp(x2 - x1), _clamp(y2 - y1)
            ]  # fmt: skip
            if task == Task.SEGMENT:
                segments = row.get("segments") or {}
                points = _subsample(
                    segments.get("x") or [], segments.get("y") or [], POLYGON_MAX_POINTS
                )
                if len(points) < 3:
                    points = [(x1, y1), (x2, y1), (x2, y2), (x1, y2)]
                else:
                    points = [(x / width, y / height) for x, y in points]
                data = [_clamp(v) for point in points for v in point]
                out.append(("polygon", row["class"], data, float(row["confidence"])))
            elif task == Task.POSE:
                kpts = row.get("keypoints") or {}
                xs, ys = kpts.get("x") or [], kpts.get("y") or []
                visible = kpts.get("visible") or [1.0] * len(xs)
                data = list(xywh)
                for x, y, v in zip(xs, ys, visible, strict=False):
                    if x <= 0 and y <= 0:  # (0, 0): the model placed none
                        data += [0.0, 0.0, 0.0]
                    else:
                        data += [_clamp(x / width), _clamp(y / height), 2.0 if v >= 0.5 else 1.0]
                out.append(("keypoints", row["class"], data, float(row["confidence"])))
            else:
                out.append(("box", row["class"], xywh, float(row["confidence"])))
        except (KeyError, TypeError, ZeroDivisionError):
            continue  # a row without the shape its task answers: not suggested
    return out


def collected_image_store(
    *,
    rule_id: int,
    token: str,
    model_id: int,
    deployment_id: int | None,
    confidence: float,
    at: str,
) -> CollectedImage | None:
    """The worker's half: the selected image into the rule's dataset (a blob stored once by its
    sha256; an image already in the dataset is not added again), the model's predictions as
    its suggestions, and where it came from. None when nothing was stored (the rule was
    turned off meanwhile, the image is there already, the plan's storage is full): the day's
    count is given back then."""
    payload = _payload_take(token)
    stored = None
    try:
        if payload:
            stored = _store(
                rule_id=rule_id,
                data=payload.get(b"image", b""),
                answer=payload.get(b"answer", b"{}"),
                model_id=model_id,
                deployment_id=deployment_id,
                confidence=confidence,
                at=datetime.fromisoformat(at),
            )
        else:
            logger.warning("collection %s: the image expired before a worker took it", token)
    finally:
        if stored is None:
            _redis().decr(count_key(rule_id, utc_day(datetime.fromisoformat(at))))
    return stored


def _store(
    *,
    rule_id: int,
    data: bytes,
    answer: bytes,
    model_id: int,
    deployment_id: int | None,
    confidence: float,
    at: datetime,
) -> CollectedImage | None:
    from annotation.assist.predict import Prediction
    from annotation.services import model_class_map, suggestions_store
    from datasets.services.demo import blob_store
    from datasets.services.gallery import dataset_lock, dataset_touch
    from datasets.services.images import ImageRejected, image_check
    from datasets.services.thumbnails import thumbnails_make

    rule = (
        CollectionRule.objects.select_related("dataset", "workspace__plan")
        .filter(pk=rule_id, enabled=True, dataset__isnull=False)
        .first()
    )
    if rule is None:
        return None
    workspace, dataset = rule.workspace, rule.dataset
    model = TrainedModel.objects.filter(pk=model_id, workspace=workspace).first()
    if model is None or dataset.task != model.task:
        return None
    deployment = (
        Deployment.objects.filter(pk=deployment_id, workspace=workspace).first()
        if deployment_id
        else None
    )
    try:
        checked = image_check(data)
    except ImageRejected:
        logger.warning("collection rule %s: the stored call's image was refused", rule.pk)
        return None
    quota = getattr(workspace.plan, "storage_quota_bytes", 0)
    if quota:
        held = Image.objects.filter(dataset__workspace=workspace, blob__sha256=checked.sha256)
        extra = 0 if held.exists() else checked.size
        if workspace_storage_bytes(workspace) + extra > quota:
            CollectionRule.objects.filter(pk=rule.pk).update(storage_full_at=timezone.now())
            return None
    if rule.storage_full_at is not None:
        CollectionRule.objects.filter(pk=rule.pk).update(storage_full_at=None)
    try:
        images = json.loads(answer).get("images") or [{}]
    except (ValueError, AttributeError):
        images = [{}]
    predictions = [
        Prediction(kind, index, shape, conf)
        for kind, index, shape, conf in answer_predictions(
            task=model.task, image=images[0], classes=rule.classes
        )
    ]
    with transaction.atomic():
        dataset_lock(dataset)
        if Image.objects.filter(dataset=dataset, blob__sha256=checked.sha256).exists():
            return None
        blob = blob_store(checked.data)
        suffix = {"image/png": "png", "image/webp": "webp", "image/bmp": "bmp"}.get(
            checked.content_type, "jpg"
        )
        image = Image.objects.create(
            dataset=dataset,
            blob=blob,
            filename=f"collected-{at:%Y%m%d-%H%M%S}-{checked.sha256[:8]}.{suffix}",
            status=LabelStatus.UNLABELLED,
            # The least-confident-first queue of the labelling page orders by this.
            uncertainty=round(1.0 - confidence, 6),
        )
        suggestions_store(
            image=image,
            model=model,
            predictions=predictions,
            class_map=model_class_map(model=model, dataset=dataset),
        )
        collected = CollectedImage.objects.create(
            workspace=workspace,
            image=image,
            dataset=dataset,
            deployment=deployment,
            model=model,
            source=source_name(deployment=deployment, model=model)[:200],
            confidence=confidence,
            created_at=at,
        )
        dataset_touch(dataset)
        transaction.on_commit(lambda: thumbnails_make(blob_ids=[blob.pk]))
    return collected
