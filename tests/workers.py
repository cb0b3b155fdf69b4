"""Real Celery workers for tests, each in a process group of its own, on this test's database
and this suite's broker. Every test that needs a worker starts it through here."""

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.servers import ROOT, subprocess_database_url


class Workers:
    """The workers one test started; `stop_all` ends them (the fixtures call it)."""

    def __init__(self, **env_extra: str):
        self.procs: list[subprocess.Popen] = []
        self.env_extra = env_extra

    def start(self, *queues: str, log: Path | None = None, **env_extra: str) -> subprocess.Popen:
        """A solo-pool worker on `queues` (the training queue when none is named)."""
        from django.conf import settings

        env = {
            **os.environ,
            "DATABASE_URL": subprocess_database_url(),
            "DJANGO_SETTINGS_MODULE": "config.test_settings",
            **self.env_extra,
            **env_extra,
        }
        command = [sys.executable, "-m", "celery", "-A", "config", "worker"]
        command += ["-Q", ",".join(queues or (settings.TRAINING_QUEUE,)), "--pool", "solo"]
        command += ["--loglevel", "WARNING", "--without-heartbeat", "--without-gossip"]
        command += ["--without-mingle"]
        output = {"stdout": log.open("wb"), "stderr": subprocess.STDOUT} if log else {}
        proc = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True, **output)
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen) -> None:
        """kill -9 the worker process alone (its trainer must die with it)."""
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)

    def stop(self, proc: subprocess.Popen) -> None:
        """SIGTERM to the worker's group (a warm shutdown); SIGKILL if it does not end."""
        self._term(proc)
        self._wait(proc)

    def stop_all(self) -> None:
        """Each worker told at once, then each waited for: their warm shutdowns overlap (one
        after the other, a test with three workers waited for three)."""
        for proc in self.procs:
            self._term(proc)
        for proc in self.procs:
            self._wait(proc)

    @staticmethod
    def _term(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    @staticmethod
    def _wait(proc: subprocess.Popen) -> None:
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=10)
