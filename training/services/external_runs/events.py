"""What an external run's client reports as it goes, each event kept once under the job's row
lock and refused once the run has ended: an epoch's metrics (epoch_end), console chunks and the
live training bar (console_output), and the end (training_complete)."""

import re

from django.db import transaction
from django.db.models import F
from django.utils import timezone
from pydantic import ValidationError

from core.errors import ServiceError
from training.event_schema import Batch
from training.models import AttemptEnd, JobState, TrainingAttempt, TrainingJob
from training.process.writer import console_write, console_written, epoch_write, progress_write
from training.services.external_runs.client_input import (
    _float,
    _int,
    _metrics,
    _number,
    _stream_add,
    _system_keep,
)
from training.services.external_runs.runs import run_live_check
from training.services.external_uploads import upload_model_make
from training.services.jobs import job_locked, job_transition

MAX_MATRIX = 201  # the confusion matrix the results tab draws, background included


# --- epoch_end, console_output ----------------------------------------------------------------


def _seen(job: TrainingJob, **fields) -> None:
    TrainingJob.objects.filter(pk=job.pk).update(client_seen_at=timezone.now(), **fields)


def _is_final_validation(job: TrainingJob, epoch: int, metrics: dict) -> bool:
    """The extra epoch_end Ultralytics sends after training, the validation of best.pt, numbered
    one past the last epoch: epoch == epochs when all ran. A run stopped early numbers it one
    past where it stopped; it then carries no validation losses (the validator ran on its own),
    which every epoch of training does."""
    if epoch >= job.epochs:
        return True
    return bool(metrics) and not any(k.startswith("val/") for k in metrics)


@transaction.atomic
def external_epoch(*, job: TrainingJob, data: dict) -> TrainingJob:
    """One epoch's metrics (0-based from the client, 1-based here), once per epoch; the final
    validation becomes the job's final metrics. Refused once the run has ended."""
    job = job_locked(job.pk)
    run_live_check(job)
    epoch = _int(data.get("epoch"), None, low=0, high=100_000)
    metrics_in = data.get("metrics")
    if epoch is None or not isinstance(metrics_in, dict):
        raise ServiceError("epoch_end needs an epoch (a whole number) and its metrics.")
    metrics = _metrics(metrics_in)
    info = data.get("modelInfo")
    if isinstance(info, dict):
        kept = {k: _number(v) for k, v in info.items() if k in ("parameters", "gflops", "speedMs")}
        job.client_info = {**job.client_info, "model_info": kept}
        TrainingJob.objects.filter(pk=job.pk).update(client_info=job.client_info)
    if _is_final_validation(job, epoch, metrics):
        _seen(job, final_metrics=metrics)
        job.final_metrics = metrics
        return job
    created = epoch_write(job_id=job.pk, attempt=job.attempts, epoch=epoch + 1, metrics=metrics)
    fields: dict = {}
    if epoch + 1 >= job.epochs_done:
        fields = {"epochs_done": epoch + 1, "latest_metrics": metrics}
        for name, value in fields.items():
            setattr(job, name, value)
    if not created:
        fields["resent_events"] = F("resent_events") + 1
    _seen(job, **fields)
    _system_keep(job, job.attempts, data.get("system"), seq=epoch + 2)
    _stream_add(job, "epoch", epoch + 1, {"epoch": epoch + 1, "metrics": metrics, "seconds": None})
    return job


MAX_CONSOLE_CHARS = 256 * 1024
# A training progress bar's frame, as ultralytics' trainer describes it and its TQDM draws it:
# "  2/10   1.2G   1.234   2.345   1.111   12   640: 40% ━━━━── 8/20 3.1it/s 2.6s<3.9s"
# (epoch/epochs, GPU memory, the losses, instances and image size, then batch/batches).
_TRAIN_FRAME = re.compile(
    r"^\s*(\d{1,6})/(\d{1,6})\s+[\d.]+G\s+((?:[-+\d.eE]+\s+){2,34}[-+\d.eE]+):\s+\d{1,3}%\s+\S*\s*"
    r"(\d{1,9})/(\d{1,9})\s"
)


def _progress_keep(job: TrainingJob, frames: dict) -> None:
    """The client's live training bar, as the job page's batch progress (what Kestrel's own
    trainer reports as a batch event): kept as the latest in Redis and sent on the stream."""
    for text in list(frames.values())[:16]:
        match = _TRAIN_FRAME.match(text if isinstance(text, str) else "")
        if not match:
            continue  # a validation or download bar: the console shows those
        epoch, epochs, numbers, batch, batches = match.groups()
        values = [_number(_float(v)) for v in numbers.split()]
        try:
            event = Batch(
                epoch=int(epoch),
                epochs=int(epochs),
                batch=int(batch),
                batches=int(batches),
                batch_size=job.batch if job.batch and job.batch > 0 else 0,
                loss=values[:-2],  # the last two are instances and image size
            )
        except ValidationError:
            continue
        transaction.on_commit(lambda event=event: progress_write(job.pk, event))
        _stream_add(job, "batch", 0, event.model_dump())
        return


