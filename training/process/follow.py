"""Following an attempt's trainer (training.process.supervisor): its Redis stream read, each
event checked against the events' schema and stored (training.process.handlers) before the
cursor moves past it, resent and out-of-order events told apart by sequence number, a Redis or
database fault waited out, and a trainer that stopped making progress (training.process.watchdog)
taken for hung."""

import logging
import time
from datetime import UTC, datetime

import redis
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.db.models import F
from django.utils import timezone

from core.storage import storage_delete, storage_exists, storage_get_file
from training.event_schema import EventRefused, event_parse
from training.models import TrainingJob
from training.process.lease import Fault, LeaseGone, db_connection_reset
from training.process.watchdog import PHASE_WORDS, PROGRESS
from training.run_files import BEST_WEIGHTS, CHECKPOINTS, RESULTS_CSV, RUN_NAME
from training.services.jobs import lease_seconds
from training.streams import control_key, fence_key, kept_key, stream_id, stream_key

logger = logging.getLogger(__name__)

SEEN_SEQS = 2000  # sequence numbers remembered to tell a resent event from an out-of-order one
# Events whose handlers write nothing to the database or storage (a batch writes its progress
# to Redis; its first one, first_batch_at, goes through _save_job, fenced by the lease).
UNWRITTEN = frozenset(("started", "batch", "val_batch", "done", "error"))


class Follow:
    """The Supervisor's reading of its trainer's events."""

    def _follow(self) -> None:
        """Until the trainer ends: beat, pass on cancel, read and store its events. A fault of
        Redis or of the database is waited out (reconnecting with back-off, reading again from
        the last event stored); only a Redis outage longer than the lease ends the attempt."""
        if self.handle is None:
            return
        beat_every = settings.TRAINING_HEARTBEAT_SECONDS
        last_beat = 0.0
        fault = Fault()
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
        if stall is None or self._progress_unread():
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

    def _newest_checkpoint(self, entries) -> bytes | str | None:
        """The id of this attempt's last checkpoint event among `entries`: the ones before it
        are superseded (a trainer faster than the inspections, or a backlog after a fault),
        and only its files, with the best among the skipped, are inspected and stored."""
        attempt = str(self.attempt.number).encode()
        newest = None
        for entry_id, fields in entries:
            if fields.get(b"t") == b"checkpoint" and fields.get(b"a") == attempt:
                newest = entry_id
        return newest

    def _progress_unread(self) -> bool:
        """Whether the trainer sent progress that this supervisor has not read yet: it was busy
        with what it read before (a checkpoint's inspection takes seconds, many more on a loaded
        machine), and a trainer that went on meanwhile is not hung. Logs and system samples do
        not count: their threads go on in a trainer whose training loop is stuck."""
        last = self.last_id.decode() if isinstance(self.last_id, bytes) else self.last_id
        entries = self.redis.xrange(stream_key(self.job.pk), min=f"({last}", count=500)
        return any(
            fields.get(b"t", b"").decode("utf-8", "replace") in PROGRESS for _, fields in entries
        )

    def _read(self) -> bool:
        """One read of the stream, each entry stored before the cursor moves past it. True once
        the trainer has exited and everything it wrote is stored."""
        key = stream_key(self.job.pk)
        self._cancel_seen()  # at once, not at the next heartbeat
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
        try:
            for _, entries in replies or []:
                self.newest_checkpoint = self._newest_checkpoint(entries)
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
        finally:
            self.newest_checkpoint = None  # an event handled alone supersedes nothing
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
                if self.newest_checkpoint not in (None, entry_id):  # a later one came with it
                    self._checkpoint_superseded(event)
                else:  # it stores and writes under the fence itself
                    self._on_checkpoint(event, seq)
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


def _sent_at(entry_id: bytes | str):
    """When an event entered the stream (its id's milliseconds: the trainer's send, or the web's
    receipt of it), not when a busy supervisor got to it; never later than now."""
    now = timezone.now()
    try:
        ms, _ = stream_id(entry_id)
    except ValueError:
        return now
    return min(now, datetime.fromtimestamp(ms / 1000, tz=UTC)) if ms else now
