"""The trainer process: `python -m training.runner SPEC.json`, or on a machine that reaches
Kestrel only over HTTPS, `python -m training.runner --remote <job-url>` (training.remote_trainer).

Runs Ultralytics with callbacks that append the job's events to its Redis stream: batch progress
(a few per second), epoch metrics, checkpoints, log lines and system samples, each carrying
(job, attempt, seq). It reads no database and loads weights only here, never in the web or the
worker. Events never block training: a lost Redis connection is logged and training goes on.

Exit status: 0 finished or stopped, 1 failed (an `error` event says why), 75 another attempt
owns the job now.
"""

import json
import os
import shutil
import sys
import threading
import time
import traceback
from collections import deque
from pathlib import Path

from training.event_schema import (
    MAX_BODY_BYTES,
    MAX_CLASSES,
    MAX_EVENTS,
    MAX_LOG_LINES,
    MAX_MATRIX_CLASSES,
    PLOT_NAME_RE,
    EventRefused,
    event_dumps,
)
from training.weights_check import UnsafeWeights, checkpoint_loading_restrict, weights_check

FENCED = 75
BATCH_EVENTS_PER_SECOND = 4
CONTROL_CHECK_SECONDS = 0.5
# Events that only say how far the run is: the next one says it again, so none is kept on disk
# or sent twice.
PROGRESS_ONLY = frozenset(("batch", "val_batch"))
LOG_FLUSH_SECONDS = 0.5
STREAM_MAXLEN = 50_000
# While Redis is away: events wait on disk, up to this much, and are sent again this often.
SPOOL_MAX_BYTES = 256 << 20
SPOOL_RETRY_SECONDS = 0.25
SPOOL_SEND_BATCH = 200
KEPT_CHECK_SECONDS = 0.5  # how often the trainer reads what the supervisor confirmed stored
SPOOL_DRAIN_SECONDS = 60.0  # at the end, how long to wait for Redis (the spec sets the lease)
KEPT_ALWAYS = {"started", "train_start", "epoch", "checkpoint", "final", "train_end"}
KEPT_ALWAYS |= {"done", "error"}  # never dropped from a full spool


def _die_with_parent() -> None:
    """The trainer ends when its supervising task dies: a resumed attempt never finds the old
    one still running. Linux only; elsewhere the attempt fence does it (more slowly)."""
    parent = int(os.environ.get("KESTREL_SUPERVISOR_PID", "0") or 0)
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if parent and os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(FENCED)


