"""Annotation background work: ids in, load, guard, call the service."""

import logging

from celery import shared_task

logger = logging.getLogger(__name__)


@shared_task(name="annotation.prelabel_run", soft_time_limit=3 * 3600, time_limit=3 * 3600 + 300)
def prelabel_run(run_id: int, **kwargs) -> None:
    """Pre-label a dataset. Idempotent: a run already taken (or finished) is left alone."""
    if kwargs:
        logger.warning("annotation.prelabel_run: unexpected arguments %s", sorted(kwargs))
    from annotation.models import PrelabelRun
    from annotation.prelabel import PRELABEL_JOB, prelabel_execute
    from core.leases import lease_row, lease_take

    lease = lease_take(PRELABEL_JOB, run_id)
    if lease is None:
        return
    run = lease_row(
        lease,
        lambda: PrelabelRun.objects.select_related("dataset", "model").filter(pk=run_id).first(),
    )
    if run is not None:
        prelabel_execute(run, lease)


# Model work for one request (the editor's Suggest and SAM buttons) runs in a worker too, so
# web processes never import torch; the request waits for the answer.


@shared_task(
    name="annotation.image_predict", ignore_result=False, soft_time_limit=120, time_limit=150
)
def image_predict_task(image_id: int, model_id: int, conf: float, **kwargs) -> dict:
    """Suggestions of one model on one image: {"stored": n} or {"error": reason}."""
    if kwargs:
        logger.warning("annotation.image_predict: unexpected arguments %s", sorted(kwargs))
    from annotation.assist import AssistError
    from annotation.prelabel import image_predict
    from datasets.models import Image
    from training.models import TrainedModel

    image = Image.objects.select_related("blob", "dataset").filter(pk=image_id).first()
    model = TrainedModel.objects.filter(pk=model_id).first()
    if image is None or model is None:
        return {"error": "The image or the model was deleted meanwhile."}
    try:
        return {"stored": image_predict(image=image, model=model, conf=conf)}
    except AssistError as exc:
        return {"error": str(exc)}


@shared_task(
    name="annotation.sam_polygon", ignore_result=False, soft_time_limit=120, time_limit=150
)
def sam_polygon_task(image_id: int, weights: str, points, box, **kwargs) -> dict:
    """A Segment Anything polygon: {"data": [...]} or {"error": reason}."""
    if kwargs:
        logger.warning("annotation.sam_polygon: unexpected arguments %s", sorted(kwargs))
    from annotation import assist
    from annotation.prelabel import image_files
    from datasets.models import Image

    image = Image.objects.select_related("blob").filter(pk=image_id).first()
    if image is None:
        return {"error": "The image was deleted meanwhile."}
    try:
        with image_files([image]) as (path,):
            return {"data": assist.sam_polygon(weights, path, points=points or None, box=box)}
    except assist.AssistError as exc:
        return {"error": str(exc)}
