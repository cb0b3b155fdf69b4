"""Advancing a sweep, under its row's lock, as often as beat or a worker asks (it is idempotent):

1. trials whose job ended get their result (the job's final metric, else its best epoch) and
   cost;
2. running trials report their epochs to the pruner, which may stop them (as a person would);
3. new trials start while trials remain, the sweep and the plan allow more at a time, and what
   is left of the budget holds the next trial's estimate: never one it cannot hold;
4. the sweep ends when every trial has ended, or the budget can hold no other."""

import logging
import math

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from billing.ledger import InsufficientCredits
from core.errors import ServiceError
from sweeps.models import Direction, Sweep, SweepState, SweepTrial, TrialState
from sweeps.services.budget import (
    credits_words,
    job_spent_and_held,
    trial_allotment,
    trial_committed,
    trial_credits,
)
from sweeps.services.optimizer import Observed, propose, prune_decision, tpe_startup_trials
from sweeps.services.space import space_dimensions, trial_params
from sweeps.services.submit import sweep_base_params, sweep_finish
from training.models import EpochMetric, JobState, TrainingJob
from training.services.jobs import concurrency_check, job_stop, job_submit
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess, workspace_access_for_user

logger = logging.getLogger(__name__)


def _number(value) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _best(values, direction: str) -> float | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return max(values) if direction == Direction.MAXIMIZE else min(values)


def observed(trials: list[SweepTrial]) -> list[Observed]:
    return [
        Observed(
            number=t.number,
            params=t.params,
            state=t.state,
            value=t.value,
            intermediate={int(k): v for k, v in t.intermediate.items()},
        )
        for t in trials
    ]


def _epoch_values(job: TrainingJob, metric: str) -> dict[str, float]:
    rows = EpochMetric.objects.filter(job=job).order_by("epoch").values_list("epoch", "values")
    found = {}
    for epoch, values in rows:
        value = _number((values or {}).get(metric))
        if value is not None:
            found[str(epoch)] = value
    return found


def _trial_end(sweep: Sweep, trial: SweepTrial, job: TrainingJob) -> None:
    """Record how a trial's job ended (a pruned trial stays pruned)."""
    best = _best(trial.intermediate.values(), sweep.direction)
    if trial.state == TrialState.RUNNING:
        if job.state == JobState.SUCCEEDED:
            final = _number((job.final_metrics or {}).get(sweep.metric))
            trial.value = final if final is not None else best
            trial.state = TrialState.COMPLETE if trial.value is not None else TrialState.FAILED
            if trial.value is None:
                trial.error = f"The run reported no {sweep.metric}."
        elif job.state == JobState.STOPPED:
            trial.state, trial.value = TrialState.STOPPED, best
            trial.error = job.error
        else:
            trial.state, trial.value = TrialState.FAILED, None
            trial.error = job.error or f"Its job was {job.get_state_display().lower()}."
    trial.cost = job_spent_and_held(job)[0]
    trial.ended_at = job.finished_at or timezone.now()


def _record(sweep: Sweep, trials: list[SweepTrial], access: WorkspaceAccess | None) -> None:
    """Steps 1 and 2: ended trials' results, running trials' epochs and the pruner's word."""
    dimensions = space_dimensions(sweep.space)
    for trial in trials:
        if not trial.is_open:
            continue
        job = trial.job
        if trial.state != TrialState.PRUNED:  # the pruner saw what it was pruned for
            trial.intermediate = _epoch_values(job, sweep.metric)
        if job.is_final:
            _trial_end(sweep, trial, job)
        elif (
            sweep.prune
            and sweep.state == SweepState.RUNNING
            and trial.state == TrialState.RUNNING
            and trial.intermediate
            and access is not None
            and prune_decision(
                dimensions=dimensions,
                observed=observed(trials),
                direction=sweep.direction,
                running=observed([trial])[0],
                startup_trials=sweep.prune_startup_trials,
                warmup_epochs=sweep.prune_warmup_epochs,
            )
        ):
            epoch = max(int(k) for k in trial.intermediate)
            trial.state = TrialState.PRUNED
            trial.pruned_at_epoch = epoch
            trial.value = _best(trial.intermediate.values(), sweep.direction)
            if job.state != JobState.STOPPING:
                try:
                    job_stop(access=access, job=job)
                except ServiceError as e:  # it ended meanwhile: recorded next time
                    logger.info("pruned trial %s of sweep %s: %s", trial.number, sweep.pk, e)
        trial.save(
            update_fields=[
                "intermediate",
                "state",
                "value",
                "pruned_at_epoch",
                "cost",
                "error",
                "ended_at",
            ]
        )


def _acting_access(sweep: Sweep) -> tuple[WorkspaceAccess | None, str]:
    """The person the sweep starts and stops jobs for (its creator, with their role now), or
    why there is none."""
    if sweep.created_by is None:
        return None, "The person who started this sweep no longer has an account."
    try:
        access = workspace_access_for_user(user=sweep.created_by, slug=sweep.workspace.slug)
    except Http404:
        return None, f"{sweep.created_by.email} is no longer a member of this workspace."
    try:
        access.require(Perm.TRAIN)
    except PermissionDenied as e:
        return None, str(e)
    return access, ""


