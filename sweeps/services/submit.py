"""What a person does with a sweep: start one (everything that can be refused is refused here,
before a trial runs), stop it, resume it, make its best trial's model the project's, and keep its
arguments as a recipe of the workspace."""

import dataclasses

from django.db import transaction
from django.utils import timezone

from core.errors import ServiceError
from core.tasks import task_send_on_commit
from datasets.models import DatasetVersion, Task
from datasets.services.health import dataset_training_blocked_reason
from datasets.services.version_checks import version_train_check
from sweeps.models import Direction, Sweep, SweepState, SweepTrial, TrialState
from sweeps.services.budget import credits_words, is_free, trial_estimate
from sweeps.services.space import corner_points, costliest_params, space_clean, trial_params
from training.models import (
    JobState,
    TrainedModel,
    TrainingJob,
    WeightsSource,
    WorkspaceRecipe,
)
from training.selectors import MAIN_METRIC, PRIMARY_METRIC
from training.services.arguments import (
    TrainParams,
    architecture_family_size,
    train_params_validate,
)
from training.services.catalog import gpu_pick
from training.services.jobs import base_model_check, concurrency_check, job_stop
from training.services.models import model_promote
from training.services.recipes import workspace_recipe_create
from workspaces.models import Project
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

MAX_TRIALS = 200
FIXED_KEYS = ("epochs", "imgsz", "batch", "patience", "optimizer", "seed", "extra_args")
# Losses: lower is better. Only where every run of the task reports it.
LOSS_METRICS = {
    Task.DETECT: ("val/box_loss", "validation box loss"),
    Task.OBB: ("val/box_loss", "validation box loss"),
    Task.SEGMENT: ("val/seg_loss", "validation mask loss"),
    Task.POSE: ("val/pose_loss", "validation pose loss"),
}


def metric_choices(task: str) -> list[tuple[str, str, str]]:
    """(key, label, direction) a sweep of `task` can optimise: the task's main metric first
    (the one its runs are compared by), then its first-reported one, then its loss."""
    rows = []
    for table in (MAIN_METRIC, PRIMARY_METRIC):
        key, label = table[task]
        if key not in {r[0] for r in rows}:
            rows.append((key, label, Direction.MAXIMIZE))
    if task in LOSS_METRICS:
        key, label = LOSS_METRICS[task]
        rows.append((key, label, Direction.MINIMIZE))
    return rows


def _in_workspace(access: WorkspaceAccess, obj, what: str) -> None:
    if not access.owns(obj):
        raise ServiceError(f"This {what} belongs to another workspace.")


def sweep_base_params(sweep: Sweep) -> TrainParams:
    """Every trial's parameters before its searched values."""
    return TrainParams(
        task=sweep.task,
        model_family=sweep.model_family,
        model_size=sweep.model_size,
        weights=sweep.weights,
        **{k: v for k, v in sweep.fixed.items() if k in FIXED_KEYS},
    )


