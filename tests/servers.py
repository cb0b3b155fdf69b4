"""The app under uvicorn in a process of its own, on the current test's database."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def subprocess_database_url() -> str:
    """The current test database as a DATABASE_URL, for processes a test starts (servers,
    workers): PostgreSQL's test database, or the SQLite file the quick start's engine uses."""
    from django.db import connection

    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(db['NAME']).resolve()}"
    return f"postgres://postgres@127.0.0.1:5432/{db['NAME']}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def web_start(port: int, env: dict, host: str = "127.0.0.1") -> subprocess.Popen:
    """`python -m config.web` (as make run serves it) on `host:port`, in a session of its own,
    once it answers a page."""
    command = [sys.executable, "-m", "config.web"]
    command += ["--host", host, "--port", str(port), "--log-level", "warning"]
    # As make run serves it: open event streams are closed after a moment, not waited on.
    command += ["--timeout-graceful-shutdown", "2"]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, start_new_session=True)
    deadline = time.monotonic() + 60
    while True:
        try:
            url = f"http://{host}:{port}/accounts/login/"
            urllib.request.urlopen(url, timeout=2).read()  # noqa: S310
            return proc
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise AssertionError("uvicorn did not start") from None
            time.sleep(0.3)


@contextlib.contextmanager
def app_server(host: str = "127.0.0.1", **env_extra: str) -> Iterator[str]:
    """Start uvicorn on this test's database and storage, on `host` (127.0.0.1, or the address
    a test's network namespace reaches); yield its base URL; stop it."""
    from django.conf import settings

    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": subprocess_database_url(),
        "DJANGO_SETTINGS_MODULE": "config.test_settings",
        "MEDIA_ROOT": str(settings.MEDIA_ROOT),
        "TRAINING_REDIS_URL": settings.TRAINING_REDIS_URL,
        "ALLOWED_HOSTS": f"localhost,127.0.0.1,{host}",
        **env_extra,
    }
    proc = web_start(port, env, host)
    url = f"http://{host}:{port}"
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


class WebProcess:
    """`python -m config.web` on a fixed port, killed and started again as a crash would."""

    def __init__(self):
        from django.conf import settings

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "DATABASE_URL": subprocess_database_url(),
            "DJANGO_SETTINGS_MODULE": "config.test_settings",
            "MEDIA_ROOT": str(settings.MEDIA_ROOT),
            "TRAINING_REDIS_URL": settings.TRAINING_REDIS_URL,
        }
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = web_start(self.port, self.env)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
