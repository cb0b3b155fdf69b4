"""The worker process every use of user weights goes through: `training.weights_worker`, which
alone imports torch, run in a session of its own with a time limit, read back as progress
lines, an answer and the tail of its log. Exports and inspections of uploads both call it
(`worker_run`); a supervisor inspects every checkpoint of its attempt with one such process
(`CheckpointInspector`)."""

import json
import logging
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
INSPECT_TIMEOUT_SECONDS = 5 * 60
LOG_TAIL_CHARS = 20_000


@dataclass
class WorkerAnswer:
    result: dict | None = None
    error: str = ""
    log: str = ""
    messages: list[str] = field(default_factory=list)


def _worker_env() -> dict[str, str]:
    """Offline, no installs, checkpoints only through the restricted unpickler (the worker
    sets that up itself; this process never imports torch)."""
    from training.ultralytics_env import ultralytics_process_env

    return {**os.environ, **ultralytics_process_env(), "PYTHONUNBUFFERED": "1"}


def worker_run(
    args: list[str],
    *,
    timeout: float,
    on_progress: Callable[[int, str], None] | None = None,
    module: str = "training.weights_worker",
) -> WorkerAnswer:
    """Run `python -m training.weights_worker <args>` in a session of its own, killed with all
    its children past `timeout` seconds; its answer, progress and the tail of its log.
    `module`: another worker speaking the same protocol (evaluations.val_worker)."""
    answer = WorkerAnswer()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(  # noqa: S603 - our own module, arguments are paths and keys
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            env=_worker_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
        timed_out = threading.Event()

        def _stop() -> None:
            timed_out.set()
            _kill_group(proc)

        timer = threading.Timer(timeout, _stop)
        timer.start()
        try:
            for line in proc.stdout:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(message, dict):
                    continue
                if "progress" in message:
                    text = str(message.get("message", ""))[:200]
                    answer.messages.append(text)
                    if on_progress is not None:
                        on_progress(max(0, min(int(message["progress"]), 100)), text)
                elif "result" in message:
                    answer.result = message["result"]
                elif "error" in message:
                    answer.error = str(message["error"])[:2000]
            proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                _kill_group(proc)
                proc.wait()
        log.seek(0, os.SEEK_END)
        log.seek(max(0, log.tell() - LOG_TAIL_CHARS))
        answer.log = log.read().decode("utf-8", "replace")
    if timed_out.is_set():
        answer.result = None
        answer.error = _too_long(timeout)
    elif proc.returncode != 0 and not answer.error:
        answer.result = None
        answer.error = _ended(proc.returncode)
    elif answer.result is None and not answer.error:
        answer.error = "The worker process ended without an answer."
    return answer


def _too_long(timeout: float) -> str:
    return f"It took longer than {round(timeout / 60)} minutes and was stopped."


def _ended(returncode: int) -> str:
    if returncode < 0:
        return f"The worker process was killed by signal {-returncode}" + (
            " (out of memory?)" if returncode == -signal.SIGKILL else ""
        )
    if returncode:
        return f"The worker process exited with code {returncode}."
    return "The worker process ended without an answer."


class CheckpointInspector:
    """The checkpoints of one training attempt, each inspected as an upload is (its pickle
    checked, then loaded through torch's restricted unpickler), by one worker process
    (`weights_worker serve`) started at the first: torch is imported once an attempt, not once
    a checkpoint. Never shared between attempts: it opens only the files of one trainer."""

    def __init__(self, *, timeout: float = INSPECT_TIMEOUT_SECONDS):
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.answers: queue.Queue = queue.Queue()
        self.log = None
        self.asked = 0  # the id of the last request: an answer to an earlier one is stale

    def _start(self) -> None:
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(  # noqa: S603 - our own module; paths go on its stdin
            [sys.executable, "-m", "training.weights_worker", "serve"],
            cwd=ROOT,
            env=_worker_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            start_new_session=True,
        )
        # An inspector dropped unclosed closes the worker's stdin once collected: reading EOF,
        # the worker ends (the reader holds its stdout only, never the process).
        weakref.finalize(self, _quietly_closed, self.proc.stdin)
        answers = self.answers = queue.Queue()  # a new one: nothing of an earlier process
        stdout = self.proc.stdout

        def read() -> None:
            for line in stdout:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if isinstance(message, dict) and ("result" in message or "error" in message):
                    answers.put(message)
            answers.put(None)  # the process ended

        threading.Thread(target=read, name="checkpoint-inspector", daemon=True).start()

    def start(self) -> None:
        """Start the worker now (it imports torch, seconds), so that the first checkpoint
        does not wait for it: the supervisor calls this as its trainer starts."""
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            self._start()

    def inspect(
        self,
        path: Path,
        name: str,
        *,
        keep_alive: Callable[[], object] | None = None,
        every: float = 1.0,
    ) -> WorkerAnswer:
        """The worker's answer for the checkpoint at `path` (`name` is what an answer calls
        it). `keep_alive` is called every `every` seconds while it waits (the supervisor's lease
        must outlast an inspection); past the time limit the process is killed."""
        self.start()
        # A wait cut short (keep_alive raised: the database went away) leaves its answer to
        # come; it answers an earlier id and is dropped, never taken for this file's.
        self.asked += 1
        ident = self.asked
        request = {"inspect": str(path), "name": name, "id": ident}
        try:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        except OSError:
            pass  # it died: its end is read below
        deadline = time.monotonic() + self.timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                _kill_group(self.proc)
                self.close()
                return WorkerAnswer(error=_too_long(self.timeout))
            try:
                message = self.answers.get(timeout=min(every, left))
            except queue.Empty:
                if keep_alive is not None:
                    keep_alive()
                continue
            if message is None:
                returncode = self.proc.wait()
                error = _ended(returncode)
                logger.warning("checkpoint inspector ended: %s\n%s", error, self._log_tail())
                self.close()
                return WorkerAnswer(error=error)
            if message.get("id") != ident:
                continue  # the answer to a request whose wait was cut short
            result = message.get("result")
            error = str(message.get("error") or "")[:2000]
            return WorkerAnswer(result=result if isinstance(result, dict) else None, error=error)

    def _log_tail(self) -> str:
        if self.log is None:
            return ""
        self.log.seek(0, os.SEEK_END)
        self.log.seek(max(0, self.log.tell() - LOG_TAIL_CHARS))
        return self.log.read().decode("utf-8", "replace")

    def close(self) -> None:
        """End the worker process (it ends when its stdin closes; killed if it does not)."""
        proc, self.proc = self.proc, None
        if proc is not None:
            try:
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                proc.wait()
        if self.log is not None:
            self.log.close()
            self.log = None


def _quietly_closed(stream) -> None:
    try:
        stream.close()
    except OSError:
        pass


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
