"""Paying for machine time: a hold when a job is queued, captures of the seconds actually used
at every heartbeat, the rest released when it ends. Free machines ("This machine" at $0) are
not metered.

Captures are cumulative per attempt: at each beat the attempt is charged for (now − its start)
minus what it was already charged, in the same transaction as the record of it, so a repeated
heartbeat charges nothing and a missed one is caught up by the next.
"""

import logging
from datetime import datetime

from django.db import transaction
from django.db.models import Sum

from billing.ledger import (
    InsufficientCredits,
    credits_format_rounded,
    credits_refund,
    hold_capture,
    hold_extend,
    hold_place,
    hold_release,
    job_open_hold,
)
from billing.models import EntryKind, LedgerEntry
from core.money import per_hour_to_micro
from training.models import TrainingAttempt, TrainingJob

logger = logging.getLogger(__name__)

HOLD_MINIMUM_SECONDS = 15 * 60  # a job holds at least a quarter of an hour of its machine
NEXT_SLICE_SECONDS = 5 * 60  # kept held ahead while it runs


def metered(job: TrainingJob) -> bool:
    """Whether the job costs credits: never an external one (the machine is the user's)."""
    return job.gpu_type is not None and job.gpu_type.hourly_price > 0


def _micro(seconds: float, job: TrainingJob) -> int:
    return per_hour_to_micro(seconds, job.gpu_type.hourly_price)


def hold_for_start(job: TrainingJob, *, estimate_seconds: float | None = None) -> None:
    """Set aside the job's estimate (at least 15 minutes of its machine) before it is queued;
    raises InsufficientCredits (a ServiceError with the figures) when it is not available."""
    if not metered(job):
        return
    if estimate_seconds is None:
        estimate_seconds = estimated_seconds(job)
    seconds = max(estimate_seconds or 0, HOLD_MINIMUM_SECONDS)
    amount = _micro(seconds, job)
    if job.budget_cap:
        amount = min(amount, job.budget_cap)
    hold_place(job.workspace, job, amount)


def estimated_seconds(job: TrainingJob, *, measure: bool = True) -> float | None:
    """The estimator's expected wall time of the job on its machine (None if it cannot say).
    measure=False: only from FLOPs already known (no seconds-long measurement)."""
    from training.estimator import FlopsNotMeasured, config_of_job, estimate

    try:
        return estimate(config_of_job(job), job.gpu_type, measure=measure).seconds
    except FlopsNotMeasured:
        return None
    except Exception:  # an estimate is a nicety: the 15-minute minimum holds anyway
        logger.warning("no estimate for job %s; holding the minimum", job.pk, exc_info=True)
        return None


def spent(job: TrainingJob) -> int:
    """Micro-credits the job has spent (captures less refunds)."""
    total = LedgerEntry.objects.filter(
        job_id=job.pk, kind__in=[EntryKind.CAPTURE, EntryKind.REFUND]
    ).aggregate(s=Sum("amount"))["s"]
    return -(total or 0)


def job_cost(job: TrainingJob) -> dict | None:
    """Credits a priced job has spent and what it still holds (its estimate's rest), as
    micro-credits and as the job's header shows them; None for a free machine."""
    if not metered(job):
        return None
    used, held = spent(job), job_open_hold(job)
    return {
        "spent": used,
        "held": held,
        "spent_text": credits_format_rounded(used),
        "held_text": credits_format_rounded(held),
    }


def billing_start(attempt: TrainingAttempt) -> datetime | None:
    """When the attempt's machine began to cost: its start on this machine or one reached by a
    command; at a cloud provider, the first phase past waiting in its queue (provisioning: the
    instance is rented from then), None while it still waits there."""
    if not attempt.provider_phases:
        return attempt.started_at
    for phase in attempt.provider_phases:
        if phase.get("phase") != "queued":
            return datetime.fromisoformat(phase["at"])
    return None


def meter(attempt_id: int, until: datetime, *, holder: str | None = None) -> str | None:
    """Capture the attempt's machine time up to `until`, then make sure the next slice is held.
    Returns why the job must stop (its budget cap, or credits run out), or None.

    An ended attempt is sealed: it is never charged again. With `holder` (a supervisor's
    worker name), nothing is charged unless the job's lease is still that worker's: a
    supervisor that was frozen, given up on and thawed must not charge for the time it lost."""
    with transaction.atomic():
        attempt = (
            # Not the GPU type's row: it may be empty (an external job), and PostgreSQL locks
            # no row on the nullable side of an outer join.
            TrainingAttempt.objects.select_for_update(of=("self", "job", "job__workspace"))
            .select_related("job__gpu_type", "job__workspace")
            .get(pk=attempt_id)
        )
        job = attempt.job
        if not metered(job) or attempt.ended_at is not None:
            return None
        if holder is not None and job.lease_owner != holder:
            return None
        start = billing_start(attempt)
        due_seconds = max(0.0, (until - start).total_seconds()) if start else 0.0
        amount = _micro(due_seconds, job) - _micro(attempt.billed_seconds, job)
        if job.budget_cap:  # never charged past its cap (a sweep's trials add up to its budget)
            amount = min(amount, job.budget_cap - spent(job))
        if amount > 0:
            try:
                hold_capture(job, amount)
            except InsufficientCredits:  # billed as soon as credits arrive (the next meter)
                return "Out of credits: the time used so far could not be paid; top up and resume."
            attempt.billed_seconds = due_seconds
            attempt.save(update_fields=["billed_seconds"])
    if job.budget_cap and spent(job) >= job.budget_cap:
        return "The job reached its budget cap; raise it and resume to train on."
    ahead = _micro(NEXT_SLICE_SECONDS, job)
    held = job_open_hold(job)
    if held < ahead:
        try:
            if held > 0:
                hold_extend(job, ahead)
            else:
                hold_place(job.workspace, job, ahead)
        except InsufficientCredits:
            return (
                f"Out of credits for the next {NEXT_SLICE_SECONDS // 60} minutes of "
                f"{job.gpu_type.name}; top up and resume: it continues from its checkpoint."
            )
    return None


def refund_platform_failure(job: TrainingJob, reason: str) -> None:
    """Give back everything a job spent when it failed on Kestrel's side."""
    amount = spent(job)
    if metered(job) and amount > 0:
        credits_refund(job, amount, reason=f"Failed on Kestrel's side: {reason}"[:500])


def settle(job: TrainingJob) -> None:
    """The job has ended (or waits for a person): give back what it still holds."""
    if metered(job):
        hold_release(job)
