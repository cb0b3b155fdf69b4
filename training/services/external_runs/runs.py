"""An external run's life outside its events: which project and dataset version it is of, its
start (training_started), a resume on the user's machine, whether it still takes events, and
marking lost a run whose client has gone silent."""

import re
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.errors import ServiceError
from datasets.models import DatasetVersion, Task
from training.models import (
    ACTIVE_STATES,
    AttemptEnd,
    FailureKind,
    JobKind,
    JobState,
    TrainingAttempt,
    TrainingJob,
)
from training.services.arguments import architecture_family_size
from training.services.external_runs.client_input import (
    _client_info,
    _device_text,
    _int,
    _system_keep,
    slug,
)
from training.services.external_uploads import (
    RunEnded,
    RunNotFound,
    RunRefused,
    external_uploads_discard,
    run_ended_message,
)
from training.services.jobs import concurrency_check, job_locked, job_state_bump, job_transition
from workspaces.models import Project
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

WORKER = "external"  # an external attempt's worker: nobody of Kestrel's


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
