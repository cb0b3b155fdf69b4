"""Sweeps' side of training's signals: a trial's job that ended frees its slot, so the sweep
advances at once (records it, starts the next trial) instead of at beat's next tick."""

from core.tasks import task_send
from sweeps.models import SweepTrial


def trial_job_ended(sender, job, **kwargs) -> None:
    sweep_id = SweepTrial.objects.filter(job_id=job.pk).values_list("sweep_id", flat=True).first()
    if sweep_id is not None:
        task_send("sweeps.advance", sweep_id)
