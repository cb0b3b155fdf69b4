import logging

from celery import shared_task

from training import supervisor
from training.weights_process import INSPECT_TIMEOUT_SECONDS

logger = logging.getLogger(__name__)

WEEK = 7 * 24 * 3600


# No time limit that a long run could hit, and acks_late off: if the worker dies, the reaper
# resumes the job; the broker never re-delivers it to a second worker while the first runs.
@shared_task(name="training.run_job", acks_late=False, soft_time_limit=WEEK, time_limit=WEEK)
def run_job(job_id: int) -> str:
    return supervisor.run_job(job_id)


@shared_task(
    name="training.model_inspect",
    soft_time_limit=INSPECT_TIMEOUT_SECONDS + 60,
    time_limit=INSPECT_TIMEOUT_SECONDS + 120,
)
def model_inspect(model_id: int, **kwargs) -> None:
    """Inspect uploaded weights (training.services.inspection)."""
    if kwargs:
        logger.warning("training.model_inspect: unexpected arguments %s", sorted(kwargs))
    from training.services.inspection import model_inspect_run

    model_inspect_run(model_id=model_id)
