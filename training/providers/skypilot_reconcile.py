"""No cloud machine outlives its job: SkyPilot's managed jobs set against Kestrel's live
attempts. The caller (a beat task) passes in the SkyPilot ids its live attempts hold; this
module reads SkyPilot's list, cancels Kestrel's managed jobs that no live attempt holds, and
says which live attempts' jobs SkyPilot no longer has (lost: resumed like a local one)."""

import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import training.providers.sky_sdk as sky_sdk
from training.providers.skypilot import JOB_NAME_PREFIX

# A job launched moments ago may not be on its attempt's row yet: not an orphan before this.
LAUNCH_GRACE_SECONDS = 15 * 60.0


@dataclass
class Reconciliation:
    cancelled: list[int] = field(default_factory=list)  # orphans: no live attempt holds them
    gone: list[int] = field(default_factory=list)  # live attempts' ids SkyPilot does not list
    ended: dict[int, str] = field(default_factory=dict)  # live attempts' ids already final


def reconcile_plan(
    managed: Iterable[sky_sdk.ManagedJob],
    live_ids: Iterable[int],
    *,
    now: float,
    grace_seconds: float = LAUNCH_GRACE_SECONDS,
) -> Reconciliation:
    """What to do, decided from SkyPilot's list alone (nothing is called)."""
    live = {int(i) for i in live_ids}
    result = Reconciliation()
    listed = set()
    for job in managed:
        listed.add(job.job_id)
        if job.job_id in live:
            if job.terminal:
                result.ended[job.job_id] = job.status
            continue
        if job.terminal or not job.name.startswith(JOB_NAME_PREFIX):
            continue  # finished, or not Kestrel's: the operator's own SkyPilot jobs stay
        # No submission time yet: still waiting for SkyPilot's controller, renting nothing.
        young = job.submitted_at is None or now - job.submitted_at < grace_seconds
        if not young:
            result.cancelled.append(job.job_id)
    result.gone = sorted(live - listed)
    result.cancelled.sort()
    return result


def skypilot_reconcile(
    live_ids: Iterable[int], *, grace_seconds: float = LAUNCH_GRACE_SECONDS
) -> Reconciliation:
    """Cancel the orphans; report the live attempts whose job is gone or already ended."""
    live = {int(i) for i in live_ids}
    # Every unfinished job, and the live attempts' own, finished or not.
    managed = {job.job_id: job for job in sky_sdk.jobs(skip_finished=True)}
    for job in sky_sdk.jobs(job_ids=live - set(managed)):
        managed[job.job_id] = job
    result = reconcile_plan(managed.values(), live, now=time.time(), grace_seconds=grace_seconds)
    if result.cancelled:
        sky_sdk.cancel(result.cancelled)
    return result
