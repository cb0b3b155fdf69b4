"""Inspecting uploaded weights: a worker process checks the pickle, loads the checkpoint with
Ultralytics and reads its task, class names and image size. Until then an upload is "pending"
and nothing (training, exports, inference) uses it."""

import logging

from celery import shared_task
from django.db import transaction

from datasets.models import Task
from deploy.export_process import INSPECT_TIMEOUT_SECONDS, WorkerAnswer, worker_run
from training.models import TrainedModel
from training.services.models import model_local_path

logger = logging.getLogger(__name__)

PENDING, OK, FAILED = "pending", "ok", "failed"


@shared_task(
    name="deploy.model_inspect",
    soft_time_limit=INSPECT_TIMEOUT_SECONDS + 60,
    time_limit=INSPECT_TIMEOUT_SECONDS + 120,
)
def model_inspect(model_id: int, **kwargs) -> None:
    """Inspect an uploaded model. Idempotent: one no longer pending is left alone. Nothing is
    locked while the worker runs; a second delivery inspects again and the first answer wins."""
    if kwargs:
        logger.warning("deploy.model_inspect: unexpected arguments %s", sorted(kwargs))
    model = TrainedModel.objects.filter(pk=model_id, inspect_state=PENDING).first()
    if model is None:
        return
    try:
        weights = model_local_path(model)
    except (OSError, ValueError) as e:
        answer = WorkerAnswer(error=f"its file could not be read from storage ({type(e).__name__})")
    else:
        answer = worker_run(["inspect", str(weights)], timeout=INSPECT_TIMEOUT_SECONDS)
        if answer.error:
            logger.info(
                "deploy.model_inspect %s failed: %s\n%s", model_id, answer.error, answer.log
            )
    model_inspect_record(model_id=model.pk, weights_sha256=model.weights_sha256, answer=answer)


@transaction.atomic
def model_inspect_record(
    *, model_id: int, weights_sha256: str, answer: WorkerAnswer
) -> TrainedModel | None:
    """Write what the worker found on a model still pending with the same weights. The task,
    class names and image size come from the file; a task that differs from the one picked at
    upload is replaced, and the model says so."""
    model = (
        TrainedModel.objects.select_for_update()
        .filter(pk=model_id, inspect_state=PENDING, weights_sha256=weights_sha256)
        .first()
    )
    if model is None:
        return None
    result = answer.result or {}
    task, names = result.get("task"), result.get("class_names")
    error = answer.error
    if not error and task not in Task.values:
        error = f"it is a {str(task)[:30]} model, which Kestrel does not train or serve"
    if not error and (not isinstance(names, list) or not names):
        error = "it names no classes"
    if error:
        model.inspect_state = FAILED
        model.inspect_error = f"The weights could not be used: {error}"[:2000]
        model.save(update_fields=["inspect_state", "inspect_error"])
        return model
    if task != model.task:
        model.train_args = {
            **model.train_args,
            "inspect_note": (
                f"The file holds a {Task(task).label.lower()} model; its task was set to that "
                f"(the upload said {Task(model.task).label.lower()})."
            ),
        }
    model.task = task
    model.class_names = [str(n)[:100] for n in names]
    imgsz = result.get("imgsz")
    if isinstance(imgsz, int) and 0 < imgsz <= 8192:
        model.imgsz = imgsz
    model.inspect_state = OK
    model.inspect_error = ""
    model.save(
        update_fields=[
            "task",
            "class_names",
            "imgsz",
            "train_args",
            "inspect_state",
            "inspect_error",
        ]
    )
    return model
