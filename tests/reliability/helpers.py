"""What the reliability tests share about a training run: waiting for it mid-run, and that it
was billed once."""

from decimal import Decimal

from tests.training.helpers import job_reload, wait_for
from training.metering import spent
from training.models import JobState, TrainingJob

PRICE = "3.600"  # an hour's price of the GPU the tests bill: 1,000 micro-credits a second
PER_SECOND = 1000


def assert_billed_once(job: TrainingJob) -> None:
    """The seconds charged are the attempts' lifetimes, each charged once."""
    rows = list(job.attempt_rows.all())
    lifetimes = sum((r.ended_at - r.started_at).total_seconds() for r in rows)
    billed = sum(r.billed_seconds for r in rows)
    assert abs(billed - lifetimes) < 1.0, (billed, lifetimes)
    charged = sum(int(Decimal(str(r.billed_seconds)) * PER_SECOND) for r in rows)
    assert abs(spent(job) - charged) <= len(rows), (spent(job), charged)


def mid_run(job: TrainingJob, epoch: int = 2) -> TrainingJob:
    return wait_for(
        lambda: (j := job_reload(job)).state == JobState.RUNNING and j.epochs_done >= epoch and j,
        timeout=240,
        what=f"epoch {epoch}",
    )
