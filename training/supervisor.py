"""The supervising side of a training attempt, run by `training.tasks.run_job`.

It takes the job's lease (one holder at a time, by row lock), gets a machine from the job's
provider, materialises the dataset version, starts the trainer as its own process, and then,
until the trainer ends: reads the job's Redis stream and writes what it says to PostgreSQL
(metrics, logs, system samples, checkpoints to storage), beats the heartbeat, and passes on
stop and cancel. A finished job needs nothing from Redis. What it keeps there is
training.streams'; an attempt whose supervisor died is training.reaper's.
"""

import hashlib
import json
import logging
import math
import os
import shutil
import socket
import tempfile
import time
import uuid
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import redis
from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import F
from django.utils import timezone

from core.errors import ServiceError
from core.storage import storage_delete, storage_exists, storage_get_file, storage_put
from datasets.models import Task
from training import event_schema as schema
from training.event_schema import EventRefused, event_parse
from training.metering import meter, metered, refund_platform_failure
from training.models import (
    AttemptEnd,
    EpochMetric,
    FailureKind,
    JobState,
    LogChunk,
    SystemSample,
    TrainingAttempt,
    TrainingJob,
    WeightsSource,
)
from training.pretrained_fetch import WeightsDownloadFailed, pretrained_fetch
from training.providers import ProviderError, provider_for
from training.run_files import (
    BEST_WEIGHTS,
    CHECKPOINTS,
    MAX_PLOT_BYTES,
    MAX_RESULTS_CSV_BYTES,
    MAX_WEIGHTS_BYTES,
    RESULTS_CSV,
    RUN_NAME,
    checkpoints_prune,
    run_file_open,
)
from training.runner import FENCED
from training.services.arguments import model_yaml_name, pretrained_weights
from training.services.catalog import local_type_refresh
from training.services.jobs import (
    QUICK_TEST_TRAIN_IMAGES,
    QUICK_TEST_VAL_IMAGES,
    job_locked,
    job_lost,
    job_state_bump,
    job_transition,
    lease_seconds,
)
from training.services.materialise import dataset_materialise
from training.services.models import model_from_job
from training.streams import (
    PROGRESS_TTL,
    beat_key,
    control_key,
    fence_key,
    kept_key,
    progress_key,
    stream_id,
    stream_key,
    training_redis,
)
from training.ultralytics_env import ultralytics_env
from training.watchdog import PHASE_WORDS, Stall, Watchdog
from training.weights_check import REFUSED_PREFIX
from training.weights_process import CheckpointInspector

logger = logging.getLogger(__name__)

SEEN_SEQS = 2000  # sequence numbers remembered to tell a resent event from an out-of-order one
# Events whose handlers write nothing to the database or storage (a batch writes its progress
# to Redis; its first one, first_batch_at, goes through _save_job, fenced by the lease).
UNWRITTEN = frozenset(("started", "batch", "val_batch", "done", "error"))


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


class WeightsRefused(Exception):
    """A checkpoint of the attempt failed inspection; the message says why."""


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


class _Fault:
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


# --- one attempt --------------------------------------------------------------------------------


@dataclass
class _Outcome:
    done: schema.Done | None = None
    error: str = ""
    error_kind: str = ""  # the trainer's FailureKind for it
    final_metrics: dict = field(default_factory=dict)
    train_end: schema.TrainEnd | None = None


