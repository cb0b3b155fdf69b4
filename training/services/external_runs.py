"""External training jobs: a run of stock `ultralytics` on the user's own machine that reports to
Kestrel's platform webhooks (training.platform_webhooks), kept like a job Kestrel ran: its
epochs, console, system samples, results and model, in the same rows the job page reads, the
epochs, console and system samples through the writer a supervised run's go through
(training.process.writer), after the client's hostile input is checked here.

The client sends its events from a thread pool, so they arrive out of order, some twice and
some never: every write here is idempotent (an epoch once by its number, a console chunk once
by its id) and taken under the job's row lock. Once the run has ended nothing of it changes:
every event for it is refused (RunEnded, 410), and so is every upload URL of an attempt that
has ended (training.services.external_uploads). Such a job is never metered (the machine is
the user's) and never queued: the reaper of Kestrel's jobs does not know it (no heartbeat); a
run whose client has gone silent for TRAINING_EXTERNAL_SILENT_SECONDS is marked lost here
(`external_runs_reap`)."""

import math
import re
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from pydantic import ValidationError

from core.errors import ServiceError
from datasets.models import DatasetVersion, Task
from training.event_schema import Batch
from training.models import (
    ACTIVE_STATES,
    AttemptEnd,
    FailureKind,
    JobKind,
    JobState,
    TrainingAttempt,
    TrainingJob,
)
from training.process.writer import (
    console_write,
    console_written,
    epoch_write,
    progress_write,
    stream_append,
    system_write,
)
from training.services.arguments import architecture_family_size
from training.services.external_uploads import (
    RunEnded,
    RunNotFound,
    RunRefused,
    external_uploads_discard,
    run_ended_message,
    upload_model_make,
)
from training.services.jobs import concurrency_check, job_locked, job_state_bump, job_transition
from workspaces.models import Project
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

MAX_MATRIX = 201  # the confusion matrix the results tab draws, background included
WORKER = "external"  # an external attempt's worker: nobody of Kestrel's


def slug(text: str) -> str:
    """The client's slugify (ultralytics.utils.callbacks.platform.slugify), which names the
    project and the run it sends; tests check the two agree."""
    text = re.sub(r"[^a-z0-9\s-]", "", str(text).lower()).replace(" ", "-")
    return re.sub(r"-+", "-", text).strip("-")[:128]


def _int(value, default: int | None, *, low: int = -(2**31), high: int = 2**31 - 1):
    try:
        number = int(str(value))
    except (TypeError, ValueError):
        return default
    return number if low <= number <= high else default


# --- identity ---------------------------------------------------------------------------------


def project_for_run(*, access: WorkspaceAccess, project_slug: str) -> Project:
    """The caller's project whose name slugifies to `project_slug` (the client slugifies what
    was typed); the oldest of several that do."""
    for project in Project.objects.for_workspace(access.workspace).order_by("created_at", "pk"):
        if slug(project.name) == project_slug:
            return project
    raise RunNotFound(f"No project “{project_slug}” in {access.workspace.slug} for this key.")


def _free_name(project: Project, name: str) -> str:
    """`name`, or the next free `name-2`, `name-3`... among the project's jobs."""
    name = name[:90] or "train"
    taken = {
        n.lower()
        for n in TrainingJob.objects.filter(project=project, name__istartswith=name).values_list(
            "name", flat=True
        )
    }
    if name.lower() not in taken:
        return name
    n = 2
    while f"{name}-{n}".lower() in taken:
        n += 1
    return f"{name}-{n}"


def _version_of(access: WorkspaceAccess, data: str) -> DatasetVersion | None:
    """The Kestrel dataset version a `data=ul://<owner>/datasets/<dataset>` run trains on: the
    one its export serves, found as the export finds it (datasets.platform_export). The client
    sends training_started before it downloads the data, so it is that dataset's newest
    version then. None for a local YAML, or a URI the export would refuse."""
    from datasets.platform_export import platform_dataset_find, platform_version_pick
    from workspaces.platform_api import PlatformRefusal

    match = re.fullmatch(r"ul://([^/]+)/datasets/([^/?#]+)", data.strip())
    if not match or match.group(1).lower() != access.workspace.slug.lower():
        return None
    try:
        dataset = platform_dataset_find(
            workspace=access.workspace, ident=match.group(2), not_found=""
        )
        return platform_version_pick(dataset=dataset, number=None)
    except PlatformRefusal:
        return None


def _device_text(environment: dict, device: str) -> str:
    host = str(environment.get("hostname") or "own machine")
    what = environment.get("gpuType") or environment.get("cpu") or ""
    count = environment.get("gpuCount")
    if environment.get("gpuType") and isinstance(count, int) and count > 1:
        what = f"{count} × {what}"
    return f"{host}: {what} ({device})" if what else f"{host} ({device})"


