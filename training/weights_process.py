"""The worker process every use of user weights goes through: `training.weights_worker`, which
alone imports torch, run in a session of its own with a time limit, read back as progress
lines, an answer and the tail of its log. Exports and inspections of uploads both call it."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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
) -> WorkerAnswer:
    """Run `python -m training.weights_worker <args>` in a session of its own, killed with all
    its children past `timeout` seconds; its answer, progress and the tail of its log."""
    answer = WorkerAnswer()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(  # noqa: S603 - our own module, arguments are paths and keys
            [sys.executable, "-m", "training.weights_worker", *args],
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
        answer.error = f"It took longer than {round(timeout / 60)} minutes and was stopped."
    elif proc.returncode != 0 and not answer.error:
        answer.result = None
        answer.error = (
            f"The worker process was killed by signal {-proc.returncode}"
            + (" (out of memory?)" if proc.returncode == -signal.SIGKILL else "")
            if proc.returncode < 0
            else f"The worker process exited with code {proc.returncode}."
        )
    elif answer.result is None and not answer.error:
        answer.error = "The worker process ended without an answer."
    return answer


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
