"""The beat task runs in a real Celery worker over the real Redis broker."""

import time
from datetime import timedelta

from django.utils import timezone

from workspaces.models import Invitation
from workspaces.tasks import invitations_purge_expired_task


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
