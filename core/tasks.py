"""Sending a Celery task by its name, so a service that queues work need not import the task
module that imports the service (Celery's `send_task`; the queue comes from
`CELERY_TASK_ROUTES`, as for `.delay`); and the one reaper of long jobs beat runs."""

import logging

from celery import current_app, shared_task
from django.db import transaction

from core.leases import long_jobs_reap

logger = logging.getLogger(__name__)


def task_send(name: str, *args) -> None:
    current_app.send_task(name, args=args)  # a tuple, as `.delay` sends it


def task_send_on_commit(name: str, *args, robust: bool = False) -> None:
    """Send once the current transaction commits, so the worker finds the rows it is sent for."""
    transaction.on_commit(lambda: task_send(name, *args), robust=robust)


@shared_task(name="core.long_jobs_reap", soft_time_limit=300, time_limit=360)
def long_jobs_reap_task(**kwargs) -> dict[str, int]:
    """Beat: long jobs whose worker died go back to the queue, or fail after too many attempts
    (every kind the apps registered, core.leases)."""
    if kwargs:
        logger.warning("core.long_jobs_reap: unexpected arguments %s", sorted(kwargs))
    return long_jobs_reap()
