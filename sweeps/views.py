"""Sweep pages: starting one from a project, a project's sweeps, and a sweep's live trials with
its parameters against the metric, its credits and the best trial to promote."""

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from billing.ledger import credits_format
from core.errors import ServiceError
from core.http import HtmxHttpRequest, page_of
from core.money import to_micro
from sweeps import selectors
from sweeps.forms import SweepForm
from sweeps.models import Sweep, SweepState, TrialState
from sweeps.services.budget import job_spent_and_held, sweep_credits
from sweeps.services.space import space_dimensions
from sweeps.services.submit import (
    metric_choices,
    sweep_best_trial,
    sweep_promote_best,
    sweep_recipe_save,
    sweep_resume,
    sweep_stop,
    sweep_submit,
)
from training import selectors as training_selectors
from training.services.catalog import gpu_choices
from workspaces import selectors as workspace_selectors
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

POLL_SECONDS = 3


@workspace_view(Perm.TRAIN)
@require_http_methods(["GET", "POST"])
def sweep_create(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    project = workspace_selectors.project_get(workspace=access.workspace, pk=pk)
    versions = training_selectors.trainable_versions(workspace=access.workspace)
    asked = request.POST.get("dataset_version", "")
    if asked.isdigit():  # another workspace's version, or none: not found, as a page would be
        training_selectors.trainable_version_get(workspace=access.workspace, pk=int(asked))
    machines = gpu_choices(workspace=access.workspace)
    # Only models a worker has loaded can be fine-tuned from (as on the training form).
    models = list(training_selectors.model_list(workspace=access.workspace).usable())
    form = SweepForm(request.POST or None, versions=versions, models=models)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        version = data["dataset_version"]
        metric = data["metric"] or metric_choices(version.dataset.task)[0][0]
        try:
            sweep = sweep_submit(
                access=access,
                project=project,
                version=version,
                gpu_type_id=data["gpu_type"],
                base=form.base_params(),
                space=data["space"],
                metric=metric,
                n_trials=data["n_trials"],
                parallel=data["parallel"],
                budget=to_micro(data["budget"]),
                seed=data["seed"],
                prune=data["prune"],
                prune_startup_trials=data["prune_startup_trials"],
                prune_warmup_epochs=data["prune_warmup_epochs"],
                name=data["name"],
                base_model=data["base_model"],
            )
        except ServiceError as e:
            form.add_error(None, str(e))
        else:
            messages.success(request, f"{sweep.title} started: {sweep.n_trials} trials.")
            return redirect("sweep_detail", ws_slug=access.workspace.slug, pk=sweep.pk)
    picked = (
        form.data.get("gpu_type", "")
        if form.is_bound
        else next((str(c.gpu.pk) for c in machines if c.available), "")
    )
    return render(
        request,
        "sweeps/sweep_form.html",
        {
            "access": access,
            "project": project,
            "form": form,
            "machines": machines,
            "picked_gpu": picked,
            "has_versions": versions.exists(),
        },
        status=400 if form.is_bound else 200,
    )


@workspace_view(Perm.READ)
@require_GET
def sweep_list(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    project = workspace_selectors.project_get(workspace=access.workspace, pk=pk)
    page = page_of(request, selectors.sweep_list(workspace=access.workspace, project=project))
    return render(
        request, "sweeps/sweep_list.html", {"access": access, "project": project, "page": page}
    )


def _shown(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _trial_rows(sweep: Sweep, trials, best) -> list[dict]:
    rows = []
    for trial in trials:
        job = trial.job
        if job is not None and trial.is_open:
            cost = job_spent_and_held(job)[0]
        else:
            cost = trial.cost
        model = getattr(job, "model", None) if job is not None else None
        rows.append(
            {
                "trial": trial,
                "params": [(k, _shown(v)) for k, v in trial.params.items()],
                "cost": credits_format(cost) if job is not None and job.gpu_type_id else None,
                "free": job is not None and not sweep.gpu_type.hourly_price,
                "is_best": best is not None and trial.pk == best.pk,
                "model": model,
                "epochs": f"{job.epochs_done} / {job.epochs}" if job is not None else "",
            }
        )
    return rows


def _chart_data(sweep: Sweep, trials, dims, metric_label: str) -> dict:
    return {
        "metric": metric_label,
        "direction": sweep.direction,
        "dims": [
            {
                "name": d.name,
                "log": d.log,
                "choices": [str(c) for c in d.choices] if d.choices else None,
                "low": d.low,
                "high": d.high,
            }
            for d in dims
        ],
        "trials": [
            {
                "number": t.number,
                "state": t.state,
                "value": t.value,
                "params": {
                    k: (str(v) if any(d.name == k and d.choices for d in dims) else v)
                    for k, v in t.params.items()
                },
            }
            for t in trials
        ],
    }


def _detail_context(access: WorkspaceAccess, sweep: Sweep) -> dict:
    trials = selectors.sweep_trials(sweep=sweep)
    best = sweep_best_trial(sweep, trials)
    dims = space_dimensions(sweep.space)
    labels = {key: label for key, label, _ in metric_choices(sweep.task)}
    metric_label = labels.get(sweep.metric, sweep.metric)
    best_model = getattr(best.job, "model", None) if best and best.job else None
    credits = sweep_credits(sweep, trials)
    return {
        "access": access,
        "sweep": sweep,
        "rows": _trial_rows(sweep, trials, best),
        "best": best,
        "best_model": best_model,
        "credits": credits,
        "credits_text": {
            "spent": credits_format(credits.spent),
            "held": credits_format(credits.held),
            "budget": credits_format(credits.budget),
            "remaining": credits_format(max(credits.remaining, 0)),
        },
        "free": not sweep.gpu_type.hourly_price,
        "dims": dims,
        "metric_label": metric_label,
        "chart": _chart_data(sweep, trials, dims, metric_label),
        "live": sweep.state == SweepState.RUNNING or any(t.is_open for t in trials),
        "poll_seconds": POLL_SECONDS,
        "counts": {
            state.label: sum(1 for t in trials if t.state == state)
            for state in TrialState
            if any(t.state == state for t in trials)
        },
    }


@workspace_view(Perm.READ)
@require_GET
def sweep_detail(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    sweep = selectors.sweep_get(workspace=access.workspace, pk=pk)
    template = "sweeps/sweep_detail.html"
    if request.htmx and request.htmx.target == "sweep-live":
        template += "#live"
    return render(request, template, _detail_context(access, sweep))


def _back(access: WorkspaceAccess, sweep: Sweep) -> HttpResponse:
    return redirect("sweep_detail", ws_slug=access.workspace.slug, pk=sweep.pk)


@workspace_view(Perm.TRAIN)
@require_POST
def sweep_stop_view(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    sweep = selectors.sweep_get(workspace=access.workspace, pk=pk)
    try:
        sweep_stop(access=access, sweep=sweep)
    except ServiceError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, f"{sweep.title} stopped; its running trials are stopping.")
    return _back(access, sweep)


@workspace_view(Perm.TRAIN)
@require_POST
def sweep_resume_view(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    sweep = selectors.sweep_get(workspace=access.workspace, pk=pk)
    try:
        sweep_resume(access=access, sweep=sweep)
    except ServiceError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, f"{sweep.title} resumed.")
    return _back(access, sweep)


@workspace_view(Perm.TRAIN)
@require_POST
def sweep_promote_view(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """The best trial's model becomes the project's current model."""
    sweep = selectors.sweep_get(workspace=access.workspace, pk=pk)
    try:
        model = sweep_promote_best(access=access, sweep=sweep)
    except ServiceError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, f"{model.name} is now the current model of {sweep.project}.")
    return _back(access, sweep)


@workspace_view(Perm.TRAIN)
@require_POST
def sweep_recipe_view(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """The best trial's arguments become a recipe the training form offers."""
    sweep = selectors.sweep_get(workspace=access.workspace, pk=pk)
    try:
        recipe = sweep_recipe_save(
            access=access, sweep=sweep, name=request.POST.get("name", "")[:200]
        )
    except ServiceError as e:
        messages.error(request, f"Not saved: {e}")
    else:
        messages.success(
            request,
            f"Saved the recipe “{recipe.name}”: the training form offers it from now on.",
        )
    return _back(access, sweep)