def _has_room(access: WorkspaceAccess) -> str:
    """ "" when the plan lets another job start now, else its sentence."""
    try:
        concurrency_check(access.workspace)
    except ServiceError as e:
        return str(e)
    return ""


def _start_trials(sweep: Sweep, trials: list[SweepTrial], access: WorkspaceAccess) -> None:
    """Step 3 and 4."""
    dimensions = space_dimensions(sweep.space)
    base = sweep_base_params(sweep)
    version, gpu = sweep.dataset_version, sweep.gpu_type
    committed = sum(trial_committed(t) for t in trials)
    notice = ""
    while len(trials) < sweep.n_trials:
        running = sum(1 for t in trials if t.is_open)
        if running >= sweep.parallel:
            break
        full = _has_room(access)
        if full:
            notice = f"Waiting for room: {full}"
            break
        number = len(trials) + 1
        point = propose(
            dimensions=dimensions,
            observed=observed(trials),
            direction=sweep.direction,
            seed=sweep.seed,
            number=number,
            startup_trials=tpe_startup_trials(sweep.n_trials),
        )
        params = trial_params(base, point)
        remaining = sweep.budget - committed
        try:
            cost = trial_credits(gpu=gpu, version=version, params=params)
        except ServiceError as e:
            notice = str(e)
            break
        if cost is not None and cost.credits > remaining:
            words = (
                f"what is left of the budget, {credits_words(max(remaining, 0))}, cannot hold "
                f"trial {number}: it is estimated at {credits_words(cost.credits)}."
            )
            if running:
                notice = f"Waiting for running trials to end: {words}"
            else:
                sweep_finish(sweep, f"Ended after {len(trials)} trials: {words}")
                return
            break
        cap = (
            None
            if cost is None
            else trial_allotment(
                remaining=remaining, estimate=cost, trials_left=sweep.n_trials - len(trials)
            )
        )
        trial = SweepTrial(
            sweep=sweep,
            number=number,
            params=point,
            estimate=cost.credits if cost else 0,
            budget_cap=cap,
        )
        try:
            trial.job = job_submit(
                access=access,
                project=sweep.project,
                version=version,
                gpu_type_id=gpu.pk,
                params=params,
                base_model=sweep.base_model,
                name=f"{sweep.title} · trial {number}",
                budget_cap=cap,
                train_anyway=True,  # the version's warnings were shown when the sweep began
            )
        except InsufficientCredits as e:
            notice = f"Waiting for credits: {e}"
            break
        except ServiceError as e:
            full = _has_room(access)
            if full:  # another job took the room meanwhile
                notice = f"Waiting for room: {full}"
                break
            trial.state, trial.error, trial.ended_at = TrialState.FAILED, str(e), timezone.now()
        trial.save()
        trials.append(trial)
        committed += trial_committed(trial)
    if len(trials) >= sweep.n_trials and not any(t.is_open for t in trials):
        sweep_finish(sweep, f"All {sweep.n_trials} trials ended.")
        return
    if notice != sweep.notice:
        sweep.notice = notice
        sweep.save(update_fields=["notice", "updated_at"])


def _sweep_locked(sweep_id: int) -> tuple[Sweep | None, list[SweepTrial]]:
    """In a transaction: the sweep, locked (one advance at a time), and its trials."""
    sweep = (
        Sweep.objects.select_for_update(of=("self",))
        .select_related(
            "workspace", "created_by", "dataset_version__dataset", "gpu_type", "base_model"
        )
        .filter(pk=sweep_id)
        .first()
    )
    if sweep is None:
        return None, []
    return sweep, list(
        SweepTrial.objects.filter(sweep=sweep).select_related("job").order_by("number")
    )


def sweep_advance(sweep_id: int) -> Sweep | None:
    """One step of the sweep, whoever asks; None when it is gone.

    Two transactions, each under the sweep's lock: what ended is recorded and the trials the
    pruner gives up are stopped, then new trials are started. A stop locks its job's row, and a
    running job's metering locks that row after its workspace's (training.metering); a submit
    in the same transaction would then wait on the workspace while holding the job: PostgreSQL
    found that deadlock in the real sweep test. Committed first, the stops hold nothing."""
    with transaction.atomic():
        sweep, trials = _sweep_locked(sweep_id)
        if sweep is None:
            return None
        if sweep.state != SweepState.RUNNING and not any(t.is_open for t in trials):
            return sweep
        access, why = _acting_access(sweep)
        _record(sweep, trials, access)
        if sweep.state == SweepState.RUNNING and access is None:
            sweep_finish(sweep, f"Ended: {why}")
    with transaction.atomic():
        sweep, trials = _sweep_locked(sweep_id)
        if sweep is None:
            return None
        if sweep.state == SweepState.RUNNING:
            access, why = _acting_access(sweep)
            if access is None:
                sweep_finish(sweep, f"Ended: {why}")
            else:
                _start_trials(sweep, trials, access)
        sweep.advanced_at = timezone.now()
        sweep.save(update_fields=["advanced_at"])
    return sweep
