import logging

from celery import shared_task

from training.process import supervisor
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


@shared_task(name="training.skypilot_reconcile", soft_time_limit=300, time_limit=360)
def skypilot_reconcile() -> dict:
    """Beat: no cloud machine outlives its job. A Kestrel managed job at SkyPilot that no live
    attempt holds is cancelled; a live attempt whose job SkyPilot no longer has is logged (its
    supervisor sees the job gone and resumes it, or the reaper does once its lease lapses)."""
    from django.conf import settings

    from training.models import TrainingAttempt
    from training.providers import sky_sdk

    if "skypilot" not in settings.TRAINING_PROVIDERS or not sky_sdk.installed():
        return {}
    from training.providers.skypilot_reconcile import skypilot_reconcile as reconcile

    refs = TrainingAttempt.objects.filter(
        ended_at__isnull=True, job__gpu_type__provider="skypilot"
    ).values_list("provider_ref", flat=True)
    result = reconcile([int(ref) for ref in refs if ref.isdigit()])
    for job_id in result.cancelled:
        logger.warning("SkyPilot managed job %s had no live attempt: cancelled", job_id)
    for job_id in result.gone:
        logger.warning("SkyPilot no longer has managed job %s of a live attempt", job_id)
    return {"cancelled": result.cancelled, "gone": result.gone}
