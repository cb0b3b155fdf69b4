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
  page shows. A queued row whose message was lost is sent again;
- a fault of the database connection (a restart, a failover, `pg_terminate_backend`) is ridden
  out where it happens (`lease_work`): the worker connects again and runs the job's body again,
  under the same lease, from what it committed. A body that still fails at the database (away
  longer than `LONG_JOB_DB_RETRY_SECONDS`, or a kind that runs its body without `lease_work`)
  puts its row back in the queue at once as it leaves `Lease.kept` (`lease_requeue`), rather
  than leaving it to the reaper once its lease ran out.

The rows share their fields (core.models.LongJobRow). Each app registers its kinds
(`long_job_register`, from its AppConfig.ready) and one beat task reaps them all
(`long_jobs_reap`); a kind with a lease of its own (training's jobs) registers the function that
reaps it.
"""

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from django.conf import settings
from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    connection,
    models,
    transaction,
)
from django.db.models import Q
from django.utils import timezone
from django.utils.module_loading import import_string

logger = logging.getLogger(__name__)
T = TypeVar("T")

# A queued row not taken within this long had its message lost (or the queue is long: a second
# message is then harmless, the lease makes it a no-op).
RESEND_AFTER = timedelta(minutes=10)


def lease_seconds() -> float:
    return float(settings.LONG_JOB_LEASE_SECONDS)


def max_attempts() -> int:
    return int(settings.LONG_JOB_MAX_ATTEMPTS)


def db_retry_seconds() -> float:
    return float(settings.LONG_JOB_DB_RETRY_SECONDS)


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
        in another process) keeps it, and a worker that dies stops renewing with it. A body
        that fails at the database puts the row back in the queue at once (lease_requeue; the
        error goes on up), rather than leaving it running until its lease runs out."""
        stop = threading.Event()
        faults = database_faults()
        failed: BaseException | None = None

        def beat() -> None:
            # Renewed every third of the lease; after a renewal that failed, again a second
            # later, then with back-off (not a third of the lease later): two failures in a row
            # must not use up the lease. Nothing but LeaseLost ends this thread: one that died
            # on an error the database driver raised would let the lease run out under a
            # worker still at work, leaving the row to the reaper.
            wait, retry = lease_seconds() / 3, 1.0
            try:
                while not stop.wait(wait):
                    try:
                        self.renew()
                        wait, retry = lease_seconds() / 3, 1.0
                    except LeaseLost:
                        return  # the body's next fenced write finds out too
                    except Exception as e:  # noqa: BLE001 - SQLite busy, a connection ended
                        logger.warning(
                            "%s %s: lease not renewed (%s)", self.job.label, self.pk, _first_line(e)
                        )
                        # A connection the database ended stays dead: the next try opens one.
                        db_connection_reset()
                        wait, retry = retry, min(retry * 2, lease_seconds() / 3)
            finally:
                db_connection_reset()

        thread = threading.Thread(target=beat, name=f"lease-{self.pk}", daemon=True)
        thread.start()
        try:
            yield self
        except faults as e:
            failed = e
            raise
        finally:
            stop.set()
            thread.join(timeout=30)
            if failed is not None:
                lease_requeue(self, why=f"its database connection failed: {_first_line(failed)}")


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


def _interrupted(job: LongJob, row: models.Model, *, why: str) -> None:
    """In the caller's transaction, on the locked `row` of an attempt that ended unfinished
    (`why`: what happened to it): back to the queue, its task sent again once this commits; or,
    after `LONG_JOB_MAX_ATTEMPTS` attempts or when it cannot be resumed, failed with the reason."""
    pk = row.pk
    attempts = getattr(row, job.attempts_field)
    resumable = job.resumable is None or job.resumable(row)
    if attempts < max_attempts() and resumable:
        requeued = {job.state_field: job.queued, job.owner_field: ""}
        job.rows.filter(pk=pk).update(**requeued, **{job.until_field: queued_until()})
        transaction.on_commit(lambda: job.send(row), robust=True)
        logger.warning("%s %s requeued after attempt %s: %s", job.label, pk, attempts, why)
        return
    if resumable:
        reason = f"The {job.label} was interrupted {attempts} times ({why})"
    else:
        reason = f"The {job.label} was interrupted ({why}) and cannot be resumed"
    reason = f"{reason}, so it was not started again. {job.gave_up_note}".strip()
    values = {
        job.state_field: job.failed,
        job.owner_field: "",
        job.until_field: None,
        job.error_field: reason,
    }
    if job.finished_field:
        values[job.finished_field] = timezone.now()
    job.rows.filter(pk=pk).update(**values)
    if job.gave_up is not None:
        transaction.on_commit(lambda: job.gave_up(row))
    logger.warning("%s %s failed: %s", job.label, pk, reason)


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
            until = getattr(row, job.until_field)
            last = until - timedelta(seconds=lease_seconds()) if until else None
            seen = "no sign of life from its worker" + (f" since {_utc(last)}" if last else "")
            _interrupted(job, row, why=seen)
    forgotten = job.rows.filter(job.queued_q()).filter(job.overdue_q(now))
    for row in list(forgotten):
        claimed = forgotten.filter(pk=row.pk).update(**{job.until_field: queued_until()})
        if claimed:  # one reaper of several sends it
            job.send(row)
            touched += 1
    return touched


# --- faults of the database connection --------------------------------------------------------


def database_faults() -> tuple[type[Exception], ...]:
    """What a lost or failing connection raises: Django's errors, and the driver's own, which
    code that talks to the driver directly (an import's COPY) gets."""
    driver = connection.Database
    return (OperationalError, InterfaceError, driver.OperationalError, driver.InterfaceError)


def db_connection_reset() -> None:
    """Drop this thread's connection after a fault, so that the next query opens a new one (a
    connection the database ended stays dead: neither Django nor the driver opens it again).
    Inside a transaction it does nothing: that transaction is lost with its connection, and
    Django drops the connection once the outermost block ends."""
    if connection.in_atomic_block:
        return
    try:
        connection.close()
    except (DatabaseError, *database_faults()):
        logger.warning("a broken database connection could not be closed", exc_info=True)


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def lease_work(lease: Lease, body: Callable[[], object]) -> bool:
    """Run a long job's `body` while `lease` is kept (Lease.kept), riding out faults of the
    database connection (a restart, a failover, pg_terminate_backend): the worker connects
    again, with back-off, and runs the body again from its start under the same lease, while
    the database has been away for less than `LONG_JOB_DB_RETRY_SECONDS`. So a body must be
    safe to run again: what it commits, it commits under the lease, and a second run starts
    from what was committed (an import commits its rows with its end: each image once).

    True once the body ran to its end. False when the database stayed away: the row is then
    back in the queue (Lease.kept), not left running until its lease runs out. LeaseLost (the
    row is another attempt's, or finished meanwhile) goes up to the caller."""
    faults = database_faults()
    try:
        with lease.kept():
            _run_again_after_faults(lease, body, faults)
        return True
    except faults:
        return False


def lease_row(lease: Lease, read: Callable[[], T]) -> T | None:
    """What a long job reads right after lease_take (its row, with what its run needs), riding
    out a fault of the database connection as lease_work rides out the body's. Read outside it,
    a connection ended between the two (a restart, pg_terminate_backend) failed the task and
    left the row running, its worker gone, until its lease ran out and the reaper sent it again
    (CI, 2026-12-07). None when the database stayed away (the row is back in the queue) or the
    row is another attempt's now."""
    found: list[T] = []
    try:
        if lease_work(lease, lambda: found.append(read())):
            return found[-1]
    except LeaseLost:
        logger.warning("%s %s: attempt %s lost its lease", lease.job.label, lease.pk, lease.attempt)
    return None


def _run_again_after_faults(lease: Lease, body: Callable[[], object], faults: tuple) -> None:
    job = lease.job
    since: float | None = None  # when the database went away (this outage)
    delay = 0.1
    met = 0
    while True:
        started = time.monotonic()
        try:
            if since is not None:  # a new connection, and the lease still this worker's
                db_connection_reset()
                lease.renew()
            body()
        except faults as e:
            if connection.in_atomic_block:
                raise  # the caller's transaction is lost with the connection: it starts over
            now = time.monotonic()
            if since is None or now - started > db_retry_seconds():  # a new outage
                since, delay = now, 0.1
            met += 1
            logger.warning(
                "%s %s: its database connection failed (%s); connecting again to go on",
                job.label,
                lease.pk,
                _first_line(e),
            )
            if now - since >= db_retry_seconds():
                raise
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
            continue
        if met:
            logger.warning(
                "%s %s: ran to its end (database faults ridden out: %s)",
                job.label,
                lease.pk,
                met,
            )
        return


def lease_requeue(lease: Lease, *, why: str) -> bool:
    """An attempt that ended unfinished, its worker alive (it failed at the database): the row
    goes back to the queue now, its task sent again (or fails, as the reaper would fail it), not
    when its lease runs out. Written on a new connection, tried again with back-off while the
    lease would have lasted. False when the row is no longer this worker's, or the database did
    not answer meanwhile (the reaper then requeues it once the lease ran out)."""
    job = lease.job
    if connection.in_atomic_block:  # a transaction of the caller's, lost with its connection
        return False
    faults = database_faults()
    until = time.monotonic() + lease_seconds()
    delay = 0.1
    while True:
        db_connection_reset()
        try:
            with transaction.atomic():
                row = lease._mine().select_for_update().first()
                if row is None:
                    return False
                _interrupted(job, row, why=why)
            return True
        except faults as e:
            if time.monotonic() + delay > until:
                logger.warning(
                    "%s %s: not put back in the queue, the database did not answer (%s); "
                    "it will be once its lease runs out",
                    job.label,
                    lease.pk,
                    _first_line(e),
                )
                return False
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


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
