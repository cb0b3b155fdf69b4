"""Health checks as background runs: at most one queued or running per dataset (a database
constraint), each under a lease its worker renews (core.leases), reaped by beat when the
worker died. What a check finds is the dataset's findings (datasets.services.health); the run
row says whether a check is pending, and why the last one failed."""

import logging

from django.db import IntegrityError, transaction

from core.leases import LeaseLost, LongJob, lease_take, lease_work, queued_until
from core.tasks import task_send, task_send_on_commit
from datasets.models import Dataset, HealthRun, HealthRunState
from datasets.services.health import health_run
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

logger = logging.getLogger(__name__)


def _send(run: HealthRun) -> None:
    task_send("datasets.health_run", run.dataset_id)


HEALTH_JOB = LongJob(
    label="health check",
    model=HealthRun,
    queued=HealthRunState.QUEUED,
    running=HealthRunState.RUNNING,
    failed=HealthRunState.FAILED,
    send=_send,
    started_field="started_at",
)


def health_run_latest(*, dataset: Dataset) -> HealthRun | None:
    """The dataset's newest check. A run is created only while none is active, so an active
    run is always the newest: this one row says whether a check is pending, and how the last
    one ended."""
    return HealthRun.objects.filter(dataset=dataset).first()


def health_status(run: HealthRun | None) -> dict | None:
    """{'state': 'queued'|'running', 'since': iso time} while `run` is pending, else None."""
    if run is None or run.is_final:
        return None
    return {"state": run.state, "since": (run.started_at or run.created_at).isoformat()}


def health_run_enqueue(*, dataset_id: int, requested_by=None, after_change: bool = False) -> bool:
    """Queue a check of the dataset, sent after commit. False when one is already queued or
    running; with `after_change` (the dataset just changed, say an import), a running one is
    asked to check again once it is done, since it may have read the dataset before."""
    try:
        with transaction.atomic():
            HealthRun.objects.create(
                dataset_id=dataset_id, requested_by=requested_by, lease_until=queued_until()
            )
    except IntegrityError:  # one_active_health_run_per_dataset
        if after_change and not HealthRun.objects.filter(
            dataset_id=dataset_id, state=HealthRunState.RUNNING
        ).update(rerun_requested=True):
            # It was queued (it will read the change), or it finished just now: queue one.
            return health_run_enqueue(dataset_id=dataset_id)
        return False
    task_send_on_commit("datasets.health_run", dataset_id)
    return True


@transaction.atomic
def health_run_request(*, access: WorkspaceAccess, dataset: Dataset) -> bool:
    """A person asks for a check. False when one is already queued or running."""
    access.require(Perm.WRITE)
    return health_run_enqueue(dataset_id=dataset.pk, requested_by=access.user)


def health_run_execute(*, dataset_id: int) -> HealthRun | None:
    """The task's body: take the dataset's queued run (none, or taken: nothing to do), check
    the dataset under its lease, and finish the run. A fault of the database connection runs
    the check again (it replaces the findings whole), or puts the run back in the queue at once
    (core.leases.lease_work): it is not failed for it."""
    pk = (
        HealthRun.objects.filter(dataset_id=dataset_id, state=HealthRunState.QUEUED)
        .values_list("pk", flat=True)
        .first()
    )
    lease = lease_take(HEALTH_JOB, pk) if pk is not None else None
    if lease is None:
        return None

    def check() -> None:
        dataset = Dataset.objects.filter(pk=dataset_id).first()
        if dataset is not None:
            health_run(dataset=dataset, lease=lease)
        with transaction.atomic():
            run = lease.fence()
            lease.finish(HealthRunState.SUCCEEDED, error="")
            if run.rerun_requested:
                health_run_enqueue(dataset_id=dataset_id)

    try:
        if not lease_work(lease, check):
            return None  # back in the queue, or the reaper's once its lease runs out
    except LeaseLost:
        logger.warning("health check %s: attempt %s lost its lease", pk, lease.attempt)
    except Exception as e:  # the check's own bugs, a soft time limit: the page says so
        logger.exception("health check %s failed", pk)
        lease.finish(HealthRunState.FAILED, error=f"The health check failed ({type(e).__name__}).")
    return HealthRun.objects.filter(pk=pk).first()
