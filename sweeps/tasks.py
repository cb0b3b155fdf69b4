"""Sweep background work: ids in, then the service (sweeps.services.advance)."""

import logging

from celery import shared_task

from core.tasks import task_send
from sweeps.models import Sweep
from sweeps.services.advance import sweep_advance

logger = logging.getLogger(__name__)


@shared_task(name="sweeps.advance", soft_time_limit=240, time_limit=300)
def sweep_advance_task(sweep_id: int, **kwargs) -> None:
    """One step of a sweep (idempotent: under the sweep's row lock, from its rows)."""
    if kwargs:
        logger.warning("sweeps.advance: unexpected arguments %s", sorted(kwargs))
    sweep_advance(sweep_id)


@shared_task(name="sweeps.advance_due", soft_time_limit=60, time_limit=90)
def sweeps_advance_due(**kwargs) -> int:
    """Beat: a step for every sweep that has something to do (it runs, or a trial's job has
    not ended yet)."""
    if kwargs:
        logger.warning("sweeps.advance_due: unexpected arguments %s", sorted(kwargs))
    ids = list(Sweep.objects.advancing().values_list("pk", flat=True))
    for sweep_id in ids:
        task_send("sweeps.advance", sweep_id)
    return len(ids)