def _client_info(data: dict) -> dict:
    environment = data.get("environment") if isinstance(data.get("environment"), dict) else {}
    train_args = data.get("trainArgs") if isinstance(data.get("trainArgs"), dict) else {}
    keep = {k: v for k, v in environment.items() if isinstance(v, str | int | float | bool)}
    return {
        "environment": {k[:60]: (v[:500] if isinstance(v, str) else v) for k, v in keep.items()},
        "train_args": {str(k)[:60]: str(v)[:500] for k, v in list(train_args.items())[:300]},
        "device": str(data.get("device") or "")[:100],
    }


# --- training_started -------------------------------------------------------------------------


@transaction.atomic
def external_run_start(
    *, access: WorkspaceAccess, project: Project, name: str, data: dict
) -> tuple[TrainingJob, TrainingAttempt]:
    """A new external job for a run of `name` (the next free name when taken) in `project`."""
    access.require(Perm.TRAIN)
    if not access.owns(project):
        raise RunNotFound("No such project for this key.")
    info = _client_info(data)
    args = info["train_args"]
    task = args.get("task", "")
    if task not in Task.values:
        raise ServiceError(f"Kestrel keeps {', '.join(Task.values)} runs, not “{task[:20]}”.")
    # A training_started whose answer was lost on the way, sent again: the same job.
    save_dir, host = args.get("save_dir"), info["environment"].get("hostname")
    if save_dir:
        recent = timezone.now() - timedelta(minutes=10)
        again = (
            TrainingJob.objects.select_for_update()
            .filter(project=project, kind=JobKind.EXTERNAL, state=JobState.RUNNING)
            .filter(created_at__gte=recent, epochs_done=0, attempts=1)
            .filter(client_info__train_args__save_dir=save_dir)
            .filter(client_info__environment__hostname=host)
            .first()
        )
        if again is not None:
            return again, again.attempt_rows.get(number=1)
    concurrency_check(access.workspace)
    model = args.get("model", "")
    family, size = architecture_family_size(Path(model).stem) or ("", "")
    epochs = _int(data.get("epochs"), None, low=1, high=100_000) or _int(
        args.get("epochs"), 1, low=1, high=100_000
    )
    now = timezone.now()
    version = _version_of(access, args.get("data", ""))
    job = TrainingJob.objects.create(
        workspace=access.workspace,
        project=project,
        kind=JobKind.EXTERNAL,
        dataset_version=version,
        gpu_type=None,
        created_by=access.user,
        name=_free_name(project, name),
        task=task,
        model_family=family,
        model_size=size,
        epochs=epochs,
        imgsz=_int(args.get("imgsz"), 640, low=1, high=8192),
        batch=_int(args.get("batch"), -1),
        patience=_int(args.get("patience"), 100, low=0),
        optimizer=args.get("optimizer", "auto")[:10],
        seed=_int(args.get("seed"), 0),
        extra_args={k: args[k] for k in ("data", "model", "device") if k in args},
        state=JobState.RUNNING,
        attempts=1,
        device=_device_text(info["environment"], info["device"])[:200],
        client_info=info,
        client_seen_at=now,
        queued_at=now,
        started_at=now,
    )
    attempt = TrainingAttempt.objects.create(
        job=job, number=1, worker=WORKER, machine=str(host or "")[:200]
    )
    _system_keep(job, 1, data.get("system"), seq=1)
    job_state_bump(job.pk)
    return job, attempt


@transaction.atomic
def external_run_resume(*, job: TrainingJob, data: dict) -> tuple[TrainingJob, TrainingAttempt]:
    """`resume=True` on the user's machine: the same job goes on in a new attempt. One that
    succeeded or was cancelled is over (RunRefused: the client then starts a new one)."""
    job = job_locked(job.pk)
    if job.state in (JobState.SUCCEEDED, JobState.CANCELED):
        raise RunRefused(f"{job.title} has {job.get_state_display().lower()}.")
    if job.is_final:
        concurrency_check(job.workspace)
    now = timezone.now()
    TrainingAttempt.objects.filter(job=job, ended_at__isnull=True).update(
        ended_at=now, end_reason=AttemptEnd.LOST, message="Its client started the run again."
    )
    external_uploads_discard(job)  # the earlier attempts' URLs died with them
    info = _client_info(data)
    job.attempts += 1
    attempt = TrainingAttempt.objects.create(
        job=job,
        number=job.attempts,
        worker=WORKER,
        machine=str(info["environment"].get("hostname") or "")[:200],
        resumed_from_epoch=job.epochs_done or None,
    )
    # Not through job_transition: a stopped or lost external run goes straight back to running
    # (nothing of Kestrel's queues or provisions it).
    fields = {
        "state": JobState.RUNNING,
        "attempts": job.attempts,
        "stop_requested_at": None,
        "cancel_requested_at": None,
        "finished_at": None,
        "error": "",
        "failure_kind": "",
        "client_info": info,
        "client_seen_at": now,
        "device": _device_text(info["environment"], info["device"])[:200],
    }
    for field, value in fields.items():
        setattr(job, field, value)
    job.save(update_fields=[*fields, "updated_at"])
    _system_keep(job, attempt.number, data.get("system"), seq=1)
    job_state_bump(job.pk)
    return job, attempt


