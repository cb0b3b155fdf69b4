"""The trainer's link to Kestrel: its events, each carrying (job, attempt, seq), appended to the
job's Redis stream (`Events`), or for a trainer on a machine that cannot reach Redis sent over
HTTPS to Kestrel's /trainer/ endpoint (`HttpEvents`); either way kept in a spool on disk
(training.process.spool) until the supervisor says it stored them. The same link reads the stop
request and the attempt that owns the job. Plain Python: it runs where there is no Django."""

import json
import sys
import threading
import time
from pathlib import Path

from training.event_schema import MAX_BODY_BYTES, MAX_EVENTS, EventRefused, event_dumps
from training.process.spool import Spool

FENCED = 75  # the trainer's exit status once another attempt owns the job
# Events that only say how far the run is: the next one says it again, so none is kept on disk
# or sent twice.
PROGRESS_ONLY = frozenset(("batch", "val_batch"))
STREAM_MAXLEN = 50_000
# While Redis is away: events wait on disk, up to this much, and are sent again this often.
SPOOL_MAX_BYTES = 256 << 20
SPOOL_RETRY_SECONDS = 0.25
SPOOL_SEND_BATCH = 200
KEPT_CHECK_SECONDS = 0.5  # how often the trainer reads what the supervisor confirmed stored
SPOOL_DRAIN_SECONDS = 60.0  # at the end, how long to wait for Redis (the spec sets the lease)


class Events:
    """Appends events to the job's stream in Redis; thread-safe; never raises into training.
    Each event is kept in a spool on disk until the supervisor says it stored it (its `kept`
    key): while Redis is away, events wait there and are sent in order once it answers again,
    and what a Redis restarted empty lost is sent again (the supervisor tells a resent event by
    its sequence number)."""

    def __init__(self, spec: dict):
        import redis

        self.spec = spec
        self.redis = redis.Redis.from_url(
            spec["redis_url"], socket_timeout=5, socket_connect_timeout=2
        )
        self.stream = spec["stream"]
        self.kept_key = spec.get("kept_key") or f"{spec['stream']}:kept"
        self.job = str(spec["job_id"])
        self.attempt = str(spec["attempt"])
        self._seq = 0
        self._lock = threading.Lock()
        self.spool = Spool(
            Path(spec["checkpoint_dir"]).parent / "events.spool",
            int(spec.get("spool_max_bytes", SPOOL_MAX_BYTES)),
        )
        self.drain_seconds = float(spec.get("spool_drain_seconds", SPOOL_DRAIN_SECONDS))
        self._away_since: float | None = None
        self._stream_made = False  # whether an event of this process made the stream
        self._stop = threading.Event()
        threading.Thread(target=self._drain_loop, daemon=True).start()

    def _next(self) -> str:
        self._seq += 1
        return str(self._seq)

    def _away(self, error: Exception) -> None:
        """Redis failed a call (under the lock): what it was not confirmed to keep is sent
        again once it answers."""
        if self._away_since is None:
            self._away_since = time.monotonic()
            sys.__stderr__.write(f"kestrel: Redis is away ({error}); keeping events on disk\n")
        self.spool.rewind()

    def emit(self, kind: str, data: dict) -> None:
        raw = _checked(kind, data)
        if raw is None:
            return
        with self._lock:
            seq = self._next()
            fields = {"j": self.job, "a": self.attempt, "s": seq, "t": kind, "d": raw}
            if self.spool or self._away_since is not None:
                if kind in PROGRESS_ONLY and not data.get("first"):
                    return  # progress only: the next batch says it again
                self.spool.append(kind, fields, int(seq))
                return
            try:
                # Once the stream is made, never made again: a stream that is gone means a
                # Redis that came back empty (restarted with no disk) between two events. Its
                # client reconnects without a word, so only this says that what was sent and not
                # yet stored went with it: added now, this event would be stored before them,
                # and they would be dropped as late (and forgotten here once it is kept).
                added = self.redis.xadd(
                    self.stream,
                    fields,
                    maxlen=STREAM_MAXLEN,
                    approximate=True,
                    nomkstream=self._stream_made,
                )
            except Exception as e:  # noqa: BLE001 - training goes on; the spool keeps it
                self.spool.append(kind, fields, int(seq))
                self._away(e)
                return
            if added is None:  # sent again in order, from the last one stored, by the drain
                self.spool.append(kind, fields, int(seq))
                self._away(ConnectionError("it came back empty"))
                return
            self._stream_made = True
            if kind not in PROGRESS_ONLY:  # progress is never sent again
                self.spool.append(kind, fields, int(seq), sent=True)

    def _drain_loop(self) -> None:
        confirmed = 0.0
        while not self._stop.wait(SPOOL_RETRY_SECONDS):
            if self._drain() and time.monotonic() - confirmed >= KEPT_CHECK_SECONDS:
                confirmed = time.monotonic()
                self._confirmations()

    def _confirmations(self) -> None:
        """Forget what the supervisor says it stored; send again what was sent but not stored
        when the stream is gone (a Redis that came back empty after this trainer's last event,
        its client reconnected without a word)."""
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.get(self.kept_key)
            pipe.exists(self.stream)
            kept, stream = pipe.execute()
        except Exception as e:  # noqa: BLE001 - away: the next drain finds out
            with self._lock:
                self._away(e)
            return
        if not stream and self._stream_made:
            with self._lock:
                if self.spool.sent > self.spool.kept:
                    self._away(ConnectionError("it came back empty"))
            return
        if kept:
            with self._lock:
                self.spool.kept_to(int(kept))

    def _drain(self) -> bool:
        """Send what the spool holds, oldest first; True once it is all sent."""
        if not self.spool and self._away_since is None:
            return True
        try:
            self.redis.ping()  # without the lock: emit never waits on a Redis that is away
        except Exception:  # noqa: BLE001 - still away
            return False
        with self._lock:
            while self.spool:
                entries = self.spool.read(SPOOL_SEND_BATCH)
                try:
                    pipe = self.redis.pipeline(transaction=False)
                    for fields, _ in entries:
                        pipe.xadd(self.stream, fields, maxlen=STREAM_MAXLEN, approximate=True)
                    pipe.execute()
                except Exception as e:  # noqa: BLE001 - away again: sent again later
                    self._away(e)
                    return False
                self.spool.sent_to(entries[-1][1])
                self._stream_made = True
            if self._away_since is not None:
                away = time.monotonic() - self._away_since
                self._away_since = None
                sys.__stderr__.write(f"kestrel: Redis is back after {away:.1f} s; events sent\n")
                self._skipped_note(away)
        return True

    def _skipped_note(self, away: float) -> None:
        if not self.spool.skipped:
            return
        note = (
            f"Kestrel: {self.spool.skipped} console or system messages were not kept "
            f"while Redis was away ({away:.0f} s)."
        )
        self.spool.skipped = 0
        seq = self._next()
        raw = _checked("log", {"lines": [note]})
        fields = {"j": self.job, "a": self.attempt, "s": seq, "t": "log", "d": raw}
        self.spool.append("log", fields, int(seq))  # sent by the next drain

    def silent_for(self) -> float:
        """How long Kestrel has not answered (a local trainer's supervisor sees it directly)."""
        return 0.0

    def control(self) -> tuple[str | None, str | None]:
        """(attempt that owns the job, "stop" or None); (None, None) when it cannot be read."""
        if self.spool or self._away_since is not None:  # Redis away: keep training
            return None, None
        try:
            fence, control = self.redis.mget(self.spec["fence_key"], self.spec["control_key"])
        except Exception as e:  # noqa: BLE001 - Redis away: keep training, look again later
            with self._lock:
                self._away(e)
            return None, None
        return (fence.decode() if fence else None), (control.decode() if control else None)

    def close(self) -> None:
        """Everything emitted is sent and confirmed stored when this returns, unless Redis
        stayed away for longer than the run's lease (the supervisor has given the attempt up
        by then)."""
        deadline = time.monotonic() + self.drain_seconds
        while time.monotonic() < deadline:
            if self._drain():
                self._confirmations()
                with self._lock:
                    if self.spool.kept == self.spool.size:
                        break
            time.sleep(SPOOL_RETRY_SECONDS)
        self._stop.set()
        if self.spool.kept != self.spool.size:
            sys.__stderr__.write("kestrel: Redis stayed away; the last events were not sent\n")


