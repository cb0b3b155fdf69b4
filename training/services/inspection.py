"""Inspecting uploaded weights: a worker process checks the pickle, loads the checkpoint with
Ultralytics (through torch's restricted unpickler) and reads its task, class names and image
size. Until then an upload is "pending" and nothing (training, exports, inference) uses it; an
upload that fails is deleted from storage at once, and its row says why. The task that runs
it is training.tasks.model_inspect."""

import logging

from django.db import transaction

from core.leases import Lease, LeaseLost, LongJob, lease_take
from core.tasks import task_send
from datasets.models import Task
from training.models import InspectState, TrainedModel
from training.services.models import model_local_path, model_weights_delete
from training.weights_process import INSPECT_TIMEOUT_SECONDS, WorkerAnswer, worker_run

logger = logging.getLogger(__name__)

PENDING, OK, FAILED = InspectState.PENDING, InspectState.OK, InspectState.FAILED


def _send(model: TrainedModel) -> None:
    task_send("training.model_inspect", model.pk)


# An inspection stays "pending" while it runs: its lease owner tells taken from queued.
INSPECT_JOB = LongJob(
    label="inspection of the uploaded weights",
    model=TrainedModel,
    queued=PENDING,
    running=PENDING,
    failed=FAILED,
    send=_send,
    state_field="inspect_state",
    owner_field="inspect_lease_owner",
    until_field="inspect_lease_until",
    attempts_field="inspect_attempts",
    error_field="inspect_error",
    finished_field=None,
    # A file that keeps killing its worker is refused like any other: nobody keeps it.
    gave_up_note="The file has been deleted.",
    gave_up=lambda model: model_weights_delete(model=model),
)


def model_inspect_run(*, model_id: int) -> None:
    """Inspect an uploaded model. Idempotent: one no longer pending, or being inspected under
    another worker's lease, is left alone."""
    lease = lease_take(INSPECT_JOB, model_id)
    if lease is None:
        return
    model = TrainedModel.objects.filter(pk=model_id).first()
    if model is None:
        return
    with lease.kept():
        try:
            weights = model_local_path(model)
        except (OSError, ValueError) as e:
            error = f"its file could not be read from storage ({type(e).__name__})"
            answer = WorkerAnswer(error=error)
        else:
            answer = worker_run(["inspect", str(weights)], timeout=INSPECT_TIMEOUT_SECONDS)
            if answer.error:
                logger.info(
                    "inspection of model %s failed: %s\n%s", model_id, answer.error, answer.log
                )
    model_inspect_record(lease=lease, weights_sha256=model.weights_sha256, answer=answer)


@transaction.atomic
def model_inspect_record(
    *, lease: Lease, answer: WorkerAnswer, weights_sha256: str | None = None
) -> TrainedModel | None:
    """Write what the worker found on a model still pending under this lease (with the same
    weights). The task, class names and image size come from the file; a task that differs
    from the one picked at upload is replaced, and the model says so. None when the lease is
    gone: a worker given up on never writes over the inspection that replaced it."""
    try:
        model = lease.fence()
    except LeaseLost:
        return None
    if weights_sha256 is not None and model.weights_sha256 != weights_sha256:
        return None
    model.inspect_lease_owner, model.inspect_lease_until = "", None
    result = answer.result or {}
    task, names = result.get("task"), result.get("class_names")
    error = answer.error
    if not error and task not in Task.values:
        error = f"it is a {str(task)[:30]} model, which Kestrel does not train or serve"
    if not error and (not isinstance(names, list) or not names):
        error = "it names no classes"
    if error:
        model.inspect_state = FAILED
        note = " The file has been deleted."
        model.inspect_error = f"The weights could not be used: {error}"[: 2000 - len(note)] + note
        model.save(
            update_fields=[
                "inspect_state",
                "inspect_error",
                "inspect_lease_owner",
                "inspect_lease_until",
            ]
        )
        # Nothing keeps a refused file: no later upload or request can name its path.
        transaction.on_commit(lambda: model_weights_delete(model=model))
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
            "inspect_lease_owner",
            "inspect_lease_until",
        ]
    )
    return model
