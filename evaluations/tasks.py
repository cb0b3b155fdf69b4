"""Evaluation background work: ids in, load, guard, call the service."""

import logging

from celery import shared_task

from evaluations.services.run import EVALUATION_TIMEOUT_SECONDS, evaluation_run_once

logger = logging.getLogger(__name__)


@shared_task(
    name="evaluations.evaluation_run",
    soft_time_limit=EVALUATION_TIMEOUT_SECONDS + 5 * 60,
    time_limit=EVALUATION_TIMEOUT_SECONDS + 6 * 60,
)
def evaluation_run(evaluation_id: int, **kwargs) -> None:
    """Run one evaluation; one already taken (or finished) is left alone."""
    if kwargs:
        logger.warning("evaluations.evaluation_run: unexpected arguments %s", sorted(kwargs))
    evaluation_run_once(evaluation_id)