class HttpEvents(Events):
    """For a trainer on a machine that cannot reach Redis (a cloud provider's): events go in
    batches to Kestrel's /trainer/ endpoint with the job's token, which appends them to the same
    stream; each answer carries the stop request, the attempt that owns the job, and up to which
    sequence number the supervisor has stored the events (`kept`). Each event stays in the spool
    on disk until it is kept: a lost answer, or a Redis that lost what it was given, costs a
    resend (Kestrel ignores what it already has), never an event."""

    FLUSH_SECONDS = 0.5
    POLL_SECONDS = 2.0  # with nothing new to send, how often to ask what is kept
    KEPT_STALL_SECONDS = 30.0  # sent but not kept for this long: sent again
    URGENT = ("checkpoint", "train_end", "final", "done", "error")

    def __init__(self, spec: dict):
        self.spec = spec
        self.url = spec["events_url"]
        self.token = spec["events_token"]
        self.attempt = str(spec["attempt"])
        self._seq = int(spec.get("seq_from") or 0)
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self.spool = Spool(  # what Kestrel has not stored yet, on this machine's disk
            Path(spec["checkpoint_dir"]).parent / "events.spool",
            int(spec.get("spool_max_bytes", SPOOL_MAX_BYTES)),
        )
        self.kept_stall = float(spec.get("kept_stall_seconds", self.KEPT_STALL_SECONDS))
        self._failing = False
        self._fence: str | None = None
        self._control: str | None = None
        self._kept_at = time.monotonic()  # when `kept` last moved (or nothing was waiting)
        self._polled = 0.0
        self._answered = time.monotonic()  # when Kestrel last answered
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def emit(self, kind: str, data: dict) -> None:
        raw = _checked(kind, data)
        if raw is None:
            return
        with self._lock:
            seq = int(self._next())
            if self._failing and kind in PROGRESS_ONLY and not data.get("first"):
                return  # Kestrel unreachable: progress only, the next batch says it again
            self.spool.append(kind, {"s": seq, "t": kind, "d": json.loads(raw)}, seq)
        if kind in self.URGENT:
            self._flush(tries=5)

    def _loop(self) -> None:
        while not self._stop.wait(self.FLUSH_SECONDS):
            self._flush(tries=1)

    def _flush(self, *, tries: int) -> None:
        with self._send_lock:
            while True:
                with self._lock:
                    self._stalled_rewind()
                    batch, offset = _first_batch(self.spool.read(MAX_EVENTS) if self.spool else [])
                    waiting = self.spool.kept < self.spool.size
                if not batch:
                    if waiting and time.monotonic() - self._polled >= self.POLL_SECONDS:
                        self._send([], tries=1)  # only to hear what is kept
                    return
                if not self._send(batch, tries=tries, offset=offset):
                    return

    def _stalled_rewind(self) -> None:
        """Under the lock: what went out long ago and is still not kept is sent again (the
        Redis it went to may have restarted empty)."""
        now = time.monotonic()
        if self.spool.kept == self.spool.size or self.spool.sent == self.spool.kept:
            self._kept_at = now
        elif now - self._kept_at > self.kept_stall:
            self.spool.rewind()
            self._kept_at = now

    def _send(self, batch: list[dict], *, tries: int, offset: int = 0) -> bool:
        """POST one batch (or none, to hear what is kept); True once Kestrel took it or refused
        it as malformed (resending it would be refused again)."""
        import urllib.request

        self._polled = time.monotonic()
        for attempt in range(tries):
            request = urllib.request.Request(  # noqa: S310 - Kestrel's own URL from the spec
                self.url,
                data=json.dumps({"events": batch}).encode(),
                headers={
                    "Authorization": f"Bearer {self.token}",
                    "Content-Type": "application/json",
                },
                method="POST",
            )
            try:
                with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
                    answer = json.loads(response.read() or b"{}")
            except Exception as e:  # noqa: BLE001 - retried; training goes on meanwhile
                code = getattr(e, "code", None)
                if code in (409, 410):  # another attempt, or the job or attempt ended
                    self._fence = "other"
                    return False
                if code == 400:
                    sys.__stderr__.write(f"kestrel: {len(batch)} events refused: {_detail(e)}\n")
                    with self._lock:
                        self.spool.advance(offset)  # dropped: never kept, never resent
                    return True
                sys.__stderr__.write(f"kestrel: events not sent ({e}); retrying\n")
                self._failing = True
                time.sleep(min(2**attempt, 5))
                continue
            self._failing = False
            self._answered = time.monotonic()
            self._fence = str(answer.get("attempt") or self.attempt)
            self._control = answer.get("control")
            with self._lock:
                if batch:
                    self.spool.sent_to(offset)
                kept = answer.get("kept")
                if isinstance(kept, int) and kept > 0:
                    before = self.spool.kept
                    self.spool.kept_to(kept)
                    if self.spool.kept != before:
                        self._kept_at = time.monotonic()
            return True
        return False

    def control(self) -> tuple[str | None, str | None]:
        return self._fence, self._control

    def silent_for(self) -> float:
        return time.monotonic() - self._answered if self._failing else 0.0

    def close(self) -> None:
        """Everything emitted is delivered and stored when this returns, unless Kestrel stayed
        away for longer than the run's lease."""
        self._stop.set()
        deadline = time.monotonic() + float(
            self.spec.get("spool_drain_seconds", SPOOL_DRAIN_SECONDS)
        )
        self.POLL_SECONDS = SPOOL_RETRY_SECONDS  # the last word: hear "kept" soon
        while True:
            self._flush(tries=1)
            with self._lock:
                done = self.spool.kept == self.spool.size
                if done or self._fence == "other" or time.monotonic() > deadline:
                    if not done and self._fence != "other":
                        sys.__stderr__.write("kestrel: Kestrel stayed away; events not stored\n")
                    return
            time.sleep(SPOOL_RETRY_SECONDS)


def _checked(kind: str, data: dict) -> str | None:
    """The event as JSON if Kestrel will take it (the same schema it checks on arrival)."""
    try:
        return event_dumps(kind, data)
    except EventRefused as e:
        sys.__stderr__.write(f"kestrel: event {kind} not sent, outside the schema: {e}\n")
        return None


def _first_batch(pending: list[tuple[dict, int]]) -> tuple[list[dict], int]:
    """The oldest pending events that fit in one request, and the spool's offset after them."""
    batch, size, offset = [], 100, 0
    for event, after in pending[:MAX_EVENTS]:
        size += len(json.dumps(event)) + 2
        if batch and size > MAX_BODY_BYTES:
            break
        batch.append(event)
        offset = after
    return batch, offset


def _detail(error) -> str:
    try:
        return json.loads(error.read()).get("detail", "")
    except Exception:  # noqa: BLE001 - only for the log line
        return str(error)


def events_for(spec: dict) -> Events:
    return HttpEvents(spec) if spec.get("events_url") else Events(spec)