@transaction.atomic
def sweep_submit(
    *,
    access: WorkspaceAccess,
    project: Project,
    version: DatasetVersion,
    gpu_type_id: int | None,
    base: TrainParams,
    space: dict,
    metric: str,
    n_trials: int,
    budget: int,
    parallel: int = 2,
    seed: int | None = None,
    prune: bool = True,
    prune_startup_trials: int = 2,
    prune_warmup_epochs: int = 1,
    name: str = "",
    base_model: TrainedModel | None = None,
) -> Sweep:
    """Check the sweep as a whole (its space, every kind of trial it can start, one trial's
    cost against the budget, the plan's jobs at a time), then save it; its first trials start
    in the worker that advances it."""
    access.require(Perm.TRAIN)
    _in_workspace(access, project, "project")
    _in_workspace(access, version.dataset, "dataset")
    gpu = gpu_pick(workspace=access.workspace, gpu_id=gpu_type_id)
    task = version.dataset.task
    if base.task != task:
        raise ServiceError(
            f"“{version.dataset.name}” is a {version.dataset.get_task_display().lower()} "
            f"dataset; it cannot train a {Task(base.task).label.lower()} model."
        )
    directions = {key: direction for key, _, direction in metric_choices(task)}
    if metric not in directions:
        raise ServiceError(
            f"{metric or 'That'} is not a metric a {Task(task).label.lower()} sweep can "
            f"optimise; pick one of {', '.join(directions)}."
        )
    if not isinstance(n_trials, int) or not 1 <= n_trials <= MAX_TRIALS:
        raise ServiceError(f"A sweep runs 1 to {MAX_TRIALS} trials.")
    if not isinstance(parallel, int) or parallel < 1:
        raise ServiceError("Run at least one trial at a time.")
    if not isinstance(budget, int) or budget < 0:
        raise ServiceError("The budget is a number of credits, 0 or more.")
    concurrency_check(access.workspace)  # the plan's jobs at a time: room for one trial
    blocked = dataset_training_blocked_reason(dataset=version.dataset)
    if blocked:
        raise ServiceError(blocked)
    space = space_clean(space)
    base, base_model = _fine_tune_checked(access, base, base_model, space)
    both = sorted(set(space) & set(base.extra_args))
    if both:
        raise ServiceError(
            f"{', '.join(both)} {'is' if len(both) == 1 else 'are'} searched; leave "
            f"{'it' if len(both) == 1 else 'them'} out of the fixed arguments."
        )
    train_images = version_train_check(version, task=task, train_anyway=True).train_images
    base = train_params_validate(base, train_images=train_images)
    for point in corner_points(space):
        train_params_validate(trial_params(base, point), train_images=train_images)
    if not is_free(gpu):
        costliest = costliest_params(base, space)
        cost = trial_estimate(gpu=gpu, version=version, params=costliest)
        if budget < cost.credits:
            raise ServiceError(
                f"The budget, {credits_words(budget)}, is less than one trial may cost: the "
                f"most expensive point of this space ({costliest.model_family}"
                f"{costliest.model_size} at {costliest.imgsz} px for {costliest.epochs} "
                f"epoch{'s' if costliest.epochs != 1 else ''} on {gpu.name}) is estimated at "
                f"{credits_words(cost.credits)}."
            )
    fixed = {k: getattr(base, k) for k in FIXED_KEYS}
    sweep = Sweep.objects.create(
        workspace=access.workspace,
        project=project,
        dataset_version=version,
        gpu_type=gpu,
        created_by=access.user,
        name=name.strip()[:100],
        task=task,
        model_family=base.model_family,
        model_size=base.model_size,
        weights=base.weights,
        base_model=base_model,
        fixed=fixed,
        space=space,
        metric=metric,
        direction=directions[metric],
        n_trials=n_trials,
        parallel=min(parallel, n_trials),
        budget=budget,
        seed=0,
        prune=prune,
        prune_startup_trials=prune_startup_trials,
        prune_warmup_epochs=prune_warmup_epochs,
    )
    # Blank: the sweep's own id, so two sweeps explore differently and each can be re-run.
    sweep.seed = sweep.pk if seed is None else seed
    sweep.save(update_fields=["seed"])
    task_send_on_commit("sweeps.advance", sweep.pk)
    return sweep


def _fine_tune_checked(
    access: WorkspaceAccess, base: TrainParams, base_model: TrainedModel | None, space: dict
) -> tuple[TrainParams, TrainedModel | None]:
    """Every trial fine-tunes `base_model` when the weights are "model": checked now as each
    trial's job_submit will check it (a model of this workspace, loaded, of the task), with the
    model's own family and size, as a job fine-tuning it takes them."""
    if base.weights != WeightsSource.MODEL:
        return base, None
    base_model_check(access, base_model, task=base.task)
    if "model_size" in space:
        raise ServiceError(
            "A fine-tune keeps its model's size: search the other arguments, not model_size."
        )
    family_size = architecture_family_size(base_model.architecture)
    if family_size:
        base = dataclasses.replace(base, model_family=family_size[0], model_size=family_size[1])
    return base, base_model


def _locked(sweep: Sweep) -> Sweep:
    return Sweep.objects.select_for_update().get(pk=sweep.pk)


