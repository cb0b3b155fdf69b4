"""Faults injected into real processes: a Redis of the test's own (a `redis-server` on a free
port the test starts, kills and starts again, empty), real Celery workers pointed at it, real
training on real images. Nothing here mocks what fails: the fault is the real one."""

import os
import shutil
import signal
import subprocess
import time

import pytest
import redis
from django.conf import settings
from django.db import transaction

from tests.servers import free_port
from tests.training.conftest import (  # noqa: F401 (fixtures)
    Workers,
    detect_version,
    gpu_local,
    project,
    workers,
)


class RedisServer:
    """A `redis-server` of the test's own on a free port, without persistence: started again
    after a kill, it comes back empty (streams, queues and keys gone), as a restarted Redis
    without a disk does."""

    def __init__(self):
        if not shutil.which("redis-server"):
            pytest.skip("redis-server is not installed")
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", ""]
            + ["--appendonly", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis.from_url(self.url, socket_timeout=1).ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline:
                    raise AssertionError("redis-server did not start") from None
                time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL: every connection drops at once, nothing is saved."""
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def outage(self, seconds: float) -> None:
        """Redis gone for `seconds`, then back on the same port, empty."""
        self.kill()
        time.sleep(seconds)
        self.start()

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)


@pytest.fixture
def own_redis():
    server = RedisServer()
    server.start()
    yield server
    server.kill()


@pytest.fixture
def faulty(own_redis, settings, monkeypatch, transactional_db):
    """This test's Kestrel on its own Redis: the workers it starts use it for their broker and
    the training streams; jobs submitted here are sent through it (a real Celery message)."""
    settings.TRAINING_REDIS_URL = own_redis.url
    from kombu import Connection

    from training import tasks
    from training.services import jobs

    def enqueue(job_id: int) -> None:
        def send() -> None:
            with Connection(own_redis.url) as conn:
                tasks.run_job.apply_async((job_id,), connection=conn)

        transaction.on_commit(send)

    monkeypatch.setattr(jobs, "_enqueue", enqueue)
    w = Workers(
        REDIS_URL=own_redis.url,
        TRAINING_REDIS_URL=own_redis.url,
        CELERY_BROKER_URL=own_redis.url,
        CELERY_RESULT_BACKEND=own_redis.url,
    )
    yield w
    w.stop_all()


def log_lines_of(text: str) -> list[str]:
    """Console output as the trainer's log events carry it: one entry per line, a carriage
    return (a progress bar redrawing) keeping only the line's last state."""
    return [line.rsplit("\r", 1)[-1] for line in text.split("\n")]


__all__ = ["RedisServer", "log_lines_of", "settings"]