def _number(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


class Spool:
    """The trainer's events on its own disk, in order (one JSON line each), until Kestrel has
    them: `sent` marks what went out, `kept` what Kestrel confirmed it stored. A Redis that is
    away costs memory nothing, and one that comes back empty gets again what it lost (what went
    out but was not confirmed). Bounded: once full, only the events a run cannot do without are
    kept (epochs, checkpoints, results, the last word); console lines and system samples past
    the bound are counted and said to be missing."""

    COMPACT_BYTES = 1 << 20

    def __init__(self, path: Path, max_bytes: int):
        self.path, self.max_bytes = path, max_bytes
        self._file = None
        self.kept = self.sent = self.size = 0
        self._marks: deque[tuple[int, int]] = deque()  # (seq, offset after it), unconfirmed
        self.skipped = 0

    def __bool__(self) -> bool:
        """Whether something is still to be sent."""
        return self.size > self.sent

    def append(self, kind: str, fields: dict, seq: int, *, sent: bool = False) -> None:
        line = (json.dumps(fields) + "\n").encode()
        if self.size - self.kept + len(line) > self.max_bytes and kind not in KEPT_ALWAYS:
            self.skipped += 1
            return
        if self._file is None:
            self._file = open(self.path, "w+b")  # noqa: SIM115 - held while the process lives
        self._file.seek(self.size)
        self._file.write(line)
        self._file.flush()
        self.size += len(line)
        self._marks.append((seq, self.size))
        if sent and self.sent == self.size - len(line):
            self.sent = self.size

    def read(self, count: int) -> list[tuple[dict, int]]:
        """Up to `count` entries not sent yet, oldest first, each with the offset after it."""
        self._file.seek(self.sent)
        entries, offset = [], self.sent
        while len(entries) < count and offset < self.size:
            line = self._file.readline()
            offset += len(line)
            entries.append((json.loads(line), offset))
        return entries

    def sent_to(self, offset: int) -> None:
        self.sent = max(self.sent, offset)

    def advance(self, offset: int) -> None:
        """Sent and confirmed up to `offset` (a request's answer says so)."""
        self.sent_to(offset)
        while self._marks and self._marks[0][1] <= offset:
            self.kept = self._marks.popleft()[1]
        self._compact()

    def kept_to(self, seq: int) -> None:
        """Kestrel confirmed it stored every event up to sequence number `seq`."""
        while self._marks and self._marks[0][0] <= seq and self._marks[0][1] <= self.sent:
            self.kept = self._marks.popleft()[1]
        self._compact()

    def rewind(self) -> None:
        """Send again all that was not confirmed (the Redis it went to may have lost it)."""
        self.sent = self.kept

    def _compact(self) -> None:
        if self.kept == self.size:  # all confirmed: start the file again
            if self._file is not None and self.size:
                self._file.truncate(0)
            self.kept = self.sent = self.size = 0
        elif self.kept >= self.COMPACT_BYTES:  # keep only the unconfirmed tail
            self._file.seek(self.kept)
            tail = self._file.read(self.size - self.kept)
            self._file.seek(0)
            self._file.write(tail)
            self._file.truncate(len(tail))
            self._file.flush()
            shift = self.kept
            self._marks = deque((seq, end - shift) for seq, end in self._marks)
            self.kept, self.sent, self.size = 0, self.sent - shift, self.size - shift


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
                self.redis.xadd(self.stream, fields, maxlen=STREAM_MAXLEN, approximate=True)
            except Exception as e:  # noqa: BLE001 - training goes on; the spool keeps it
                self.spool.append(kind, fields, int(seq))
                self._away(e)
                return
            if kind not in PROGRESS_ONLY:  # progress is never sent again
                self.spool.append(kind, fields, int(seq), sent=True)

    def _drain_loop(self) -> None:
        confirmed = 0.0
        while not self._stop.wait(SPOOL_RETRY_SECONDS):
            if self._drain() and time.monotonic() - confirmed >= KEPT_CHECK_SECONDS:
                confirmed = time.monotonic()
                self._confirmations()

    def _confirmations(self) -> None:
        """Forget what the supervisor says it stored."""
        try:
            kept = self.redis.get(self.kept_key)
        except Exception as e:  # noqa: BLE001 - away: the next drain finds out
            with self._lock:
                self._away(e)
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


class LogTee:
    """Passes output through and sends complete lines as `log` events, a batch at a time.
    A carriage return (a progress bar redrawing) keeps only the line's last state."""

    def __init__(self, events: Events, original):
        self.events, self.original = events, original
        self._line = ""
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()

    def write(self, text: str) -> int:
        self.original.write(text)
        with self._lock:
            for part in text.splitlines(keepends=True):
                if part.endswith("\n"):
                    self._lines.append((self._line + part.rstrip("\r\n")).rsplit("\r", 1)[-1])
                    self._line = ""
                else:
                    self._line = (self._line + part).rsplit("\r", 1)[-1]
            due = time.monotonic() - self._last_flush > LOG_FLUSH_SECONDS
        if due or len(self._lines) > 200:
            self.flush()
        return len(text)

    def flush(self) -> None:
        self.original.flush()
        with self._lock:
            lines, self._lines = self._lines, []
            self._last_flush = time.monotonic()
        for start in range(0, len(lines), MAX_LOG_LINES):
            chunk = lines[start : start + MAX_LOG_LINES]
            self.events.emit("log", {"lines": [ln[:2000] for ln in chunk]})

    def isatty(self) -> bool:
        return False

    def __getattr__(self, name):
        return getattr(self.original, name)


def _system_sample(workdir: str, nvml) -> dict:
    import psutil

    memory = psutil.virtual_memory()
    sample = {
        "cpu_percent": psutil.cpu_percent(None),
        "ram_percent": memory.percent,
        "ram_used_gb": round(memory.used / 2**30, 2),
        "disk_percent": psutil.disk_usage(workdir).percent,
        "process_rss_gb": round(psutil.Process().memory_info().rss / 2**30, 2),
    }
    if nvml is not None:
        gpus = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            util = nvml.nvmlDeviceGetUtilizationRates(handle)
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                {
                    "util_percent": util.gpu,
                    "memory_used_gb": round(mem.used / 2**30, 2),
                    "memory_total_gb": round(mem.total / 2**30, 2),
                    "temperature_c": nvml.nvmlDeviceGetTemperature(handle, 0),
                    "power_w": round(nvml.nvmlDeviceGetPowerUsage(handle) / 1000, 1),
                }
            )
        sample["gpus"] = gpus
    return sample


