"""The local provider: trainers run as processes of this machine, on what it really has."""

import os
import signal
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from training.providers.base import Machine, Provider, ProviderError, TrainerHandle
from training.services.catalog import local_device

ROOT = Path(__file__).resolve().parents[2]


class LocalProvider(Provider):
    key = "local"

    def __init__(self):
        self._procs: dict[int, subprocess.Popen] = {}

    def provision(self, *, job_id: int, gpu_slug: str) -> Machine:
        if gpu_slug != "local":
            raise ProviderError("This machine only runs jobs that asked for “This machine”.")
        device = local_device()
        workdir = Path(settings.TRAINING_DIR)
        workdir.mkdir(parents=True, exist_ok=True)
        gpus = ",".join(str(i) for i in range(device.count)) if device.kind == "cuda" else ""
        return Machine(
            provider=self.key,
            name=device.description,
            device=gpus or "cpu",
            workdir=str(workdir),
        )

    def start(self, machine: Machine, *, spec_path: str, log_path: str) -> TrainerHandle:
        env = {**os.environ, "KESTREL_SUPERVISOR_PID": str(os.getpid())}
        if machine.device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""  # the page says CPU: never touch a GPU
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(  # noqa: S603 - our own module, arguments we wrote
                [sys.executable, "-m", "training.process.runner", spec_path],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: cancel kills all of it
            )
        self._procs[proc.pid] = proc
        return TrainerHandle(machine=machine, pid=proc.pid)

    def exit_code(self, handle: TrainerHandle) -> int | None:
        proc = self._procs.get(handle.pid)
        if proc is not None:
            return proc.poll()
        return None if _is_trainer(handle.pid) else -1

    def terminate(self, handle: TrainerHandle, *, force: bool) -> None:
        if handle.pid is None or not _is_trainer(handle.pid):
            return
        try:
            if force:
                os.killpg(handle.pid, signal.SIGKILL)
            else:
                os.kill(handle.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        proc = self._procs.get(handle.pid)
        if proc is not None and force:
            proc.wait(timeout=30)


def _is_trainer(pid: int | None) -> bool:
    """Whether `pid` is still one of our trainer processes (pids are reused)."""
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"training.process.runner" in cmdline
