"""A sweep's credits: what one trial is estimated to cost (training.estimator), what its trials
have spent and still may spend (the ledger, as a job's page shows it), and what is left.

A trial's job is started with a budget cap, the part of the sweep's budget set aside for it; a
capped job is never charged past its cap (training.metering.meter). While its job runs a trial
counts for its cap (or what it spent and holds, if more); once it ended, for what it spent. So
the sum the trials spend never exceeds the budget, to the micro-credit."""

from dataclasses import dataclass

from billing.ledger import credits_format, job_open_hold
from core.errors import ServiceError
from datasets.models import DatasetVersion
from training.estimator import Estimate, EstimateConfig, estimate, version_images
from training.metering import spent
from training.models import GpuType, TrainingJob
from training.services.arguments import TrainParams


def is_free(gpu: GpuType) -> bool:
    return not gpu.hourly_price


def trial_estimate(*, gpu: GpuType, version: DatasetVersion, params: TrainParams) -> Estimate:
    """The estimator's time and credits for one trial's job on `gpu`."""
    train, val = version_images(version)
    config = EstimateConfig(
        task=params.task,
        model_family=params.model_family,
        model_size=params.model_size,
        imgsz=params.imgsz,
        epochs=params.epochs,
        batch=params.batch,
        train_images=train,
        val_images=val,
    )
    try:
        return estimate(config, gpu)
    except Exception as e:  # no FLOPs figure (a measurement failed): nothing can be promised
        raise ServiceError(
            f"No estimate for {params.model_family}{params.model_size} right now ({e}); "
            "a sweep on a priced machine needs one."
        ) from None


def trial_credits(*, gpu: GpuType, version: DatasetVersion, params: TrainParams) -> Estimate | None:
    """None on a free machine (nothing to hold, so nothing to estimate)."""
    if is_free(gpu):
        return None
    return trial_estimate(gpu=gpu, version=version, params=params)


def job_spent_and_held(job: TrainingJob) -> tuple[int, int]:
    return spent(job), job_open_hold(job)


def trial_committed(trial) -> int:
    """Micro-credits of the budget the trial takes: its spending once its job ended; while it
    runs, its cap (what it may still come to), or what it spent and holds if more."""
    if trial.job is None:
        return 0
    used, held = job_spent_and_held(trial.job)
    if trial.job.is_final:
        return used + held
    return max(trial.budget_cap or 0, used + held)


@dataclass(frozen=True)
class SweepCredits:
    budget: int
    spent: int
    held: int
    committed: int

    @property
    def remaining(self) -> int:
        return self.budget - self.committed

    @property
    def spent_percent(self) -> int:
        return min(100, round(100 * self.spent / self.budget)) if self.budget else 0


def sweep_credits(sweep, trials) -> SweepCredits:
    """The page's figures: the ledger for trials still running, what was recorded at their
    end for the others (so a page of many trials reads the ledger for a few)."""
    spent_total = held_total = committed = 0
    for trial in trials:
        if trial.job is None:
            continue
        if not trial.is_open:
            spent_total += trial.cost
            committed += trial.cost
            continue
        used, held = job_spent_and_held(trial.job)
        spent_total += used
        held_total += held
        committed += max(trial.budget_cap or 0, used + held)
    return SweepCredits(
        budget=sweep.budget, spent=spent_total, held=held_total, committed=committed
    )


def trial_allotment(*, remaining: int, estimate: Estimate, trials_left: int) -> int:
    """The cap of a trial about to start: its fair share of what is left, at least the high
    end of its estimate, never more than is left."""
    share = remaining // max(trials_left, 1)
    return min(remaining, max(estimate.credits_high, share))


def credits_words(amount: int) -> str:
    return f"{credits_format(amount)} credits"
