"""Training jobs whose attempt went silent: beat's `core.long_jobs_reap` resumes a job whose
supervisor stopped beating for the length of its lease (its worker died) from its last stored
checkpoint, or fails it after too many losses, and sends again a queued job whose message was
lost. The row owns the state, with a lease its supervisor renews (Read the Docs'
`finish_unhealthy_builds` works the same way)."""

import socket
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.tasks import task_send
from training.metering import meter
from training.models import ACTIVE_STATES, AttemptEnd, JobState, TrainingAttempt, TrainingJob
from training.providers.base import Machine, TrainerHandle
from training.providers.local import LocalProvider
from training.services.jobs import job_locked, job_lost, lease_seconds


def jobs_reap() -> int:
    """Resume jobs whose supervisor went silent for three heartbeats (its worker died); re-send
    queued jobs whose message was lost. Returns how many jobs it touched."""
    now = timezone.now()
    silent = now - timedelta(seconds=lease_seconds())
    heartbeat = settings.TRAINING_HEARTBEAT_SECONDS
    touched = 0
    stale = TrainingJob.objects.filter(state__in=ACTIVE_STATES, heartbeat_at__lt=silent)
    for job_id in stale.values_list("pk", flat=True):
        with transaction.atomic():
            job = job_locked(job_id)
            if job.state not in ACTIVE_STATES or (job.heartbeat_at and job.heartbeat_at >= silent):
                continue
            since = job.heartbeat_at or now
            message = (
                f"No heartbeat from {job.lease_owner or 'its worker'} since {since:%H:%M:%S} UTC."
            )
            # Machine time up to its last sign of life, and no further than its trainer's last
            # progress and a heartbeat (a trainer that hung before its supervisor died).
            until = since
            if job.progress_at:
                until = min(since, job.progress_at + timedelta(seconds=heartbeat))
            for attempt in TrainingAttempt.objects.filter(job=job, ended_at__isnull=True):
                meter(attempt.pk, until)
                attempt.refresh_from_db(fields=["billed_seconds"])
                attempt.ended_at = until
                attempt.end_reason = AttemptEnd.LOST
                attempt.message = message
                attempt.save(update_fields=["ended_at", "end_reason", "message"])
                _kill_leftover(attempt)
            job_lost(job, message)
            touched += 1
    forgotten = TrainingJob.objects.filter(
        state=JobState.QUEUED, queued_at__lt=now - timedelta(minutes=10)
    )
    for job_id in forgotten.values_list("pk", flat=True):
        # Re-sent at most every ten minutes; the lease makes a duplicate message harmless.
        TrainingJob.objects.filter(pk=job_id, state=JobState.QUEUED).update(queued_at=now)
        task_send("training.run_job", job_id)
        touched += 1
    return touched


def _kill_leftover(attempt: TrainingAttempt) -> None:
    """A lost attempt's trainer on this machine dies with its supervisor; make sure."""
    if attempt.pid and attempt.worker.split(":", 1)[0] == socket.gethostname():
        machine = Machine(provider="local", name="", device="", workdir="")
        LocalProvider().terminate(TrainerHandle(machine=machine, pid=attempt.pid), force=True)