class Supervisor:
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
        self.hung_phase = ""  # what it was doing then (training.watchdog's phase)
        self.caught_up = True  # the last read emptied the stream
        self.store_failures = 0  # checkpoints in a row that could not be stored
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
        self._finish()

    def _prepare_and_start(self) -> None:
        job = self.job
        self.provider = provider_for(job.gpu_type.provider)
        self.machine = self.provider.provision(job_id=job.pk, gpu_slug=job.gpu_type.slug)
        if self.machine.provider == "local":
            local_type_refresh()
        if not self._transition(JobState.PREPARING, device=self.machine.name):
            return
        workdir = self._workdir()
        attempt_dir = workdir / f"attempt-{self.attempt.number}"
        attempt_dir.mkdir(parents=True, exist_ok=True)
        subset = (QUICK_TEST_TRAIN_IMAGES, QUICK_TEST_VAL_IMAGES) if job.is_quick_test else None
        data = dataset_materialise(
            job.dataset_version, workdir=Path(self.machine.workdir), subset=subset
        )
        resume = None
        if job.checkpoint_epoch:
            resume = attempt_dir / "resume.pt"
            storage_get_file(job.checkpoint_key, resume)
        if job.weights == WeightsSource.MODEL and job.base_model is not None:
            model = attempt_dir / "base.pt"
            storage_get_file(job.base_model.weights_key, model)
            model = str(model)
        elif job.weights == WeightsSource.PRETRAINED:
            weights = pretrained_weights(job.model_family, job.model_size, job.task)
            if not weights.present:  # downloads are on: fetched now, or the job fails here
                pretrained_fetch(
                    weights,
                    workdir=attempt_dir / "download",
                    env=ultralytics_env(
                        Path(self.machine.workdir) / "ultralytics-config", offline=False
                    ),
                    keep_alive=self._lease_renew,
                    every=settings.TRAINING_HEARTBEAT_SECONDS,
                )
            model = str(weights.path)
        else:
            model = model_yaml_name(job.model_family, job.model_size, job.task)
        train_args = {
            **job.extra_args,
            "data": data,
            "epochs": job.epochs,
            "imgsz": job.imgsz,
            "batch": job.batch,
            "patience": job.patience,
            "optimizer": job.optimizer,
            "seed": job.seed,
            "device": self.machine.device,
            "project": str(workdir),
            "name": RUN_NAME,
            "exist_ok": True,
            "verbose": True,
        }
        if self.machine.device == "cpu":
            train_args.update(amp=False, workers=0)
        spec = {
            "job_id": job.pk,
            "attempt": self.attempt.number,
            "task": job.task,
            "model": model,
            "resume": str(resume) if resume else None,
            "train_args": train_args,
            "redis_url": settings.TRAINING_REDIS_URL,
            "stream": stream_key(job.pk),
            "control_key": control_key(job.pk),
            "kept_key": kept_key(job.pk),
            "fence_key": fence_key(job.pk),
            "checkpoint_dir": str(Path(self.machine.workdir, *self._checkpoint_parts())),
            "workdir": self.machine.workdir,
            "system_sample_seconds": max(1.0, settings.TRAINING_HEARTBEAT_SECONDS / 2),
            # At its end, the trainer waits this long for a Redis that is away: past the lease,
            # this supervisor has given the attempt up.
            "spool_drain_seconds": lease_seconds() + settings.TRAINING_HEARTBEAT_SECONDS,
            "env": ultralytics_env(
                Path(self.machine.workdir) / "ultralytics-config",
                offline=not settings.TRAINING_ALLOW_DOWNLOADS,
            ),
        }
        if settings.TRAINING_EVENTS_URL:  # the trainer reports over HTTP, not to Redis
            from training.trainer_events import events_token

            base = settings.TRAINING_EVENTS_URL.rstrip("/")
            spec["events_url"] = f"{base}/api/v1/trainer/jobs/{job.pk}/events"
            spec["events_token"] = events_token(job.pk, self.attempt.number)
            del spec["redis_url"]  # as on a machine that cannot reach it
            from training.remote import remote_spec_store

            # What a trainer on another machine fetches instead (python -m training.runner
            # --remote): URLs of this server where this spec has paths of this machine.
            remote_spec_store(spec, base_url=base, subset=subset)
        spec_path = attempt_dir / "spec.json"
        spec_path.write_text(json.dumps(spec, indent=1))
        # A fresh stream for this attempt; the fence tells any older trainer to stop.
        self._redis_waiting(self._stream_fresh)
        if self.lost_lease:
            return
        self.handle = self.provider.start(
            self.machine, spec_path=str(spec_path), log_path=str(attempt_dir / "trainer.log")
        )
        TrainingAttempt.objects.filter(pk=self.attempt.pk).update(
            pid=self.handle.pid, machine=self.machine.name, provider_ref=self.handle.ref
        )
        self.watchdog = Watchdog(
            floor=settings.TRAINING_STALL_FLOOR_SECONDS,
            ceiling=settings.TRAINING_STALL_CEILING_SECONDS,
            factor=settings.TRAINING_STALL_FACTOR,
            now=time.time(),
        )
        self.progress_at = timezone.now()
        # Its checkpoints' inspector imports torch while the trainer starts, not at the first
        # checkpoint: the supervisor's loop is never held up seconds by it mid-run.
        self.inspector.start()
        self._transition(JobState.RUNNING)

    def _stream_fresh(self) -> None:
        pipe = self.redis.pipeline()
        pipe.delete(stream_key(self.job.pk), control_key(self.job.pk), kept_key(self.job.pk))
        pipe.set(fence_key(self.job.pk), self.attempt.number, ex=7 * 24 * 3600)
        pipe.execute()

    def _redis_waiting(self, call) -> None:
        """`call()`, Redis faults waited out with back-off for up to the lease's length."""
        fault = _Fault()
        while True:
            try:
                call()
                fault.clear(self.job.pk)
                return
            except redis.RedisError as e:
                if fault.redis(self.job.pk, e) > lease_seconds():
                    raise
                self._lease_renew()  # the reaper must not take a wait for a loss
                fault.wait(settings.TRAINING_HEARTBEAT_SECONDS)

    def _lease_renew(self) -> bool:
        now = timezone.now()
        fields = {"heartbeat_at": now, "lease_until": now + timedelta(seconds=lease_seconds())}
        if self.watchdog is not None:  # what the page says of a trainer gone quiet
            fields.update(
                progress_at=self.progress_at, stall_seconds=int(self.watchdog.allowance())
            )
        renewed = TrainingJob.objects.filter(pk=self.job.pk, lease_owner=self.worker).update(
            **fields
        )
        return bool(renewed)

    def _quiet(self, now) -> bool:
        """Whether the trainer's silence is past what the page warns of (the rule of
        training.selectors.job_quiet_seconds)."""
        if self.watchdog is None or self.progress_at is None:
            return False
        quiet = (now - self.progress_at).total_seconds()
        warn = max(self.watchdog.allowance() / 2, 2 * settings.TRAINING_HEARTBEAT_SECONDS)
        return quiet > warn

    def _billed_until(self, now):
        """Machine time is billed while the trainer makes progress: up to its last progress
        and one heartbeat (caught up as soon as it goes on; kept back if it hung). An attempt
        ends there too: a supervisor still storing what its trainer sent before exiting (each
        checkpoint inspected) charges nothing for its own lag."""
        if self.progress_at is None:
            return now
        return min(now, self.progress_at + timedelta(seconds=settings.TRAINING_HEARTBEAT_SECONDS))

    def _beat(self) -> None:
        """Heartbeat and lease renewal; read stop and cancel requests made since."""
        now = timezone.now()
        if not self._lease_renew():
            self.lost_lease = True
            return
        try:
            self.redis.set(beat_key(self.job.pk), f"{time.time():.3f}", ex=PROGRESS_TTL)
        except redis.RedisError:
            pass  # pages read the heartbeat from the database meanwhile
        quiet = self._quiet(now)
        if quiet != self.quiet_said:  # the page warns of a trainer gone quiet, and stops
            self.quiet_said = quiet
            job_state_bump(self.job.pk)
        state, stop_at, cancel_at = (
            TrainingJob.objects.filter(pk=self.job.pk)
            .values_list("state", "stop_requested_at", "cancel_requested_at")
            .get()
        )
        self.job.state = state
        reason = None
        if metered(self.job):
            reason = meter(self.attempt.pk, self._billed_until(now), holder=self.worker)
        if reason and not stop_at and state != JobState.STOPPING:
            # Credits (or the job's budget) cover no more: stop as a person would, keep the
            # checkpoints; a top-up and Resume continue the run.
            stop_at = now
            self._transition(JobState.STOPPING, stop_requested_at=now, error=reason)
        self._phase_check(now)
        if cancel_at and not self.canceling:
            self.canceling = True
            self.provider.terminate(self.handle, force=True)
        elif (stop_at or state == JobState.STOPPING) and not self.stop_sent:
            self.stop_sent = True
            self.redis.set(control_key(self.job.pk), "stop", ex=7 * 24 * 3600)

    def _phase_check(self, now) -> None:
        """A cloud provider's phase (queued, provisioning, setting up, running, recovering)
        onto the attempt, each with its time. Nothing waits for a machine for ever: past the
        GPU type's provisioning timeout with no word from the trainer, the run is cancelled
        at the provider and the attempt fails with the reason (its credits given back)."""
        phase_of = getattr(self.provider, "phase", None)
        if phase_of is None or self.handle is None or self.canceling:
            return
        try:
            report = phase_of(self.handle, trainer_reported=self.last_seq > 0)
        except ProviderError as e:
            logger.warning("job %s: the provider's phase: %s", self.job.pk, e)
            return
        if not self.phases or self.phases[-1]["phase"] != str(report.phase):
            self.phases.append(
                {"phase": str(report.phase), "label": report.phase.label, "at": now.isoformat()}
            )
            TrainingAttempt.objects.filter(pk=self.attempt.pk).update(provider_phases=self.phases)
        if report.reason and not self.last_seq:  # a trainer that spoke ends by its own word
            self.provider_failure = report.reason
        timeout = self.machine.details.get("provision_timeout_seconds")
        waiting = str(report.phase) in ("queued", "provisioning")
        if timeout and waiting and not self.last_seq:
            waited = (now - self.attempt.started_at).total_seconds()
            if waited > timeout:
                self.provider_failure = (
                    f"No machine of this type was ready within {timeout / 60:.0f} min "
                    f"({report.phase.label.lower()} at the provider); try another type or later."
                )
                self.canceling = True
                self.provider.terminate(self.handle, force=True)

    def _follow(self) -> None:
        """Until the trainer ends: beat, pass on cancel, read and store its events. A fault of
        Redis or of the database is waited out (reconnecting with back-off, reading again from
        the last event stored); only a Redis outage longer than the lease ends the attempt."""
        if self.handle is None:
            return
        beat_every = settings.TRAINING_HEARTBEAT_SECONDS
        last_beat = 0.0
        fault = _Fault()
        while True:
            try:
                if time.monotonic() - last_beat >= beat_every:
                    self._beat()
                    last_beat = time.monotonic()
                    if self.lost_lease:  # another attempt owns the job: end ours, touch nothing
                        self.provider.terminate(self.handle, force=True)
                        return
                if fault.redis_since is not None:
                    self._redis_restore()
                if self._read():
                    return
                if self.lost_lease:  # found while storing an event
                    self.provider.terminate(self.handle, force=True)
                    return
                if fault.redis_since is not None or fault.database_since is not None:
                    self.watchdog.fault_cleared(time.time())  # its events were held up
                fault.clear(self.job.pk)
                if self._hung():
                    return
            except redis.RedisError as e:
                if fault.redis(self.job.pk, e) > lease_seconds():
                    self.provider.terminate(self.handle, force=True)
                    self.redis_gone = (
                        f"Kestrel could not reach Redis for {fault.redis_seconds():.0f} s, "
                        "longer than the run's lease."
                    )
                    return
                fault.wait(beat_every)
            except (OperationalError, InterfaceError) as e:
                fault.database(self.job.pk, e)
                db_connection_reset()
                fault.wait(beat_every)

    def _hung(self) -> bool:
        """The trainer made no progress for longer than its pace allows: kill it (its whole
        process group, or its run at the provider); the attempt then ends as lost and the job
        resumes from its last stored checkpoint."""
        if self.canceling or not self.caught_up:  # events still waiting are progress unread
            return False
        stall = self.watchdog.stalled(time.time())
        if stall is None:
            return False
        w = self.watchdog
        logger.warning(
            "job %s: no progress for %.0f s while %s (allowed %.0f s: longest gap %.2f s, "
            "%s epochs, %s validations); ending attempt %s",
            self.job.pk,
            stall.silent,
            w.phase,
            stall.allowance,
            w.longest,
            w.epochs,
            w.validations,
            self.attempt.number,
        )
        self.hung, self.hung_phase = stall, PHASE_WORDS[self.watchdog.phase]
        self.provider.terminate(self.handle, force=True)
        return True

    def _read(self) -> bool:
        """One read of the stream, each entry stored before the cursor moves past it. True once
        the trainer has exited and everything it wrote is stored."""
        key = stream_key(self.job.pk)
        if not self.canceling and self.redis.get(control_key(self.job.pk)) == b"cancel":
            self.canceling = True  # at once, not at the next heartbeat
            self.provider.terminate(self.handle, force=True)
        beat_every = settings.TRAINING_HEARTBEAT_SECONDS
        if self.outcome.done is not None or self.outcome.error:
            # The trainer said its last word; it is exiting. Look often, not every second.
            block, exited = 50, self.provider.exit_code(self.handle) is not None
        else:
            block, exited = int(min(1000, beat_every * 500)), False
        if not exited:
            exited = self.provider.exit_code(self.handle) is not None
        # After the exit, everything it wrote is in the stream: one read without waiting.
        replies = self.redis.xread({key: self.last_id}, count=500, block=None if exited else block)
        read = 0
        for _, entries in replies or []:
            for entry_id, fields in entries:
                read += 1
                try:
                    self._handle(fields, entry_id)
                except LeaseGone:
                    logger.warning(
                        "job %s: attempt %s lost its lease; it writes nothing more",
                        self.job.pk,
                        self.attempt.number,
                    )
                    return False
                self.last_id = entry_id
        self.caught_up = read < 500
        if self.last_seq != self.kept_seq:  # stored: the trainer may forget them
            self.redis.set(kept_key(self.job.pk), self.last_seq, ex=7 * 24 * 3600)
            self.kept_seq = self.last_seq
        return exited and not self.redis.xread({key: self.last_id}, count=1)

    def _redis_restore(self) -> None:
        """Redis answers again, perhaps empty (restarted without a disk): put back what this
        attempt keeps there, and read the stream from its start if its ids went back in time
        (the trainer's sequence numbers keep anything from being stored twice)."""
        key = stream_key(self.job.pk)
        pipe = self.redis.pipeline()
        pipe.set(fence_key(self.job.pk), self.attempt.number, ex=7 * 24 * 3600)
        pipe.set(kept_key(self.job.pk), self.last_seq, ex=7 * 24 * 3600)
        if self.stop_sent:
            pipe.set(control_key(self.job.pk), "stop", ex=7 * 24 * 3600)
        pipe.xrevrange(key, count=1)
        *_, top = pipe.execute()
        if top and stream_id(top[0][0]) < stream_id(self.last_id):
            self.last_id = "0-0"

    def _handle(self, fields: dict, entry_id: bytes | str = b"") -> None:
        """One stream entry, checked against the events' schema (a local trainer writes to the
        stream directly): malformed, unknown or out-of-order ones are dropped and counted."""
        try:
            attempt = int(fields[b"a"])
            seq = int(fields[b"s"])
            kind = fields[b"t"].decode()
            raw = fields[b"d"]
        except (KeyError, ValueError, UnicodeDecodeError):
            self._drop()
            return
        if attempt != self.attempt.number:
            return  # an older attempt's late words
        try:
            event = event_parse(kind, raw)
        except EventRefused as e:
            logger.warning("job %s: event %s refused: %s", self.job.pk, seq, e)
            self._drop()
            return
        if seq in self.seen:
            return  # sent again after a fault (its first copy arrived): nothing is lost
        if seq <= self.last_seq:
            self._drop()
            return
        # Timed when the event entered the stream: the trainer's pace, not this loop's (which
        # an inspection or a busy machine holds up).
        sent = _sent_at(entry_id)
        if self.watchdog is not None and self.watchdog.event(kind, event, sent.timestamp()):
            self.progress_at = sent
        try:
            if self.machine is not None and self.machine.details.get("remote"):
                self._remote_files_take(kind, event)
            if kind in UNWRITTEN:
                getattr(self, f"_on_{kind}")(event, seq)
            elif kind == "checkpoint":  # inspected first, unfenced (it takes seconds); it
                self._on_checkpoint(event, seq)  # stores and writes under the fence itself
            else:  # what it writes, it writes only while the attempt holds the lease
                with self._fenced():
                    getattr(self, f"_on_{kind}")(event, seq)
        except (KeyError, TypeError, ValueError, AttributeError, OSError):
            logger.warning("job %s: event %s %s dropped", self.job.pk, kind, seq, exc_info=True)
            self._drop()
        # Only now: an event whose storing failed for the database's sake (OperationalError
        # goes up to _follow) is read and stored again once it answers.
        self.last_seq = seq
        self.seen.add(seq)
        self.seen_order.append(seq)
        if len(self.seen_order) > SEEN_SEQS:
            self.seen.discard(self.seen_order.popleft())

    def _remote_files_take(self, kind: str, event) -> None:
        """A remote trainer uploaded the files an event names (training.remote) before sending
        it: each is put where a local trainer would have written it, then the handlers read
        them the same way. A file that is not there is left to the handler to miss."""
        from training.remote import attempt_files_key

        checkpoints = self._workdir() / f"attempt-{self.attempt.number}" / CHECKPOINTS
        run = self._workdir() / RUN_NAME
        if kind == "checkpoint":
            names = [f"last-{event.epoch}.pt"] + ([f"best-{event.epoch}.pt"] if event.best else [])
            wanted = {name: checkpoints / name for name in names}
        elif kind == "train_end":
            wanted = {name: run / name for name in [*event.plots, RESULTS_CSV]}
            wanted["best.pt"] = run.joinpath(*BEST_WEIGHTS)
        else:
            return
        for name, path in wanted.items():
            key = attempt_files_key(self.job.pk, self.attempt.number, name)
            if storage_exists(key):
                storage_get_file(key, path)
                storage_delete(key)

    def _drop(self) -> None:
        TrainingJob.objects.filter(pk=self.job.pk, lease_owner=self.worker).update(
            dropped_events=F("dropped_events") + 1
        )

    # -- events (each a model of training.event_schema; files are named, never given by path)
    def _on_started(self, event: schema.Started, seq: int) -> None:
        """The trainer process is up (its pid is on the attempt already)."""

    def _on_train_start(self, event: schema.TrainStart, seq: int) -> None:
        """Ultralytics built the model and the loaders; batches follow. A resumed attempt says
        from which epoch it really goes on (the checkpoint's own): the stored file may be a
        newer one than the job's row names, when a worker was killed between storing last.pt
        and saving its epoch. The attempt records what the trainer does."""
        if self.attempt.resumed_from_epoch and event.start_epoch != self.attempt.resumed_from_epoch:
            self.attempt.resumed_from_epoch = event.start_epoch
            TrainingAttempt.objects.filter(pk=self.attempt.pk).update(
                resumed_from_epoch=event.start_epoch
            )

    def _on_batch(self, event: schema.Batch, seq: int) -> None:
        try:
            self.redis.set(progress_key(self.job.pk), event.model_dump_json(), ex=PROGRESS_TTL)
        except redis.RedisError:
            pass  # progress only: the next batch says it again
        if event.first and self.job.first_batch_at is None:
            self._save_job(first_batch_at=timezone.now())

    def _on_val_batch(self, event: schema.ValBatch, seq: int) -> None:
        """Validation goes on (training.watchdog reads it; nothing is stored)."""

    def _on_epoch(self, event: schema.Epoch, seq: int) -> None:
        with transaction.atomic():
            EpochMetric.objects.update_or_create(
                job_id=self.job.pk,
                epoch=event.epoch,
                defaults={
                    "attempt": self.attempt.number,
                    "values": event.metrics,
                    "seconds": event.seconds,
                },
            )
            self._save_job(epochs_done=event.epoch, latest_metrics=event.metrics)

    def _on_checkpoint(self, event: schema.Checkpoint, seq: int) -> None:
        """Store last-<epoch>.pt (and best-<epoch>.pt) from this attempt's own checkpoint
        folder, then delete the older ones there: never a file anywhere else. Each is copied
        out of the folder and inspected first, and the very bytes inspected are stored; one
        that fails is stored nowhere, and ends the run (`refused`)."""
        if self.refused:
            return
        base, folder = Path(self.machine.workdir), self._checkpoint_parts()
        stored = {}  # best first: last.pt names the epoch resumed from, so it goes in last
        if event.best:
            stored[f"best-{event.epoch}.pt"] = ("best.pt (training)", self.job.best_key)
        stored[f"last-{event.epoch}.pt"] = ("last.pt", self.job.checkpoint_key)
        with tempfile.TemporaryDirectory(prefix="kestrel-checkpoint-") as tmp:
            try:
                copies = {name: self._inspected_copy((*folder, name), Path(tmp)) for name in stored}
            except WeightsRefused as e:
                self._weights_refused(
                    f"The checkpoint of epoch {event.epoch} was refused and deleted: {e}. The "
                    "run was stopped and its checkpoints deleted: a run whose trainer writes "
                    "such files is not resumed."
                )
                checkpoints_prune(base, *folder, stored=event.epoch + 1)  # nobody keeps it
                return
            with self._fenced():
                for name, (_, key) in stored.items():
                    with open(copies[name], "rb") as f:
                        try:
                            storage_put(key, f, replace=True)
                        except OSError as e:  # storage's fault (a full disk), not the file's
                            self._checkpoint_not_stored(event.epoch, e)
                            return
                self.store_failures = 0
                artifacts, inspected = dict(self.job.artifacts), dict(self.job.inspected_weights)
                for artifact, key in stored.values():
                    artifacts[artifact] = inspected[artifact] = key
                notice = {"notice": ""} if self.job.notice else {}
                self._save_job(
                    checkpoint_epoch=event.epoch,
                    artifacts=artifacts,
                    inspected_weights=inspected,
                    **notice,
                )
                if notice:
                    job_state_bump(self.job.pk)
        checkpoints_prune(base, *folder, stored=event.epoch)  # stored now: the older ones go

    def _inspected_copy(self, parts: tuple[str, ...], folder: Path) -> Path:
        """A copy in `folder` of the machine's file workdir/parts... (opened as run_files
        opens them), once it passed the inspection every stored checkpoint passes; raises
        WeightsRefused saying why when it did not, OSError when there is no such plain file.
        The lease is kept while the inspector works."""
        name = parts[-1]
        copy = folder / name
        digest = hashlib.sha256()
        with (
            run_file_open(Path(self.machine.workdir), *parts, max_bytes=MAX_WEIGHTS_BYTES) as f,
            open(copy, "xb") as out,
        ):
            while block := f.read(1 << 20):
                digest.update(block)
                out.write(block)
        key = digest.hexdigest()
        if key not in self.inspected:
            answer = self.inspector.inspect(
                copy,
                name,
                keep_alive=self._inspection_keep_alive,
                every=settings.TRAINING_HEARTBEAT_SECONDS,
            )
            if len(self.inspected) > 16:
                self.inspected.clear()
            self.inspected[key] = answer.error or ""
        if error := self.inspected[key]:
            if error.startswith(REFUSED_PREFIX):
                why = error.removeprefix(REFUSED_PREFIX).rstrip(".")
            else:
                why = f"{name} could not be inspected ({error.rstrip('.')})"
            raise WeightsRefused(why)
        return copy

    def _inspection_keep_alive(self) -> None:
        if not self._lease_renew():
            self.lost_lease = True

    def _weights_refused(self, message: str) -> None:
        """A file of this attempt failed inspection: the trainer is stopped at once, nothing
        more of it is stored, and the attempt ends failed with `message` (_finish)."""
        logger.warning("job %s: %s", self.job.pk, message)
        self.refused = message[:2000]
        if self.handle is not None:
            self.provider.terminate(self.handle, force=True)

    def _checkpoints_drop(self) -> None:
        """In the fence: the job's stored checkpoints go (a refused run keeps none)."""
        job = self.job
        kept = {name: key for name, key in job.artifacts.items() if not key.endswith(".pt")}
        self._save_job(artifacts=kept, inspected_weights={}, checkpoint_epoch=None)
        for key in (job.best_key, job.checkpoint_key):
            transaction.on_commit(lambda key=key: storage_delete(key))

    def _checkpoint_not_stored(self, epoch: int, error: OSError) -> None:
        """Say so on the job page; after several in a row, stop the run (its last stored
        checkpoint kept) rather than train on with nothing to resume from."""
        self.store_failures += 1
        reason = (os.strerror(error.errno) if error.errno else str(error)).lower()
        kept = self.job.checkpoint_epoch
        since = f"the last stored is epoch {kept}'s" if kept else "none is stored yet"
        notice = f"Checkpoint at epoch {epoch} not stored: {reason}; {since}."
        logger.warning("job %s: %s (%s in a row)", self.job.pk, notice, self.store_failures)
        self._save_job(notice=notice)
        job_state_bump(self.job.pk)
        limit = settings.TRAINING_CHECKPOINT_STORE_FAILURES
        if self.store_failures >= limit and self.job.state == JobState.RUNNING:
            goes_on = f"from epoch {kept}" if kept else "from the start"
            self._transition(
                JobState.STOPPING,
                stop_requested_at=timezone.now(),
                error=f"{limit} checkpoints in a row could not be stored ({reason}); the run "
                f"stopped rather than train on without one. Free space, then Resume: it goes "
                f"on {goes_on}.",
            )

    def _on_log(self, event: schema.Log, seq: int) -> None:
        LogChunk.objects.bulk_create(
            [
                LogChunk(
                    job_id=self.job.pk,
                    attempt=self.attempt.number,
                    seq=seq,
                    text="\n".join(event.lines),
                )
            ],
            ignore_conflicts=True,
        )

    def _on_system(self, event: schema.System, seq: int) -> None:
        values = event.model_dump(exclude_none=True)
        SystemSample.objects.bulk_create(
            [SystemSample(job_id=self.job.pk, attempt=self.attempt.number, seq=seq, values=values)],
            ignore_conflicts=True,
        )

    def _on_final(self, event: schema.Final, seq: int) -> None:
        self.outcome.final_metrics = event.metrics
        self._save_job(final_metrics=event.metrics)

    def _on_train_end(self, event: schema.TrainEnd, seq: int) -> None:
        """The results, and the run folder's plots and results.csv by name; a name that is not
        a plain file of the run folder (missing, a link, too big) is skipped."""
        self.outcome.train_end = event
        artifacts = dict(self.job.artifacts)
        wanted = [(name, f"plots/{name}", MAX_PLOT_BYTES) for name in event.plots]
        wanted.append((RESULTS_CSV, RESULTS_CSV, MAX_RESULTS_CSV_BYTES))
        for name, key, max_bytes in wanted:
            key = f"training/jobs/{self.job.pk}/{key}"
            try:
                with self._run_file(name, max_bytes=max_bytes) as f:
                    storage_put(key, f, replace=True)
            except OSError as e:
                logger.warning("job %s: %s not collected: %s", self.job.pk, name, e)
                continue
            artifacts[name] = key
        results = _results(event.results.model_dump(), self.job.task)
        self._save_job(artifacts=artifacts, results=results)

    def _on_done(self, event: schema.Done, seq: int) -> None:
        self.outcome.done = event

    def _on_error(self, event: schema.Error, seq: int) -> None:
        self.outcome.error = event.message
        self.outcome.error_kind = event.kind or ""

    # -- endings: each written in one transaction that still holds the lease, or not at all
    def _end_attempt(self, reason: str, message: str = "", *, at=None) -> None:
        TrainingAttempt.objects.filter(pk=self.attempt.pk, ended_at__isnull=True).update(
            ended_at=at or timezone.now(), end_reason=reason, message=message[:2000]
        )

    def _cleanup(self) -> None:
        try:
            self.redis.delete(
                stream_key(self.job.pk),
                control_key(self.job.pk),
                progress_key(self.job.pk),
                beat_key(self.job.pk),
                kept_key(self.job.pk),
            )
        except redis.RedisError:
            logger.warning("job %s: could not remove its Redis keys", self.job.pk)

    def _meter_end(self, until) -> None:
        """The machine time up to the attempt's end, charged before the lease is let go."""
        meter(self.attempt.pk, until, holder=self.worker)

    def _fail(
        self,
        message: str,
        *,
        platform: bool = False,
        kind: str = FailureKind.CRASH,
        drop_checkpoints: bool = False,
    ) -> None:
        """End as failed, saying what kind of failure it was (whether Resume can help). A
        failure on Kestrel's side (not the data, arguments or weights) gives back every credit
        the job spent. `drop_checkpoints`: the job's stored checkpoints go too (its weights
        were refused)."""
        kind = FailureKind.PLATFORM if platform else kind
        now = self._billed_until(timezone.now())  # its trainer's last work
        try:
            with self._fenced():
                self._meter_end(now)
                self._end_attempt(AttemptEnd.FAILED, message, at=now)
                if drop_checkpoints:
                    self._checkpoints_drop()
                if self._transition(JobState.FAILED, error=message, failure_kind=kind) and platform:
                    refund_platform_failure(self.job, message)
        except LeaseGone:
            return
        self._cleanup()

    def _finish(self) -> None:
        if self.lost_lease:  # the reaper ended the attempt and another owns the job
            logger.warning(
                "job %s: attempt %s ended without its lease", self.job.pk, self.attempt.number
            )
            return
        if self.refused:  # a trainer that writes such files is not resumed
            self._fail(self.refused, kind=FailureKind.WEIGHTS, drop_checkpoints=True)
            return
        if self.redis_gone:  # resumed from its last stored checkpoint, as any lost attempt
            self._lost(self.redis_gone)
            return
        if self.hung is not None:
            self._lost(self._hung_message(), until=self._billed_until(timezone.now()))
            return
        code = self.provider.exit_code(self.handle)
        if self.provider_failure and self.outcome.done is None and not self.outcome.error:
            # Never reached training (no machine, a failed set-up): Kestrel's side, so every
            # credit held or spent is given back.
            self._fail(self.provider_failure, platform=True)
            return
        if self.canceling:
            now = self._billed_until(timezone.now())  # its trainer's last work
            try:
                with self._fenced():
                    self._meter_end(now)
                    self._end_attempt(AttemptEnd.CANCELED, at=now)
                    self._transition(JobState.CANCELED)
            except LeaseGone:
                return
            self._cleanup()
            self._remove_workdir()
            return
        if code == 0 and self.outcome.done is not None:
            self._succeed(stopped=self.outcome.done.stopped)
            return
        if code == 1 and self.outcome.error:
            kind = self.outcome.error_kind or FailureKind.CRASH
            self._fail(_readable_error(self.outcome.error), kind=kind)
            return
        if code == FENCED:
            self._lost("Another attempt owns the job.")
            return
        how = f"killed by signal {-code}" if code and code < 0 else f"exit status {code}"
        self._lost(f"The trainer process ended unexpectedly ({how}).")

    def _hung_message(self) -> str:
        return (
            f"No progress from the trainer for {math.ceil(self.hung.silent)} s while "
            f"{self.hung_phase} (its pace allowed {self.hung.allowance:.0f} s); it was stopped."
        )

    def _lost(self, message: str, *, until=None) -> None:
        """The attempt is lost (its trainer died, hung, or Redis was gone too long): end it at
        `until` (its last sign of work) and resume the job, or fail it after too many. The
        attempt says where the run goes on from, when it does."""
        until = until or self._billed_until(timezone.now())
        try:
            with self._fenced():
                self._meter_end(until)
                job = job_locked(self.job.pk)
                job_lost(job, message)
                if job.state == JobState.QUEUED:
                    epoch = job.checkpoint_epoch
                    where = f"from epoch {epoch}" if epoch else "from the start"
                    message = f"{message.rstrip('.')}; the run restarts {where}."
                self._end_attempt(AttemptEnd.LOST, message, at=until)
        except LeaseGone:
            return
        self._cleanup()

    def _succeed(self, *, stopped: bool) -> None:
        end = self.outcome.train_end
        with tempfile.TemporaryDirectory(prefix="kestrel-weights-") as tmp:
            best = None  # the run's final weights, once they passed inspection
            if end is not None and end.best and not self.refused:
                parts = ("jobs", str(self.job.pk), RUN_NAME, *BEST_WEIGHTS)
                try:
                    best = self._inspected_copy(parts, Path(tmp))
                except OSError as e:
                    logger.warning("job %s: weights/best.pt not taken: %s", self.job.pk, e)
                except WeightsRefused as e:
                    self._weights_refused(
                        f"Training finished, but its final weights were refused and deleted: "
                        f"{e}. No model was made from them, and the run's checkpoints were "
                        "deleted too."
                    )
            if self.refused:
                self._fail(self.refused, kind=FailureKind.WEIGHTS, drop_checkpoints=True)
                return
            now = self._billed_until(timezone.now())  # its trainer's last work
            try:
                with self._fenced():
                    self._meter_end(now)
                    job = job_locked(self.job.pk)
                    model = None
                    if best is not None:
                        try:
                            with open(best, "rb") as f:
                                model = model_from_job(
                                    job=job,
                                    best=f,
                                    names=end.names,
                                    metrics=self.outcome.final_metrics,
                                )
                        except OSError as e:
                            logger.warning("job %s: weights/best.pt not taken: %s", job.pk, e)
                    state = JobState.STOPPED if stopped else JobState.SUCCEEDED
                    error = "" if model else "Stopped before the first epoch."
                    if stopped and job.error:  # why it was stopped (credits, budget) stays
                        error = job.error
                    job_transition(job, state, error=error)
                    # in the same transaction: no reader sees the job ended and its attempt open
                    self._end_attempt(
                        AttemptEnd.STOPPED if stopped else AttemptEnd.FINISHED, at=now
                    )
                    self.job = job
            except LeaseGone:
                return
        self._cleanup()
        if not stopped:
            self._remove_workdir()

    def _remove_workdir(self) -> None:
        shutil.rmtree(self._workdir(), ignore_errors=True)


