"""The supervising side of a training attempt, run by `training.tasks.run_job`.

It takes the job's lease (one holder at a time, by row lock: training.process.lease), gets a
machine from the job's provider, materialises the dataset version and starts the trainer as its
own process (training.process.prepare), and then, until the trainer ends: reads the job's Redis
stream (training.process.follow) and writes what it says to PostgreSQL (metrics, logs, system
samples through training.process.writer; checkpoints, inspected, to storage:
training.process.checkpoints), beats the heartbeat, meters and passes on stop and cancel
(training.process.beat), and at the end writes how the attempt ended (training.process.finish).
A finished job needs nothing from Redis. What it keeps there is training.streams'; an attempt
whose supervisor died is training.reaper's.
"""

import logging
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import redis
from django.conf import settings
from django.db import InterfaceError, OperationalError, transaction
from django.utils import timezone

from core.errors import ServiceError
from training import event_schema as schema
from training.models import FailureKind, TrainingJob
from training.pretrained_fetch import WeightsDownloadFailed
from training.process.beat import Beat
from training.process.checkpoints import Checkpoints
from training.process.finish import Finish
from training.process.follow import Follow
from training.process.handlers import Handlers
from training.process.lease import (
    Fault,
    Lease,
    LeaseGone,
    LeaseHeld,
    db_connection_reset,
    lease_take,
    worker_name,
)
from training.process.prepare import Start
from training.process.watchdog import Stall, Watchdog
from training.providers import ProviderError
from training.run_files import CHECKPOINTS, RUN_NAME, run_file_open
from training.services.jobs import job_locked, job_transition, lease_seconds
from training.streams import training_redis
from training.weights_process import CheckpointInspector

logger = logging.getLogger(__name__)


@dataclass
class _Outcome:
    done: schema.Done | None = None
    error: str = ""
    error_kind: str = ""  # the trainer's FailureKind for it
    final_metrics: dict = field(default_factory=dict)
    train_end: schema.TrainEnd | None = None


