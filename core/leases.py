"""The lifecycle of a long background job's row: imports, exports, pre-labelling runs, health
checks, inspections of uploaded weights.

The row owns the job's state, not the broker's message (Read the Docs' builds work the same way):

- a worker *takes* the row's lease (under a row lock: a queued row becomes running, with the
  worker's name and a deadline), so a second message for the same row changes nothing;
- while it works, the lease is *renewed* (progress writes push the deadline out, and a thread
  renews it through steps that write nothing for a while);
- what the worker writes at the end, it writes only while the lease is still its own
  (*fenced*), so a worker that was given up on cannot write over the attempt that replaced it;
- beat *reaps* a running row whose deadline passed (its worker died): it goes back to the queue
  and its task is sent again, or, after `LONG_JOB_MAX_ATTEMPTS` attempts, fails with a reason the
  page shows. A queued row whose message was lost is sent again.

The rows share their fields (core.models.LongJobRow). Each app registers its kinds
(`long_job_register`, from its AppConfig.ready) and one beat task reaps them all
(`long_jobs_reap`); a kind with a lease of its own (training's jobs) registers the function that
reaps it.
"""

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import DatabaseError, connection, models, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.module_loading import import_string

logger = logging.getLogger(__name__)

# A queued row not taken within this long had its message lost (or the queue is long: a second
# message is then harmless, the lease makes it a no-op).
RESEND_AFTER = timedelta(minutes=10)


def lease_seconds() -> float:
    return float(settings.LONG_JOB_LEASE_SECONDS)


def max_attempts() -> int:
    return int(settings.LONG_JOB_MAX_ATTEMPTS)


def queued_until() -> datetime:
    """The lease deadline of a row just queued: when to send its message again."""
    return timezone.now() + RESEND_AFTER


def worker_name() -> str:
    """Unique per take: a fence is "this take", not "this process"."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"[-200:]


def _utc(at: datetime) -> str:
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"


@dataclass(frozen=True)
class LongJob:
    """How one kind of long job keeps its lease on its row."""

    label: str  # how people are told about it: "pre-labelling run"
    model: type[models.Model]
    queued: str
    running: str  # may equal `queued` (an inspection stays "pending"): the owner tells them apart
    failed: str
    send: Callable[[models.Model], None]  # puts the row's task on the queue
    state_field: str = ""  # empty: the model's STATE_FIELD (core.models.LongJobRow)
    owner_field: str = "lease_owner"
    until_field: str = "lease_until"
    attempts_field: str = "attempts"
    error_field: str = "error"
    finished_field: str | None = "finished_at"
    started_field: str | None = None
    gave_up_note: str = ""  # appended to the reason, e.g. "Nothing was imported."
    resumable: Callable[[models.Model], bool] | None = None  # False: fail it at once
    gave_up: Callable[[models.Model], None] | None = None  # after commit, once failed

    def __post_init__(self) -> None:
        if not self.state_field:
            object.__setattr__(self, "state_field", getattr(self.model, "STATE_FIELD", "state"))

    @property
    def rows(self) -> models.QuerySet:
        return self.model._default_manager.all()

    def queued_q(self) -> Q:
        return Q(**{self.state_field: self.queued, self.owner_field: ""})

    def running_q(self) -> Q:
        q = Q(**{self.state_field: self.running})
        return q & ~Q(**{self.owner_field: ""}) if self.running == self.queued else q

    def overdue_q(self, now: datetime) -> Q:
        return Q(**{f"{self.until_field}__lt": now}) | Q(**{f"{self.until_field}__isnull": True})


class LeaseLost(Exception):
    """The row is no longer this worker's: reaped and requeued, finished by another, or gone."""