@transaction.atomic
def sweep_stop(*, access: WorkspaceAccess, sweep: Sweep) -> Sweep:
    """No new trial; the running ones are stopped as a person stops a job (they keep their
    checkpoints and models). Their results are recorded as their jobs end."""
    access.require(Perm.TRAIN)
    _in_workspace(access, sweep, "sweep")
    sweep = _locked(sweep)
    if sweep.state != SweepState.RUNNING:
        raise ServiceError(f"{sweep.title} is {sweep.get_state_display().lower()} already.")
    sweep.state = SweepState.STOPPED
    sweep.notice = "Stopped by a person; Resume asks for more trials."
    sweep.save(update_fields=["state", "notice", "updated_at"])
    jobs = TrainingJob.objects.filter(
        sweep_trial__sweep=sweep, sweep_trial__ended_at__isnull=True
    ).order_by("pk")
    for job in jobs:
        if not job.is_final and job.state != JobState.STOPPING:
            job_stop(access=access, job=job)
    task_send_on_commit("sweeps.advance", sweep.pk)
    return sweep


@transaction.atomic
def sweep_resume(*, access: WorkspaceAccess, sweep: Sweep) -> Sweep:
    """Ask for trials again, where the sweep left off."""
    access.require(Perm.TRAIN)
    _in_workspace(access, sweep, "sweep")
    sweep = _locked(sweep)
    if sweep.state != SweepState.STOPPED:
        raise ServiceError(f"Only a stopped sweep resumes; {sweep.title} is {sweep.state}.")
    concurrency_check(access.workspace)
    sweep.state = SweepState.RUNNING
    sweep.notice = ""
    sweep.finished_at = None
    sweep.save(update_fields=["state", "notice", "finished_at", "updated_at"])
    task_send_on_commit("sweeps.advance", sweep.pk)
    return sweep


def sweep_best_trial(sweep: Sweep, trials=None) -> SweepTrial | None:
    """The complete trial with the best value (the earliest of equals)."""
    rows = trials if trials is not None else list(sweep.trials.all())
    done = [t for t in rows if t.state == TrialState.COMPLETE and t.value is not None]
    if not done:
        return None
    sign = 1 if sweep.direction == Direction.MAXIMIZE else -1
    return max(done, key=lambda t: (sign * t.value, -t.number))


@transaction.atomic
def sweep_promote_best(*, access: WorkspaceAccess, sweep: Sweep) -> TrainedModel:
    """The best trial's model becomes the project's current model."""
    access.require(Perm.TRAIN)
    _in_workspace(access, sweep, "sweep")
    best = sweep_best_trial(sweep)
    if best is None:
        raise ServiceError("No trial has finished with a result yet.")
    model = TrainedModel.objects.filter(job_id=best.job_id).first()
    if model is None:
        raise ServiceError(f"Trial {best.number}'s job made no model.")
    return model_promote(access=access, model=model)


@transaction.atomic
def sweep_recipe_save(*, access: WorkspaceAccess, sweep: Sweep, name: str) -> WorkspaceRecipe:
    """The best trial's arguments (the sweep's fixed ones with its searched values) become a
    recipe of the workspace, which the training form offers. A searched model size is the
    model's, not a recipe's: the description says which it was."""
    access.require(Perm.TRAIN)
    _in_workspace(access, sweep, "sweep")
    best = sweep_best_trial(sweep)
    if best is None:
        raise ServiceError("No trial has finished with a result yet.")
    params = trial_params(sweep_base_params(sweep), best.params)
    train_images = version_train_check(
        sweep.dataset_version, task=sweep.task, train_anyway=True
    ).train_images
    labels = {key: label for key, label, _ in metric_choices(sweep.task)}
    description = (
        f"Trial {best.number} of {sweep.title}: {labels.get(sweep.metric, sweep.metric)} "
        f"{best.value:.4g} with {params.model_family}{params.model_size} on "
        f"{sweep.dataset_version.dataset.name} v{sweep.dataset_version.number}."
    )
    return workspace_recipe_create(
        access=access,
        name=name,
        params=params,
        train_images=train_images,
        description=description,
    )


def sweep_finish(sweep: Sweep, reason: str) -> None:
    """A (locked) running sweep that will start no other trial."""
    sweep.state = SweepState.FINISHED
    sweep.notice = reason
    sweep.finished_at = timezone.now()
    sweep.save(update_fields=["state", "notice", "finished_at", "updated_at"])
