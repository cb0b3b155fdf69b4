"""The command provider: the trainer runs on a machine Kestrel reaches through a command of the
operator's, such as `ssh -T gpu-box` or `ip netns exec lab`, as `python -m training.process.runner
--remote <job-url>`. That machine needs Kestrel's code and Ultralytics, and HTTPS to Kestrel
(TRAINING_EVENTS_URL); no database, Redis or shared disk. The attempt's token goes to the
trainer's standard input, never its command line; its environment is the command's own.

    TRAINING_PROVIDERS=local,command
    TRAINING_COMMAND="ssh -T gpu-box"          # what runs the trainer there
    TRAINING_COMMAND_PYTHON="/opt/kestrel/.venv/bin/python"
    TRAINING_COMMAND_WORKDIR="/data/kestrel"   # the trainer's folder there
"""

import os
import shlex
import signal
import subprocess
from pathlib import Path

from django.conf import settings

from training.providers.base import Machine, Provider, ProviderError, TrainerHandle
from training.providers.local import ROOT

# What the command is started with: enough to find programs, nothing of Kestrel's settings.
_ENV_KEPT = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SSH_AUTH_SOCK")


def remote_job_url(job_id: int) -> str:
    if not settings.TRAINING_EVENTS_URL:
        raise ProviderError(
            "Remote trainers need TRAINING_EVENTS_URL: the address they reach Kestrel at."
        )
    return f"{settings.TRAINING_EVENTS_URL.rstrip('/')}/api/v1/trainer/jobs/{job_id}"


class CommandProvider(Provider):
    key = "command"

    def __init__(self):
        self._procs: dict[int, subprocess.Popen] = {}

    def provision(self, *, job_id: int, gpu_slug: str) -> Machine:
        prefix = shlex.split(settings.TRAINING_COMMAND or "")
        if not prefix:
            raise ProviderError("TRAINING_COMMAND is not set: how to reach the training machine.")
        remote_job_url(job_id)
        workdir = Path(settings.TRAINING_DIR) / "remote"  # what the supervisor takes in here
        workdir.mkdir(parents=True, exist_ok=True)
        return Machine(
            provider=self.key,
            name=f"through “{shlex.join(prefix)[:80]}”",
            device="remote",
            workdir=str(workdir),
            details={"remote": True, "command": prefix},
        )

    def start(self, machine: Machine, *, spec_path: str, log_path: str) -> TrainerHandle:
        import json

        spec = json.loads(Path(spec_path).read_text())
        argv = [
            *machine.details["command"],
            settings.TRAINING_COMMAND_PYTHON,
            "-m",
            "training.process.runner",
            "--remote",
            remote_job_url(spec["job_id"]),
        ]
        if settings.TRAINING_COMMAND_WORKDIR:
            argv += ["--workdir", settings.TRAINING_COMMAND_WORKDIR]
        env = {k: v for k, v in os.environ.items() if k in _ENV_KEPT}
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(  # noqa: S603 - the operator's command, our arguments
                argv,
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        proc.stdin.write(f"{spec['events_token']}\n".encode())
        proc.stdin.close()
        self._procs[proc.pid] = proc
        return TrainerHandle(machine=machine, pid=proc.pid)

    def exit_code(self, handle: TrainerHandle) -> int | None:
        proc = self._procs.get(handle.pid)
        return proc.poll() if proc is not None else -1

    def terminate(self, handle: TrainerHandle, *, force: bool) -> None:
        proc = self._procs.get(handle.pid)
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL if force else signal.SIGTERM)
        except ProcessLookupError:
            return
        if force:
            proc.wait(timeout=30)
