"""The form that starts a training job (or a quick test run) in a project."""

from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from core.errors import ServiceError
from core.http import HtmxHttpRequest
from core.money import to_micro
from datasets.models import Task
from datasets.services.version_checks import VersionCheck, version_check
from training import selectors
from training.forms import TrainForm
from training.recipes import workspace_recipes
from training.services.arguments import extra_args_parse
from training.services.catalog import gpu_choices
from training.services.jobs import job_submit
from training.views.estimate import ESTIMATE_FIELDS
from workspaces import selectors as workspace_selectors
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess


def _initial(versions, request) -> dict:
    """The newest version (or ?version=<id>, e.g. from a version's page, or the form's own
    field when its data checks follow a change); the form picks the weights and the recipe."""
    asked = request.GET.get("version") or request.GET.get("dataset_version") or ""
    version = (versions.filter(pk=int(asked)).first() if asked.isdigit() else None) or (
        versions.first()
    )
    task = request.GET.get("task", "")
    return {"dataset_version": version, **({"task": task} if task in Task.values else {})}


def form_version_check(form: TrainForm, versions) -> VersionCheck | None:
    """The data checks of the version the form shows (as its task would train it)."""
    value = form["dataset_version"].value()
    pk = getattr(value, "pk", value)
    version = versions.filter(pk=int(pk)).first() if str(pk or "").isdigit() else None
    if version is None:
        return None
    task = form["task"].value()
    return version_check(version, task=task if task in Task.values else None)


@workspace_view(Perm.TRAIN)
@require_http_methods(["GET", "POST"])
def job_create(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    project = workspace_selectors.project_get(workspace=access.workspace, pk=pk)
    versions = selectors.trainable_versions(workspace=access.workspace)
    # Only models a worker has loaded can be fine-tuned from (uploads are checked first).
    models = list(selectors.model_list(workspace=access.workspace).usable())
    machines = gpu_choices(workspace=access.workspace)
    form = TrainForm(
        request.POST or None,
        versions=versions,
        models=models,
        recipes=workspace_recipes(workspace=access.workspace),
        initial=_initial(versions, request),
    )
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            extra_args = extra_args_parse(data["extra_args"])
        except ServiceError as e:
            form.add_error("extra_args", str(e))
        else:
            try:
                job = job_submit(
                    access=access,
                    project=project,
                    version=data["dataset_version"],
                    gpu_type_id=data["gpu_type"],
                    params=form.params(extra_args=extra_args),
                    base_model=data["base_model"],
                    quick_test="quick_test" in request.POST,
                    notify_email=data["notify_email"],
                    budget_cap=(to_micro(data["budget_cap"]) if data["budget_cap"] else None),
                    name=data["name"],
                    # The form listed the version's warnings as notes before the click: they
                    # inform, and only errors refuse (version_train_check still does).
                    train_anyway=True,
                )
            except ServiceError as e:
                form.add_error(None, str(e))
            else:
                what = "Quick test run" if job.is_quick_test else "Training"
                messages.success(request, f"{what} submitted: {job.title}.")
                return redirect("job_detail", ws_slug=access.workspace.slug, pk=job.pk)
    if request.htmx and request.htmx.target == "data-checks" and not form.is_bound:
        # The data checks following the version picked (the panel's hx-get), and the start
        # buttons following them (its hx-select-oob).
        return render(
            request,
            "training/job_form.html#checks-response",
            {
                "access": access,
                "project": project,
                "data_check": form_version_check(form, versions),
            },
        )
    if form.is_bound:
        picked = form.data.get("gpu_type", "")
    else:
        picked = next((str(c.gpu.pk) for c in machines if c.available), "")
    return render(
        request,
        "training/job_form.html",
        {
            "access": access,
            "project": project,
            "form": form,
            "machines": machines,
            "picked_gpu": picked,
            "has_versions": versions.exists(),
            "data_check": form_version_check(form, versions),
            # Estimating every machine takes seconds: the panel loads after the page (htmx),
            # or from this link without JavaScript.
            "estimate_query": urlencode(
                {name: form[name].value() or "" for name in ESTIMATE_FIELDS}
            ),
        },
        status=400 if form.is_bound else 200,
    )