@dataclass
class Lease:
    job: LongJob
    pk: int
    owner: str
    attempt: int

    def _mine(self) -> models.QuerySet:
        job = self.job
        return job.rows.filter(job.running_q(), pk=self.pk, **{job.owner_field: self.owner})

    def _deadline(self) -> dict:
        return {self.job.until_field: timezone.now() + timedelta(seconds=lease_seconds())}

    def renew(self, **fields) -> None:
        """Push the deadline out, writing `fields` (progress) with it, or raise LeaseLost."""
        if not self._mine().update(**self._deadline(), **fields):
            raise LeaseLost(f"{self.job.label} {self.pk}: the lease of {self.owner} is gone")

    def fence(self) -> models.Model:
        """In the caller's transaction: lock the row while it is still this worker's and return
        it, so what the transaction writes commits only under the lease; else LeaseLost."""
        row = self._mine().select_for_update().first()
        if row is None:
            raise LeaseLost(f"{self.job.label} {self.pk}: the lease of {self.owner} is gone")
        return row

    def finish(self, state: str, **fields) -> bool:
        """Write the end and let go of the lease; False when it was no longer this worker's
        (nothing is written then)."""
        job = self.job
        values = {job.state_field: state, job.owner_field: "", job.until_field: None, **fields}
        if job.finished_field:
            values.setdefault(job.finished_field, timezone.now())
        return bool(self._mine().update(**values))

    @contextmanager
    def kept(self) -> Iterator["Lease"]:
        """Renew the lease from a thread of its own while the body runs: a step that writes
        nothing for longer than the lease (one transaction of thousands of rows, a conversion
        in another process) keeps it, and a worker that dies stops renewing with it."""
        stop = threading.Event()

        def beat() -> None:
            try:
                while not stop.wait(lease_seconds() / 3):
                    try:
                        self.renew()
                    except LeaseLost:
                        return  # the body's next fenced write finds out too
                    except DatabaseError:  # SQLite busy with the body's transaction, a blip
                        logger.warning("%s %s: lease not renewed", self.job.label, self.pk)
            finally:
                connection.close()

        thread = threading.Thread(target=beat, name=f"lease-{self.pk}", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join(timeout=30)


def lease_take(job: LongJob, pk: int, **fields) -> Lease | None:
    """Make this worker the row's only runner, writing `fields` with it. None when the row is
    not queued (finished, running under another worker, or gone): a duplicate message, or one
    the reaper re-sent, then changes nothing."""
    owner = worker_name()
    now = timezone.now()
    with transaction.atomic():
        row = job.rows.select_for_update(skip_locked=True).filter(job.queued_q(), pk=pk).first()
        if row is None:
            return None
        attempt = getattr(row, job.attempts_field) + 1
        lease = Lease(job=job, pk=pk, owner=owner, attempt=attempt)
        values = {
            job.state_field: job.running,
            job.owner_field: owner,
            job.attempts_field: attempt,
            **lease._deadline(),
            **fields,
        }
        if job.started_field:
            values.setdefault(job.started_field, now)
        job.rows.filter(pk=pk).update(**values)
    return lease


def leases_reap(job: LongJob) -> int:
    """Requeue (or, after too many attempts, fail) running rows whose lease ran out, and send
    again queued rows nobody took. Returns how many rows it touched. Beat runs this per kind."""
    now = timezone.now()
    touched = 0
    stale = job.rows.filter(job.running_q()).filter(job.overdue_q(now))
    for pk in list(stale.values_list("pk", flat=True)):
        with transaction.atomic():
            row = stale.select_for_update(skip_locked=True).filter(pk=pk).first()
            if row is None:  # renewed, finished or being reaped meanwhile
                continue
            touched += 1
            attempts = getattr(row, job.attempts_field)
            until = getattr(row, job.until_field)
            last = until - timedelta(seconds=lease_seconds()) if until else None
            seen = "no sign of life from its worker" + (f" since {_utc(last)}" if last else "")
            resumable = job.resumable is None or job.resumable(row)
            if attempts < max_attempts() and resumable:
                requeued = {job.state_field: job.queued, job.owner_field: ""}
                job.rows.filter(pk=pk).update(**requeued, **{job.until_field: queued_until()})
                transaction.on_commit(lambda row=row: job.send(row))
                logger.warning("%s %s requeued after attempt %s: %s", job.label, pk, attempts, seen)
                continue
            if resumable:
                reason = f"The {job.label} was interrupted {attempts} times ({seen})"
            else:
                reason = f"The {job.label} was interrupted ({seen}) and cannot be resumed"
            reason = f"{reason}, so it was not started again. {job.gave_up_note}".strip()
            values = {
                job.state_field: job.failed,
                job.owner_field: "",
                job.until_field: None,
                job.error_field: reason,
            }
            if job.finished_field:
                values[job.finished_field] = now
            job.rows.filter(pk=pk).update(**values)
            if job.gave_up is not None:
                transaction.on_commit(lambda row=row: job.gave_up(row))
            logger.warning("%s %s failed: %s", job.label, pk, reason)
    forgotten = job.rows.filter(job.queued_q()).filter(job.overdue_q(now))
    for row in list(forgotten):
        claimed = forgotten.filter(pk=row.pk).update(**{job.until_field: queued_until()})
        if claimed:  # one reaper of several sends it
            job.send(row)
            touched += 1
    return touched


# The kinds beat reaps, by dotted path: a LongJob, or a function of no arguments that reaps a
# kind its own way and returns how many rows it touched. Paths, so that registering (at start-up,
# in every process) imports no job's module: only the reaper does.
_KINDS: list[str] = []


def long_job_register(path: str) -> None:
    """Have beat reap the kind at `path` (called from the owning app's AppConfig.ready)."""
    if path not in _KINDS:
        _KINDS.append(path)


def long_job_kinds() -> list[str]:
    return list(_KINDS)


def long_jobs_reap() -> dict[str, int]:
    """Reap every registered kind (what beat runs every minute): rows touched, per kind. A kind
    that fails is logged and the others are still reaped."""
    touched: dict[str, int] = {}
    for path in _KINDS:
        try:
            kind = import_string(path)
            touched[path] = leases_reap(kind) if isinstance(kind, LongJob) else kind()
        except Exception:
            logger.exception("reaping %s failed", path)
    return touched
