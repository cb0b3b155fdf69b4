"""JSON API for sweeps: list a workspace's, read one (its trials, the best, credits spent
against the budget), start one, stop and resume it. Scoped as the training API is: reading
needs the read scope, the rest the train scope; another workspace's sweep is not found."""

from datetime import datetime

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status
from ninja.pagination import paginate

from datasets.models import Task
from sweeps import selectors
from sweeps.models import Sweep
from sweeps.services.budget import sweep_credits
from sweeps.services.submit import (
    MAX_TRIALS,
    metric_choices,
    sweep_best_trial,
    sweep_resume,
    sweep_stop,
    sweep_submit,
)
from training.api import project_train_access, run_inputs
from training.models import WeightsSource
from workspaces.api import api_access
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess, project_get, row_for_caller

router = Router(tags=["sweeps"])


class SweepIn(Schema):
    project_id: int
    dataset_version_id: int
    gpu_type_id: int | None = Field(None, description="A machine from the catalog, per trial.")
    name: str = Field("", max_length=100)
    model_family: str = Field("yolo26", description="yolo26, yolo11 or yolov8.")
    model_size: str = Field("n", description="n, s, m, l or x (unless searched).")
    weights: str = Field(WeightsSource.SCRATCH, description="scratch, pretrained or model.")
    base_model_id: int | None = Field(
        None, description="The model every trial fine-tunes (weights=model)."
    )
    epochs: int = 30
    imgsz: int = 640
    batch: int = Field(-1, description="-1: automatic.")
    patience: int = 100
    optimizer: str = "auto"
    train_seed: int = Field(0, description="Every trial's training seed.")
    extra_args: dict | str = Field(
        default_factory=dict,
        description="Every trial's other Ultralytics arguments (not searched): an object, or "
        "YAML text.",
    )
    space: dict = Field(
        description="Argument → {low, high, log} (a range) or a list of values, e.g. "
        '{"lr0": {"low": 0.0001, "high": 0.1, "log": true}, "imgsz": [320, 640]}.'
    )
    metric: str | None = Field(None, description="Empty: the task's main metric.")
    n_trials: int = Field(8, ge=1, le=MAX_TRIALS)
    parallel: int = Field(2, ge=1, le=MAX_TRIALS, description="Trials at once, at most.")
    budget: int = Field(ge=0, description="Micro-credits all trials together may spend.")
    seed: int | None = Field(None, ge=0, description="The sampler's seed; empty: the sweep's id.")
    prune: bool = True
    prune_startup_trials: int = Field(2, ge=1, le=50)
    prune_warmup_epochs: int = Field(1, ge=0, le=1000)


class TrialOut(Schema):
    number: int
    params: dict
    state: str
    value: float | None
    pruned_at_epoch: int | None
    job_id: int | None
    estimate: int = Field(description="Micro-credits, as estimated before it started.")
    budget_cap: int | None = Field(description="Micro-credits of the budget set aside for it.")
    cost: int = Field(description="Micro-credits spent, once its job ended.")
    error: str
    created_at: datetime
    ended_at: datetime | None


class CreditsOut(Schema):
    budget: int = Field(description="Micro-credits.")
    spent: int
    held: int = Field(description="Held by running trials.")
    remaining: int = Field(description="Not yet set aside for a trial.")


class SweepSummaryOut(Schema):
    id: int
    title: str
    project_id: int
    dataset_version_id: int
    state: str
    metric: str
    direction: str
    n_trials: int
    trials_started: int
    budget: int = Field(description="Micro-credits.")
    created_at: datetime
    finished_at: datetime | None


class SweepOut(SweepSummaryOut):
    workspace: str
    gpu_type_id: int
    task: str
    model_family: str
    model_size: str
    weights: str
    base_model_id: int | None
    fixed: dict
    space: dict
    parallel: int
    seed: int
    prune: bool
    notice: str
    trials: list[TrialOut]
    best_trial: int | None = Field(description="The number of the best complete trial.")
    best_value: float | None
    best_model_id: int | None = Field(description="The best trial's trained model, if any.")
    credits: CreditsOut


