"""Sending a Celery task by its name, so a service that queues work need not import the task
module that imports the service (Celery's `send_task`; the queue comes from
`CELERY_TASK_ROUTES`, as for `.delay`)."""

from celery import current_app
from django.db import transaction


def task_send(name: str, *args) -> None:
    current_app.send_task(name, args=list(args))


def task_send_on_commit(name: str, *args, robust: bool = False) -> None:
    """Send once the current transaction commits, so the worker finds the rows it is sent for."""
    transaction.on_commit(lambda: task_send(name, *args), robust=robust)