_MAIN_PREFIX = {"segment": "Mask", "pose": "Pose"}


def _sent_at(entry_id: bytes | str):
    """When an event entered the stream (its id's milliseconds: the trainer's send, or the web's
    receipt of it), not when a busy supervisor got to it; never later than now."""
    now = timezone.now()
    try:
        ms, _ = stream_id(entry_id)
    except ValueError:
        return now
    return min(now, datetime.fromtimestamp(ms / 1000, tz=UTC)) if ms else now


def _results(raw: dict, task: str) -> dict:
    """The final validation as the results tab reads it: a per-class table with the task's
    main figures (mask for segment, pose for pose, box otherwise) and the confusion matrix."""
    prefix = _MAIN_PREFIX.get(task, "Box")
    rows = []
    for row in raw.get("per_class") or []:
        if not isinstance(row, dict) or "Class" not in row:
            continue
        if task == Task.SEMANTIC:
            # Ultralytics' semantic summary: images and pixels of the class, and its IoU.
            rows.append(
                {
                    "class": str(row["Class"]),
                    "images": row.get("Images"),
                    "pixels": row.get("Pixels"),
                    "IoU": row.get("IoU"),
                }
            )
            continue
        rows.append(
            {
                "class": str(row["Class"]),
                "images": row.get("Images"),
                "instances": row.get("Instances"),
                "precision": row.get(f"{prefix}-P", row.get("Box-P")),
                "recall": row.get(f"{prefix}-R", row.get("Box-R")),
                "mAP50": row.get("mAP50"),
                "mAP50-95": row.get("mAP50-95"),
            }
        )
    out: dict = {"per_class": rows, "per_class_raw": raw.get("per_class") or []}
    matrix = raw.get("confusion_matrix")
    if isinstance(matrix, dict) and isinstance(matrix.get("matrix"), list):
        out["confusion_matrix"] = {"names": matrix.get("names", []), "matrix": matrix["matrix"]}
    return out


def _readable_error(message: str) -> str:
    """Ultralytics' exception text, with a hint where the cause is a common one."""
    low = message.lower()
    if "out of memory" in low:
        return f"The GPU ran out of memory; lower the batch or image size. ({message[:300]})"
    if "unpickl" in low or "weights_only" in low or "invalid load key" in low:
        return (
            f"The weights file could not be loaded; it is not a valid YOLO model. ({message[:300]})"
        )
    return message


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