@transaction.atomic
def external_console(*, job: TrainingJob, data: dict) -> TrainingJob:
    """A chunk of console lines, kept once by the client's chunk id (a chunk sent twice
    changes nothing else); refused once the run has ended."""
    chunk = _int(data.get("chunkId"), None, low=0, high=2**62)
    content = data.get("content")
    if chunk is None or not isinstance(content, str):
        raise ServiceError("console_output needs a chunkId (a whole number) and its content.")
    if len(content) > MAX_CONSOLE_CHARS:
        raise ServiceError(f"A console chunk is at most {MAX_CONSOLE_CHARS} characters.")
    job = TrainingJob.objects.get(pk=job.pk)
    run_live_check(job)
    _seen(job)
    if isinstance(data.get("progress"), dict):
        _progress_keep(job, data["progress"])
    if not content.strip():
        return job  # progress bar frames only: nothing a console keeps
    lines = [line[:2000] for line in content.split("\n")]
    if console_written(job_id=job.pk, attempt=job.attempts, seq=chunk):
        TrainingJob.objects.filter(pk=job.pk).update(resent_events=F("resent_events") + 1)
        return job
    # The same chunk sent twice at once is still one row (the writer ignores the second).
    console_write(job_id=job.pk, attempt=job.attempts, seq=chunk, lines=lines)
    _stream_add(job, "log", chunk, {"lines": lines})
    return job


# --- the end ------------------------------------------------------------------------------------


def _confusion(plots, names: list[str]) -> dict | None:
    for plot in plots if isinstance(plots, list) else []:
        if not isinstance(plot, dict) or plot.get("type") != "confusion_matrix":
            continue
        matrix = plot.get("matrix")
        if not isinstance(matrix, list) or len(matrix) > MAX_MATRIX:
            return None
        rows = []
        for row in matrix:
            if not isinstance(row, list) or len(row) > MAX_MATRIX:
                return None
            rows.append([_number(v) or 0.0 for v in row])
        return {"names": [*names, "background"][: len(rows)], "matrix": rows}
    return None


def _curves(plots) -> list[dict]:
    """The PR, F1, P and R curves as the client sends them (101 points a class), for the page."""
    kept = []
    for plot in plots if isinstance(plots, list) else []:
        if isinstance(plot, dict) and str(plot.get("type", "")).endswith("_curve"):
            kept.append({k: plot[k] for k in ("type", "x", "y", "ap", "classes") if k in plot})
    return kept[:10]


@transaction.atomic
def external_complete(*, job: TrainingJob, data: dict) -> TrainingJob:
    """training_complete: the results, the model from the uploaded best.pt (inspected before it
    is used), and the end: stopped if Stop was pressed, cancelled if Cancel was, else succeeded.
    Sent again (the answer was lost), or after the run was marked lost: RunEnded, and nothing
    of the ended run changes."""
    job = job_locked(job.pk)
    run_live_check(job)
    results = data.get("results") if isinstance(data.get("results"), dict) else {}
    raw_names = data.get("classNames") if isinstance(data.get("classNames"), list) else []
    names = [str(n)[:100] for n in raw_names[:5000]]
    metrics_in = results.get("metrics") if isinstance(results.get("metrics"), dict) else {}
    metrics = _metrics(metrics_in)
    kept_results: dict = {"per_class": [], "per_class_raw": []}
    if matrix := _confusion(data.get("plots"), names):
        kept_results["confusion_matrix"] = matrix
    if curves := _curves(data.get("plots")):
        kept_results["curves"] = curves
    best_epoch = _int(results.get("bestEpoch"), None, low=0, high=100_000)
    if best_epoch is not None:
        kept_results["best_epoch"] = best_epoch + 1
    final = metrics or job.final_metrics
    job.final_metrics, job.results = final, kept_results
    job.save(update_fields=["final_metrics", "results", "updated_at"])
    if job.cancel_requested_at:
        state, end = JobState.CANCELED, AttemptEnd.CANCELED
    elif job.stop_requested_at or job.state == JobState.STOPPING:
        state, end = JobState.STOPPED, AttemptEnd.STOPPED
    else:
        state, end = JobState.SUCCEEDED, AttemptEnd.FINISHED
    error = ""
    if state != JobState.CANCELED:
        token = results.get("modelPath")
        error = upload_model_make(job=job, token=token, names=names, metrics=final)
    job.client_seen_at = timezone.now()
    job_transition(job, state, error=error, client_seen_at=job.client_seen_at)
    TrainingAttempt.objects.filter(job=job, number=job.attempts, ended_at__isnull=True).update(
        ended_at=timezone.now(), end_reason=end
    )
    return job