class Supervisor(Start, Beat, Follow, Handlers, Checkpoints, Finish):
    """One attempt of a job, from its lease to its end; each phase is a module of this
    package, and this class holds what they share."""

    def __init__(self, lease: Lease):
        self.job = lease.job
        self.attempt = lease.attempt
        self.worker = lease.worker
        self.redis = training_redis()
        self.provider = None
        self.machine = None
        self.handle = None
        self.outcome = _Outcome()
        self.lost_lease = False
        self.canceling = False
        self.stop_sent = False
        self.last_seq = 0
        self.seen: set[int] = set()  # the latest sequence numbers stored, in seen_order
        self.seen_order: deque[int] = deque()
        self.last_id = "0-0"  # the stream's cursor: the last entry stored
        self.kept_seq = 0  # what the trainer was last told was stored
        self.redis_gone = ""  # why the attempt ended for Redis' sake, if it did
        self.phases: list[dict] = []  # what a cloud provider said the run was doing
        self.provider_failure = ""  # why the provider could not run it, in its words
        self.watchdog: Watchdog | None = None  # the trainer's progress, once it is started
        self.progress_at = None  # when the trainer last made progress (billing follows it)
        self.hung: Stall | None = None  # why the trainer was taken for hung, if it was
        self.hung_phase = ""  # what it was doing then (training.process.watchdog's phase)
        self.caught_up = True  # the last read emptied the stream
        self.store_failures = 0  # checkpoints in a row that could not be stored
        self.newest_checkpoint = None  # the last checkpoint event of the entries being read
        self.best_skipped: int | None = None  # a superseded checkpoint's epoch that was best
        self.quiet_said = False  # whether the page was told the trainer has gone quiet
        # Every checkpoint is inspected, as an upload is, before it is stored: by one worker
        # process for the attempt (started at the first), each file once by its digest.
        self.inspector = CheckpointInspector()
        self.inspected: dict[str, str] = {}  # sha256 → "" (passed) or why it was refused
        self.refused = ""  # why the attempt's weights were refused, if they were

    # -- helpers
    def _workdir(self) -> Path:
        return Path(self.machine.workdir) / "jobs" / str(self.job.pk)

    def _run_file(self, *parts: str, max_bytes: int):
        """A file of the run folder, opened without following links out of the machine's work
        folder (training.run_files); the event said only its name."""
        job_parts = ("jobs", str(self.job.pk), RUN_NAME)
        return run_file_open(Path(self.machine.workdir), *job_parts, *parts, max_bytes=max_bytes)

    def _checkpoint_parts(self) -> tuple[str, ...]:
        return ("jobs", str(self.job.pk), f"attempt-{self.attempt.number}", CHECKPOINTS)

    def _save_job(self, **fields) -> None:
        for name, value in fields.items():
            setattr(self.job, name, value)
        TrainingJob.objects.filter(pk=self.job.pk, lease_owner=self.worker).update(
            **fields, updated_at=timezone.now()
        )

    @contextmanager
    def _fenced(self):
        """A transaction that writes only while this attempt holds the job's lease: the row is
        renewed (locked until the end of it, on SQLite the database's write lock is taken), so
        the reaper cannot give the attempt up half-way; LeaseGone if it was already."""
        with transaction.atomic():
            if not self._lease_renew():
                self.lost_lease = True
                raise LeaseGone(f"job {self.job.pk}: the lease of {self.worker} is gone")
            yield

    def _transition(self, to: str, **fields) -> bool:
        """Change state if this worker still holds the lease; False if it lost it."""
        with transaction.atomic():
            job = job_locked(self.job.pk)
            if job.lease_owner != self.worker:
                self.lost_lease = True
                return False
            job_transition(job, to, **fields)
            self.job = job
        return True

    # -- run
    def run(self) -> None:
        try:
            self._run()
        finally:
            self.inspector.close()
            # No machine outlives its attempt: a cloud provider stops paying for it here.
            if self.machine is not None:
                try:
                    self.provider.release(self.machine)
                except Exception:
                    logger.exception("job %s: releasing its machine failed", self.job.pk)

    def _run(self) -> None:
        if self._trained_to_the_end():
            self._finish_from_checkpoint()
            return
        try:
            self._prepare_and_start()
        except WeightsDownloadFailed as e:
            self._fail(str(e), kind=FailureKind.DOWNLOAD)
            return
        except (ProviderError, ServiceError) as e:
            self._fail(str(e), kind=FailureKind.REFUSED)
            return
        except Exception:
            logger.exception(
                "job %s: preparing attempt %s failed", self.job.pk, self.attempt.number
            )
            self._fail(
                "Kestrel could not prepare the run (an internal error); see the worker log.",
                kind=FailureKind.PLATFORM,
            )
            return
        try:
            self._follow()
        except Exception:
            logger.exception(
                "job %s: supervising attempt %s failed", self.job.pk, self.attempt.number
            )
            if self.handle is not None:
                self.provider.terminate(self.handle, force=True)
            self._fail(
                "Kestrel lost track of the run (an internal error); see the worker log.",
                platform=True,
            )
            return
        self._finish_waiting_out_the_database()

    def _finish_waiting_out_the_database(self) -> None:
        """The attempt's end, written once the database answers: a connection it ended (a
        restart, pg_terminate_backend) as the run ends is reconnected and the end written again
        (each end is one transaction, rolled back whole), for as long as the lease would last;
        past that the reaper has given the attempt up, and the fence turns the write away."""
        fault = Fault()
        deadline = time.monotonic() + max(60.0, 2 * lease_seconds())
        while True:
            try:
                self._finish()
            except (OperationalError, InterfaceError) as e:
                fault.database(self.job.pk, e)
                if time.monotonic() > deadline:
                    raise
                db_connection_reset()
                fault.wait(settings.TRAINING_HEARTBEAT_SECONDS)
                continue
            fault.clear(self.job.pk)
            return


def run_job(job_id: int) -> str:
    """The whole of one attempt; returns a line for the worker's log."""
    worker = worker_name()
    try:
        lease = lease_take(job_id, worker)
    except LeaseHeld as e:
        logger.info("not running %s", e)
        return f"not run: {e}"
    while True:
        supervisor = Supervisor(lease)
        supervisor.run()
        # An attempt given up for Redis' sake is queued again, but its broker message went
        # with Redis: once Redis answers, resume it here (a message that did get through finds
        # the lease taken, and does nothing).
        if not supervisor.redis_gone or not _redis_back():
            break
        try:
            lease = lease_take(job_id, worker)
        except LeaseHeld as e:
            logger.info("not resuming %s", e)
            break
    return (
        f"job {job_id} attempt {lease.attempt.number}: {TrainingJob.objects.get(pk=job_id).state}"
    )


def _redis_back(patience: float = 600.0) -> bool:
    """Wait, with back-off, for Redis to answer again; False if it stays away `patience` s
    (the reaper then sends the queued job again)."""
    deadline = time.monotonic() + patience
    delay = 0.25
    while time.monotonic() < deadline:
        try:
            training_redis().ping()
            return True
        except redis.RedisError:
            time.sleep(delay)
            delay = min(delay * 2, 10.0)
    return False
