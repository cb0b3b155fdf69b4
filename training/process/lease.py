"""The lease of a training job, which makes one supervisor at a time its runner (taken by row
lock, renewed by each heartbeat, given up by the reaper when the beats stop), and the faults of
Redis and the database a supervisor waits out while it holds it."""

import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from training.models import JobState, TrainingAttempt, TrainingJob
from training.services.jobs import job_transition, lease_seconds

logger = logging.getLogger(__name__)


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


# --- the lease ----------------------------------------------------------------------------------


@dataclass
class Lease:
    job: TrainingJob
    attempt: TrainingAttempt
    worker: str


class LeaseHeld(Exception):
    pass


class LeaseGone(Exception):
    """This attempt no longer holds the job's lease: another took it over. It writes nothing."""


def lease_take(job_id: int, worker: str) -> Lease:
    """Make `worker` the job's only runner, or raise LeaseHeld saying who holds it."""
    with transaction.atomic():
        job = TrainingJob.objects.select_for_update().filter(pk=job_id).first()
        if job is None:
            raise LeaseHeld(f"job {job_id} does not exist")
        now = timezone.now()
        if job.state != JobState.QUEUED:
            if job.lease_owner and job.lease_until and job.lease_until > now:
                raise LeaseHeld(f"job {job_id}: the lease is held by {job.lease_owner}")
            raise LeaseHeld(f"job {job_id} is {job.state}, not queued")
        job.attempts += 1
        job_transition(
            job,
            JobState.PROVISIONING,
            attempts=job.attempts,
            lease_owner=worker,
            lease_until=now + timedelta(seconds=lease_seconds()),
            heartbeat_at=now,
            started_at=job.started_at or now,
            progress_at=None,
            stall_seconds=None,
            notice="",
        )
        attempt = TrainingAttempt.objects.create(
            job=job,
            number=job.attempts,
            worker=worker,
            resumed_from_epoch=job.checkpoint_epoch,
        )
    return Lease(job=job, attempt=attempt, worker=worker)


# --- faults waited out ------------------------------------------------------------------------


class Fault:
    """The Redis or database fault a supervisor is waiting out: since when, and its back-off."""

    def __init__(self):
        self.redis_since: float | None = None
        self.database_since: float | None = None
        self.delay = 0.1

    def redis(self, job_id: int, error: Exception) -> float:
        """Seconds Redis has been away."""
        if self.redis_since is None:
            self.redis_since = time.monotonic()
            logger.warning("job %s: Redis is unreachable (%s); waiting for it", job_id, error)
        return self.redis_seconds()

    def redis_seconds(self) -> float:
        return time.monotonic() - self.redis_since if self.redis_since is not None else 0.0

    def database(self, job_id: int, error: Exception) -> None:
        if self.database_since is None:
            self.database_since = time.monotonic()
            logger.warning("job %s: the database is unreachable (%s); reconnecting", job_id, error)

    def wait(self, cap: float) -> None:
        time.sleep(self.delay)
        self.delay = min(self.delay * 2, cap, 2.0)

    def clear(self, job_id: int) -> None:
        now = time.monotonic()
        for what, since in (("Redis", self.redis_since), ("the database", self.database_since)):
            if since is not None:
                logger.warning("job %s: %s is back after %.1f s", job_id, what, now - since)
        self.redis_since = self.database_since = None
        self.delay = 0.1


def db_connection_reset() -> None:
    """Drop a connection the database ended (a restart, pg_terminate_backend); the next query
    opens a new one."""
    connection.close_if_unusable_or_obsolete()