def _out(access: WorkspaceAccess, sweep: Sweep) -> dict:
    trials = selectors.sweep_trials(sweep=sweep)
    best = sweep_best_trial(sweep, trials)
    credits = sweep_credits(sweep, trials)
    best_model = getattr(best.job, "model", None) if best is not None and best.job else None
    return {
        **{f: getattr(sweep, f) for f in SweepOut.model_fields if hasattr(sweep, f)},
        "workspace": access.workspace.slug,
        "trials_started": len(trials),
        "trials": trials,
        "best_trial": best.number if best else None,
        "best_value": best.value if best else None,
        "best_model_id": best_model.pk if best_model else None,
        "credits": {
            "budget": credits.budget,
            "spent": credits.spent,
            "held": credits.held,
            "remaining": max(credits.remaining, 0),
        },
    }


def _sweep_for_caller(request: HttpRequest, sweep_id: int) -> tuple[WorkspaceAccess, Sweep]:
    return row_for_caller(
        Sweep.objects.select_related(
            "project", "dataset_version__dataset", "gpu_type", "created_by", "base_model"
        ),
        pk=sweep_id,
        auth=request.auth,
        user=request.user,
        not_found="No such sweep.",
    )


@router.get("/workspaces/{slug}/sweeps", response=list[SweepSummaryOut])
@paginate
def sweep_list_api(request: HttpRequest, slug: str, project_id: int | None = None):
    """The workspace's sweeps, newest first; `project_id`: one project's."""
    access = api_access(request, slug, Perm.READ)
    project = None
    if project_id is not None:
        project = project_get(workspace=access.workspace, pk=project_id)
    return selectors.sweep_list(workspace=access.workspace, project=project)


@router.post("/sweeps", response={201: SweepOut})
def sweep_create_api(request: HttpRequest, payload: SweepIn):
    """Start a sweep; 400 with the reason when it cannot run (nothing is started)."""
    access = project_train_access(request, payload.project_id)
    project = project_get(workspace=access.workspace, pk=payload.project_id)
    version, base_model, base = run_inputs(access, payload, task=None, seed=payload.train_seed)
    task = base.task
    sweep = sweep_submit(
        access=access,
        project=project,
        version=version,
        gpu_type_id=payload.gpu_type_id,
        base=base,
        space=payload.space,
        metric=payload.metric or metric_choices(Task(task))[0][0],
        n_trials=payload.n_trials,
        parallel=payload.parallel,
        budget=payload.budget,
        seed=payload.seed,
        prune=payload.prune,
        prune_startup_trials=payload.prune_startup_trials,
        prune_warmup_epochs=payload.prune_warmup_epochs,
        name=payload.name,
        base_model=base_model,
    )
    sweep = selectors.sweep_get(workspace=access.workspace, pk=sweep.pk)
    return Status(201, _out(access, sweep))


@router.get("/sweeps/{sweep_id}", response=SweepOut)
def sweep_get_api(request: HttpRequest, sweep_id: int):
    """A sweep: its trials (arguments, state, value, credits), the best, spent vs budget."""
    access, sweep = _sweep_for_caller(request, sweep_id)
    access.require(Perm.READ)
    return _out(access, sweep)


@router.post("/sweeps/{sweep_id}/stop", response=SweepOut)
def sweep_stop_api(request: HttpRequest, sweep_id: int):
    """No new trial; the running ones stop as a person stops a job (keeping their models)."""
    access, sweep = _sweep_for_caller(request, sweep_id)
    sweep_stop(access=access, sweep=sweep)
    return _out(access, selectors.sweep_get(workspace=access.workspace, pk=sweep.pk))


@router.post("/sweeps/{sweep_id}/resume", response=SweepOut)
def sweep_resume_api(request: HttpRequest, sweep_id: int):
    """Ask for trials again where a stopped sweep left off."""
    access, sweep = _sweep_for_caller(request, sweep_id)
    sweep_resume(access=access, sweep=sweep)
    return _out(access, selectors.sweep_get(workspace=access.workspace, pk=sweep.pk))
