"""The beat task runs in a real Celery worker over the real Redis broker."""

import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from workspaces.models import Invitation
from workspaces.tasks import invitations_purge_expired_task

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def celery_worker_process(transactional_db):
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://postgres@127.0.0.1:5432/{connection.settings_dict['NAME']}",
        "DJANGO_SETTINGS_MODULE": "config.test_settings",
    }
    queue = f"test-{os.getpid()}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "config",
            "worker",
            "-Q",
            queue,
            "--pool",
            "solo",
            "--loglevel",
            "WARNING",
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        yield queue
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_purge_task_runs_in_a_worker(celery_worker_process, team):
    expired = Invitation.objects.create(
        workspace=team.workspace,
        email="old@acme.test",
        role="viewer",
        expires_at=timezone.now() - timedelta(days=1),
    )
    live = Invitation.objects.create(
        workspace=team.workspace,
        email="new@acme.test",
        role="viewer",
        expires_at=timezone.now() + timedelta(days=1),
    )
    invitations_purge_expired_task.apply_async(queue=celery_worker_process)
    deadline = time.monotonic() + 60
    while Invitation.objects.filter(pk=expired.pk).exists():
        assert time.monotonic() < deadline, "the worker did not run the task within 60 s"
        time.sleep(0.2)
    assert Invitation.objects.filter(pk=live.pk).exists()
