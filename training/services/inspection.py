"""Inspecting weights: a worker process checks the pickle, loads the checkpoint with
Ultralytics (through torch's restricted unpickler) and reads its task, class names and image
size. Until then an upload is "pending" and nothing (training, exports, inference, a download)
uses it; an upload that fails is deleted from storage at once, and its row says why. The task
that runs it is training.tasks.model_inspect.

Every checkpoint Kestrel keeps goes through this inspection before it is served: an upload, and
the best.pt a stock `ultralytics` client sends (its job's model, inspected here; the job lists it
among its files only once it passed, and says why when it did not); a supervisor inspects its
attempt's checkpoints with the same worker before it stores them (training.process.checkpoints). A
message names the file as its owner knows it, never by its storage key."""

import logging

from django.db import transaction

from core.leases import Lease, LeaseLost, LongJob, lease_row, lease_take
from core.storage import storage_delete
from core.tasks import task_send
from datasets.models import Task
from training.models import InspectState, TrainedModel
from training.services.jobs import job_locked, job_state_bump
from training.services.models import model_local_path, model_weights_delete
from training.weights_check import REFUSED_PREFIX
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
    gave_up=lambda model: _gave_up(model),
)

JOB_WEIGHTS = "best.pt"  # what an external job's files call the weights its model was made from


def weights_display_name(model: TrainedModel) -> str:
    """What the owner calls the file: the name it was uploaded under, or a job's best.pt."""
    if model.job_id is None:
        return str(model.train_args.get("filename") or "weights.pt")[:100]
    return JOB_WEIGHTS


def _scrubbed(text: str, model: TrainedModel, *paths: str) -> str:
    """`text` with no storage key or local path of the model's file in it."""
    shown = weights_display_name(model)
    for form in (model.weights_key, *paths):
        if form:
            text = text.replace(form, shown)
    return text


def _gave_up(model: TrainedModel) -> None:
    """An inspection given up on (its worker kept dying): the file goes, as a refused one."""
    model_weights_delete(model=model)
    row = TrainedModel.objects.filter(pk=model.pk).values_list("job_id", "inspect_error").first()
    if row and row[0]:
        with transaction.atomic():
            job_weights_refused(job_id=row[0], reason=row[1])


def job_weights_refused(*, job_id: int, reason: str) -> None:
    """An external job whose model's weights failed inspection: its files no longer list them
    (nothing links to a refused file, which is deleted) and the job says why. In the caller's
    transaction."""
    job = job_locked(job_id)
    if not job.is_external:
        return
    why = reason.removeprefix("The weights could not be used: ").removeprefix(REFUSED_PREFIX)
    why = why.removesuffix(" The file has been deleted.").rstrip(".")
    job.artifacts = {k: v for k, v in job.artifacts.items() if k != JOB_WEIGHTS}
    job.inspected_weights = {k: v for k, v in job.inspected_weights.items() if k != JOB_WEIGHTS}
    job.error = (
        f"The run ended, but its weights were refused and deleted: {why}. Its model cannot be "
        "used; train again, or upload weights that pass."
    )[:2000]
    job.save(update_fields=["artifacts", "inspected_weights", "error", "updated_at"])
    job_state_bump(job.pk)


def _job_weights_passed(model: TrainedModel) -> None:
    """An external job's model passed: the job lists its weights among its files, as the very
    bytes that were inspected (the model's own, content-addressed)."""
    job = job_locked(model.job_id)
    if not job.is_external:
        return
    job.artifacts = {**job.artifacts, JOB_WEIGHTS: model.weights_key}
    job.inspected_weights = {**job.inspected_weights, JOB_WEIGHTS: model.weights_key}
    job.save(update_fields=["artifacts", "inspected_weights", "updated_at"])
    if job.best_key != model.weights_key:
        # What a client's checkpoint_saved made its best.pt before Kestrel inspected weights.
        transaction.on_commit(lambda key=job.best_key: storage_delete(key))
    job_state_bump(job.pk)


def model_inspect_run(*, model_id: int) -> None:
    """Inspect an uploaded model. Idempotent: one no longer pending, or being inspected under
    another worker's lease, is left alone."""
    lease = lease_take(INSPECT_JOB, model_id)
    if lease is None:
        return
    model = lease_row(lease, lambda: TrainedModel.objects.filter(pk=model_id).first())
    if model is None:
        return
    with lease.kept():
        try:
            weights = model_local_path(model)
        except (OSError, ValueError) as e:
            error = f"its file could not be read from storage ({type(e).__name__})"
            answer = WorkerAnswer(error=error)
        else:
            name = weights_display_name(model)
            answer = worker_run(["inspect", str(weights), name], timeout=INSPECT_TIMEOUT_SECONDS)
            if answer.error:
                logger.info(
                    "inspection of model %s (%s) failed: %s\n%s",
                    model_id,
                    model.weights_key,
                    answer.error,
                    answer.log,
                )
                answer.error = _scrubbed(answer.error, model, str(weights), weights.name)
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
        if model.job_id is not None:
            job_weights_refused(job_id=model.job_id, reason=error)
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
    if model.job_id is not None:
        _job_weights_passed(model)
    return model