def run_live_check(job: TrainingJob) -> None:
    """RunEnded once the job has ended: an ended run takes no more events."""
    if job.is_final:
        raise RunEnded(run_ended_message(job))


def run_cancelled(job: TrainingJob) -> bool:
    """What the client is told after each event: stop at the next epoch boundary."""
    return bool(
        job.is_final
        or job.stop_requested_at
        or job.cancel_requested_at
        or job.state == JobState.STOPPING
    )


# --- what the client reports as it goes ------------------------------------------------------


def _stream_add(job: TrainingJob, kind: str, seq: int, data: dict) -> None:
    """The event on the job's live stream too: an external run has no trainer writing one."""
    stream_append(job_id=job.pk, attempt=job.attempts, kind=kind, seq=seq, data=data)


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if abs(value) < 1e15 else None


def _float(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _metrics(raw: dict) -> dict[str, float]:
    """Named numbers only (the client sends a non-finite one as null), at most 500."""
    numbers = ((str(k)[:200], _number(v)) for k, v in list(raw.items())[:500])
    return {k: v for k, v in numbers if v is not None}


_GPU_MEMORY = re.compile(r",\s*(\d{1,9})MiB\s*$")


def _gpu_memory_gb(job: TrainingJob) -> float | None:
    """The GPU's memory from the client's environment (ultralytics' get_gpu_info: "NVIDIA
    H200, 143771MiB"); the client reports the first training GPU's, and GPUs of one run are
    one kind."""
    environment = (job.client_info or {}).get("environment") or {}
    match = _GPU_MEMORY.search(str(environment.get("gpuType") or ""))
    return round(int(match.group(1)) / 1024, 1) if match else None


def _system_keep(job: TrainingJob, attempt: int, system, *, seq: int) -> None:
    """The client's SystemLogger sample in the shape of Kestrel's (event_schema.System)."""
    if not isinstance(system, dict):
        return
    values: dict = {}
    for ours, theirs in (("cpu_percent", "cpu"), ("ram_percent", "ram")):
        if (number := _number(system.get(theirs))) is not None:
            values[ours] = number
    disks = system.get("disk")
    if isinstance(disks, list) and disks and isinstance(disks[0], dict):
        used, total = _number(disks[0].get("used_gb")), _number(disks[0].get("total_gb"))
        if used is not None and total:
            values["disk_percent"] = round(100 * used / total, 1)
    gpus = []
    raw_gpus = system.get("gpus") if isinstance(system.get("gpus"), dict) else {}
    total_gb = _gpu_memory_gb(job)
    for _, gpu in sorted(raw_gpus.items())[:64]:
        if not isinstance(gpu, dict):
            continue
        row = {
            ours: number
            for ours, theirs in (
                ("util_percent", "usage"),
                ("memory_percent", "memory"),
                ("temperature_c", "temp"),
                ("power_w", "power"),
            )
            if (number := _number(gpu.get(theirs))) is not None
        }
        # The client sends memory as a percentage; its environment names each GPU's size.
        if total_gb and "memory_percent" in row:
            row["memory_total_gb"] = total_gb
            row["memory_used_gb"] = round(total_gb * row["memory_percent"] / 100, 2)
        gpus.append(row)
    if gpus:
        values["gpus"] = gpus
    if not values:
        return
    system_write(job_id=job.pk, attempt=attempt, seq=seq, values=values)
    _stream_add(job, "system", seq, values)


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


# --- lost runs ----------------------------------------------------------------------------------


def external_runs_reap() -> int:
    """Mark lost (failed, with the reason) every external run whose client has said nothing for
    TRAINING_EXTERNAL_SILENT_SECONDS; beat runs it with the other reapers (core.long_jobs_reap).
    Returns how many it marked."""
    now = timezone.now()
    silent = now - timedelta(seconds=settings.TRAINING_EXTERNAL_SILENT_SECONDS)
    stale = TrainingJob.objects.filter(
        kind=JobKind.EXTERNAL, state__in=ACTIVE_STATES, client_seen_at__lt=silent
    )
    touched = 0
    for job_id in stale.values_list("pk", flat=True):
        with transaction.atomic():
            job = job_locked(job_id)
            if job.state not in ACTIVE_STATES or job.client_seen_at >= silent:
                continue
            host = job.client_info.get("environment", {}).get("hostname") or "its machine"
            message = (
                f"Lost: no word from {host} since {job.client_seen_at:%Y-%m-%d %H:%M} UTC "
                f"(for more than {_minutes(settings.TRAINING_EXTERNAL_SILENT_SECONDS)}). "
                "Run the same command with resume=True there to continue it."
            )
            TrainingAttempt.objects.filter(job=job, ended_at__isnull=True).update(
                ended_at=job.client_seen_at, end_reason=AttemptEnd.LOST, message=message
            )
            job_transition(job, JobState.FAILED, error=message, failure_kind=FailureKind.LOST)
            external_uploads_discard(job)  # their URLs died with the attempt
            touched += 1
    return touched


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 120 else f"{seconds:.0f} s"