def _nvml():
    if os.environ.get("CUDA_VISIBLE_DEVICES") == "":
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - no driver, no GPU: CPU samples only
        return None


def _sampler(events: Events, workdir: str, interval: float, stop: threading.Event) -> None:
    nvml = _nvml()
    while not stop.wait(interval):
        try:
            events.emit("system", _system_sample(workdir, nvml))
        except Exception as e:  # noqa: BLE001
            sys.__stderr__.write(f"kestrel: system sample failed: {e}\n")


def _copy_atomic(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def _metrics(trainer) -> dict:
    values = {}
    try:
        values.update(trainer.label_loss_items(trainer.tloss, prefix="train"))
    except Exception as e:  # noqa: BLE001 - a task whose loss items differ: metrics only
        sys.__stderr__.write(f"kestrel: no loss items: {e}\n")
    values.update(trainer.metrics or {})
    values.update(getattr(trainer, "lr", None) or {})
    return {k: v for k, v in ((k, _number(v)) for k, v in values.items()) if v is not None}


class Callbacks:
    def __init__(self, spec: dict, events: Events):
        self.spec, self.events = spec, events
        self.ckpt_dir = Path(spec["checkpoint_dir"])
        self.ckpt_dir.mkdir(parents=True, exist_ok=True)
        self.stop_requested = False
        self.started = False  # Ultralytics built the model and loaders, and began training
        self.pending_checkpoint: dict | None = None
        self.in_epoch = False
        self.batch = 0
        self.epoch_seen = 0  # the epoch under way (its validation's, after it)
        self.first_batch = True
        self.last_batch_event = 0.0
        self.last_control = 0.0
        self.kestrel = None  # a remote trainer's link for its files (training.remote_trainer)
        if spec.get("uploads"):
            from training.remote_trainer import Kestrel

            self.kestrel = Kestrel(spec["job_url"], spec["events_token"])
        self.silent_limit = float(spec.get("lease_seconds") or 0)

    def _uploaded(self, files: dict[str, Path]) -> bool:
        """A remote trainer's files stored in Kestrel (True at once for a local one, whose
        supervisor reads them from this machine)."""
        if self.kestrel is None:
            return True
        from training.remote_trainer import RemoteError

        for name, path in files.items():
            try:
                self.kestrel.upload(name, path)
            except (RemoteError, OSError) as e:
                print(f"Kestrel: {name} was not uploaded: {e}")
                return False
        return True

    def register(self, model) -> None:
        model.add_callback("on_train_start", self.on_train_start)
        model.add_callback("on_train_epoch_start", self.on_train_epoch_start)
        model.add_callback("on_train_batch_end", self.on_train_batch_end)
        model.add_callback("on_val_batch_end", self.on_val_batch_end)  # the validator's too
        model.add_callback("on_model_save", self.on_model_save)
        model.add_callback("on_fit_epoch_end", self.on_fit_epoch_end)
        model.add_callback("on_train_end", self.on_train_end)

    def _check_control(self, trainer) -> None:
        now = time.monotonic()
        if now - self.last_control < CONTROL_CHECK_SECONDS:
            return
        self.last_control = now
        silent = self.events.silent_for()
        if self.silent_limit and silent > self.silent_limit and not self.stop_requested:
            # Kestrel has given this attempt up by now: stop, keeping the checkpoint here; the
            # resume starts from the last one Kestrel stored.
            self.stop_requested = True
            trainer.stop = True
            print(f"Kestrel: not reachable for {silent:.0f} s; stopping this attempt.")
        fence, control = self.events.control()
        if fence is not None and fence != str(self.spec["attempt"]):
            sys.__stderr__.write("kestrel: another attempt owns this job; exiting\n")
            os._exit(FENCED)
        if control in ("stop", "cancel") and not self.stop_requested:
            self.stop_requested = True
            trainer.stop = True
            print("Kestrel: stop requested; finishing this batch, then validating and saving.")

    def on_train_start(self, trainer) -> None:
        self.started = True
        self.events.emit(
            "train_start",
            {
                "epochs": trainer.epochs,
                "start_epoch": trainer.start_epoch,
                "batches": len(trainer.train_loader),
                "device": str(trainer.device)[:200],
            },
        )

    def on_train_epoch_start(self, trainer) -> None:
        self.in_epoch = True
        self.batch = 0
        self.epoch_seen = trainer.epoch + 1

    def on_train_batch_end(self, trainer) -> None:
        self.batch += 1
        now = time.monotonic()
        # The epoch's last batch always: the supervisor then knows validation follows.
        last = self.batch >= len(trainer.train_loader)
        if self.first_batch or last or now - self.last_batch_event >= 1 / BATCH_EVENTS_PER_SECOND:
            loss = trainer.tloss
            self.events.emit(
                "batch",
                {
                    "epoch": trainer.epoch + 1,
                    "epochs": trainer.epochs,
                    "batch": self.batch,
                    "batches": len(trainer.train_loader),
                    "batch_size": trainer.batch_size,
                    "loss": [
                        _number(v) for v in (loss.tolist() if hasattr(loss, "tolist") else [loss])
                    ]
                    if loss is not None
                    else [],
                    "first": self.first_batch,
                },
            )
            self.first_batch = False
            self.last_batch_event = now
        self._check_control(trainer)

    def on_val_batch_end(self, validator) -> None:
        """Validation is progress too: a run stuck in it is told from one that validates."""
        now = time.monotonic()
        if now - self.last_batch_event < 1 / BATCH_EVENTS_PER_SECOND:
            return
        self.last_batch_event = now
        self.events.emit(
            "val_batch",
            {
                "epoch": self.epoch_seen,
                "batch": int(getattr(validator, "batch_i", 0)) + 1,
                "batches": len(validator.dataloader) if validator.dataloader is not None else 0,
            },
        )

    def on_model_save(self, trainer) -> None:
        # Copied now: the final evaluation strips the optimizer from last.pt, and resuming
        # needs it.
        epoch = trainer.epoch + 1
        last = self.ckpt_dir / f"last-{epoch}.pt"
        _copy_atomic(Path(trainer.last), last)
        best = None
        if Path(trainer.best).exists() and trainer.best_fitness == trainer.fitness:
            best = self.ckpt_dir / f"best-{epoch}.pt"
            _copy_atomic(Path(trainer.best), best)
        # Sent after the epoch's metrics (on_fit_epoch_end): a checkpoint never gets ahead of
        # the metrics stored for it, so a resume never skips an epoch's row.
        # Named by epoch: the supervisor finds the files itself in the checkpoint folder.
        self.pending_checkpoint = {"epoch": epoch, "best": best is not None}

    def on_fit_epoch_end(self, trainer) -> None:
        if self.in_epoch:
            self.in_epoch = False
            self.events.emit(
                "epoch",
                {
                    "epoch": trainer.epoch + 1,
                    "epochs": trainer.epochs,
                    "metrics": _metrics(trainer),
                    "seconds": _number(getattr(trainer, "epoch_time", None)),
                },
            )
            if self.pending_checkpoint:
                epoch = self.pending_checkpoint["epoch"]
                files = {f"last-{epoch}.pt": self.ckpt_dir / f"last-{epoch}.pt"}
                if self.pending_checkpoint["best"]:
                    files[f"best-{epoch}.pt"] = self.ckpt_dir / f"best-{epoch}.pt"
                if self._uploaded(files):  # a checkpoint's event only once Kestrel can take it
                    self.events.emit("checkpoint", self.pending_checkpoint)
                self.pending_checkpoint = None
            self._check_control(trainer)
        else:  # the final validation of best.pt
            metrics = {k: _number(v) for k, v in (trainer.metrics or {}).items()}
            self.events.emit(
                "final", {"metrics": {k: v for k, v in metrics.items() if v is not None}}
            )

    def on_train_end(self, trainer) -> None:
        _join_plotting_threads()  # Ultralytics draws validation images on threads of its own
        # Files by name only: the supervisor reads them from the run folder it set up.
        plots = sorted(
            p.name for p in Path(trainer.save_dir).iterdir() if PLOT_NAME_RE.match(p.name)
        )
        if self.kestrel is not None:
            save_dir = Path(trainer.save_dir)
            files = {name: save_dir / name for name in plots[:100]}
            files.update(
                {
                    name: path
                    for name, path in (
                        ("results.csv", save_dir / "results.csv"),
                        ("best.pt", Path(trainer.best)),
                    )
                    if path.is_file()
                }
            )
            self._uploaded(files)
        self.events.emit(
            "train_end",
            {
                "best": Path(trainer.best).exists(),
                "names": [str(n) for n in (trainer.data or {}).get("names", {}).values()],
                "plots": plots[:100],
                "results": _final_results(trainer),
            },
        )


def _join_plotting_threads(timeout: float = 30) -> None:
    """Wait for Ultralytics' non-daemon plotting threads: this process ends with os._exit,
    which would not wait for them, and their images are part of the results."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(timeout)


def _final_results(trainer) -> dict:
    """The final validation explained: per-class rows and the confusion matrix."""
    out: dict = {}
    validator = getattr(trainer, "validator", None)
    metrics = getattr(validator, "metrics", None)
    try:
        rows = metrics.summary() if metrics is not None else []
        out["per_class"] = [
            {str(k): (v[:200] if isinstance(v, str) else _number(v)) for k, v in row.items()}
            for row in rows[:MAX_CLASSES]
        ]
    except Exception as e:  # noqa: BLE001 - results are a nicety; the run has succeeded
        sys.__stderr__.write(f"kestrel: no per-class summary: {e}\n")
    matrix = getattr(validator, "confusion_matrix", None)
    try:
        # Past a few hundred classes the matrix is not drawn (nor sent: it grows as n²).
        if (
            matrix is not None
            and getattr(matrix, "matrix", None) is not None
            and len(matrix.matrix) <= MAX_MATRIX_CLASSES
        ):
            names = [str(n) for n in matrix.names.values()]
            # Detection-like tasks add a row and column for what matched no object; classify
            # and semantic matrices are the classes alone.
            if len(matrix.matrix) == len(names) + 1:
                names.append("background")
            out["confusion_matrix"] = {
                "names": names,
                "matrix": [[_number(v) or 0 for v in row] for row in matrix.matrix.tolist()],
            }
    except Exception as e:  # noqa: BLE001
        sys.__stderr__.write(f"kestrel: no confusion matrix: {e}\n")
    return out


def failure_kind(error: BaseException, *, started: bool) -> str:
    """The FailureKind of what ended the trainer: whether another attempt could go through.
    Before training began, the same model, data and arguments fail the same way again."""
    torch = sys.modules.get("torch")
    out_of_memory = getattr(torch, "OutOfMemoryError", None) if torch else None
    said_so = "out of memory" in str(error).lower()
    if said_so or (out_of_memory is not None and isinstance(error, out_of_memory)):
        return "oom"
    if not started:
        # Ultralytics raises ConnectionError for a file it could not download.
        return "download" if isinstance(error, ConnectionError) else "start"
    return "crash"


def run(spec: dict) -> int:
    events = events_for(spec)
    stdout, stderr = LogTee(events, sys.stdout), LogTee(events, sys.stderr)
    sys.stdout, sys.stderr = stdout, stderr  # before Ultralytics binds its log handler
    stop_sampling = threading.Event()
    sampler = threading.Thread(
        target=_sampler,
        args=(events, spec["workdir"], float(spec.get("system_sample_seconds", 5)), stop_sampling),
        daemon=True,
    )
    sampler.start()
    callbacks = None
    try:
        events.emit("started", {"pid": os.getpid(), "resumed": bool(spec.get("resume"))})
        # Before Ultralytics is imported: every torch.load of this process (Ultralytics' resume,
        # strip_optimizer and final evaluation included) uses the restricted unpickler.
        checkpoint_loading_restrict()
        for weights in (spec.get("resume"), spec.get("model")):
            if weights and str(weights).endswith(".pt") and Path(weights).is_file():
                weights_check(Path(weights))  # names what a refused file needs
        from ultralytics import YOLO

        if spec.get("resume"):
            model = YOLO(spec["resume"])
            callbacks = Callbacks(spec, events)
            callbacks.register(model)
            args = spec["train_args"]
            model.train(
                resume=True,
                data=args["data"],
                device=args["device"],
                workers=args.get("workers", 0),
            )
        else:
            model = YOLO(spec["model"], task=spec["task"])
            callbacks = Callbacks(spec, events)
            callbacks.register(model)
            model.train(**spec["train_args"])
    except UnsafeWeights as e:
        print(f"Kestrel: weights refused: {e}")
        outcome = ("error", {"message": f"The weights file was refused: {e}.", "kind": "weights"})
    except BaseException as e:  # noqa: BLE001 - every failure becomes a readable reason
        traceback.print_exc()
        message = f"{type(e).__name__}: {e}".strip()[:2000]
        started = bool(callbacks and callbacks.started)
        outcome = ("error", {"message": message, "kind": failure_kind(e, started=started)})
    else:
        outcome = ("done", {"stopped": bool(callbacks and callbacks.stop_requested)})
    finally:
        stop_sampling.set()
    stdout.flush()
    stderr.flush()
    events.emit(*outcome)  # the last word: the supervisor reads everything before it
    events.close()
    return 0 if outcome[0] == "done" else 1


def main() -> None:
    _die_with_parent()
    if sys.argv[1:2] == ["--remote"]:  # on another machine: everything comes over HTTPS
        from training.remote_trainer import remote_spec_from_argv

        spec = remote_spec_from_argv(sys.argv[1:])
    else:
        spec = json.loads(Path(sys.argv[1]).read_text())
    os.environ.update(spec.get("env", {}))
    code = run(spec)
    _join_plotting_threads()
    sys.__stdout__.flush()
    sys.__stderr__.flush()
    # Everything is sent and saved: skip the interpreter's teardown of torch (~2 s of nothing).
    os._exit(code)


if __name__ == "__main__":
    main()
