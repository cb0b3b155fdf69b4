"""The trainer process: `python -m training.process.runner SPEC.json`, or on a machine that
reaches Kestrel only over HTTPS, `python -m training.process.runner --remote <job-url>`
(training.process.remote_trainer).

Runs Ultralytics with callbacks (training.process.callbacks) that append the job's events to its
Redis stream (training.process.events): batch progress (a few per second), epoch metrics,
checkpoints, log lines and system samples (training.process.console), each carrying (job,
attempt, seq). It reads no database and loads weights only here, never in the web or the worker.
Events never block training: a lost Redis connection is logged and training goes on.

Exit status: 0 finished or stopped, 1 failed (an `error` event says why), 75 (FENCED) another
attempt owns the job now.
"""

import json
import os
import sys
import threading
import traceback
from pathlib import Path

from training.process.callbacks import Callbacks, _join_plotting_threads
from training.process.console import LogTee, _sampler
from training.process.events import FENCED, events_for
from training.weights_check import UnsafeWeights, checkpoint_loading_restrict, weights_check


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
        from training.process.remote_trainer import remote_spec_from_argv

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
