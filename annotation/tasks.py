"""Annotation background work: ids in, load, guard, call the service."""

import logging

from celery import shared_task
from django.db import transaction

logger = logging.getLogger(__name__)


@shared_task(name="annotation.prelabel_run", soft_time_limit=3 * 3600, time_limit=3 * 3600 + 300)
def prelabel_run(run_id: int, **kwargs) -> None:
    """Pre-label a dataset. Idempotent: a run already taken (or finished) is left alone."""
    if kwargs:
        logger.warning("annotation.prelabel_run: unexpected arguments %s", sorted(kwargs))
    from annotation.models import PrelabelRun, PrelabelState
    from annotation.prelabel import prelabel_execute

    with transaction.atomic():
        run = (
            PrelabelRun.objects.select_for_update(skip_locked=True)
            .select_related("dataset", "model")
            .filter(pk=run_id, state=PrelabelState.QUEUED)
            .first()
        )
        if run is None:
            return
        run.state = PrelabelState.RUNNING
        run.save(update_fields=["state"])
    prelabel_execute(run)
