"""The workspace's Models page, a model's page, promoting a model, its weights download,
uploading weights, and deleting a model."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import F
from django.db.models.functions import Lower
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.errors import ServiceError
from core.files import stored_file_response
from core.http import HtmxHttpRequest
from datasets.models import Task
from deploy.exports import exports_panel
from deploy.models import Deployment
from deploy.selectors import models_for_table
from training import selectors
from training.selectors import MAIN_METRIC
from training.services.models import model_delete, model_promote, model_upload
from training.views.job_page import metric_groups
from workspaces import selectors as workspace_selectors
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

MODELS_PAGE_SIZE = 25
# Column → what it orders by; ?sort= takes only these names. Best metric and newest first.
MODEL_SORTS = {
    "created": lambda: [F("created_at")],
    "metric": lambda: [F("main_metric")],
    "name": lambda: [Lower("name")],
    "size": lambda: [F("weights_size")],
}
MODEL_SORT_DESC_FIRST = {"created", "metric", "size"}


def _sort_clean(sort: str | None, direction: str | None) -> tuple[str, str]:
    if sort not in MODEL_SORTS:
        return "created", "desc"
    if direction not in ("asc", "desc"):
        direction = "desc" if sort in MODEL_SORT_DESC_FIRST else "asc"
    return sort, direction


@workspace_view(Perm.READ)
@require_GET
def model_list(request: HtmxHttpRequest, access: WorkspaceAccess) -> HttpResponse:
    projects = list(
        workspace_selectors.project_list(workspace=access.workspace)
        .select_related(None)
        .only("pk", "name")
    )
    models = models_for_table(workspace=access.workspace)
    project = next((p for p in projects if str(p.pk) == request.GET.get("project")), None)
    if project is not None:
        models = models.filter(project=project)
    task = request.GET.get("task", "")
    if task in Task.values:
        models = models.filter(task=task)
    else:
        task = ""
    sort, direction = _sort_clean(request.GET.get("sort"), request.GET.get("dir"))
    descending = direction == "desc"
    order = [
        e.desc(nulls_last=True) if descending else e.asc(nulls_last=True)
        for e in MODEL_SORTS[sort]()
    ]
    models = models.order_by(*order, "-pk" if descending else "pk")
    page = Paginator(models, MODELS_PAGE_SIZE).get_page(request.GET.get("page"))
    for m in page.object_list:
        m.main_metric_label = MAIN_METRIC.get(m.task, ("", "metric"))[1]
    filters = {"project": project.pk if project else "", "task": task}
    return render(
        request,
        "training/model_list.html",
        {
            "access": access,
            "page": page,
            "projects": projects,
            "project": project,
            "task": task,
            "tasks": Task.choices,
            "sort": sort,
            "dir": direction,
            "filter_query": "&".join(f"{k}={v}" for k, v in filters.items() if v),
        },
    )


@workspace_view(Perm.READ)
@require_GET
def model_detail(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    model = selectors.model_get(workspace=access.workspace, pk=pk)
    return render(
        request,
        "training/model_detail.html",
        {
            "access": access,
            "model": model,
            "metrics": metric_groups(model.metrics),
            **exports_panel(access=access, model=model),
        },
    )


@workspace_view(Perm.TRAIN)
@require_POST
def model_promote_view(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """Make the model its project's current one; back to the page the button was on."""
    model = selectors.model_get(workspace=access.workspace, pk=pk)
    try:
        model_promote(access=access, model=model)
    except ServiceError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, f"{model.name} is now the current model of {model.project.name}.")
    back = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(back)
    return redirect("model_detail", ws_slug=access.workspace.slug, pk=model.pk)


@workspace_view(Perm.READ)
@require_GET
def model_weights(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    model = selectors.model_get(workspace=access.workspace, pk=pk)
    return stored_file_response(
        key=model.weights_key,
        filename=f"kestrel-model-{model.pk}-{model.architecture or 'yolo'}.pt",
    )


@workspace_view(Perm.TRAIN)
@require_POST
def model_upload_view(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """Keep uploaded weights as a model of the project, to fine-tune from in the training form."""
    project = workspace_selectors.project_get(workspace=access.workspace, pk=pk)
    upload = request.FILES.get("weights")
    if upload is None:
        messages.error(request, "Choose a .pt file to upload.")
        return redirect("project_detail", ws_slug=access.workspace.slug, pk=project.pk)
    try:
        model = model_upload(
            access=access,
            project=project,
            name=request.POST.get("name", ""),
            task=request.POST.get("task", ""),
            upload=upload,
        )
    except ServiceError as e:
        messages.error(request, str(e))
        return redirect("project_detail", ws_slug=access.workspace.slug, pk=project.pk)
    messages.success(
        request, f"{model.name} is uploaded; pick it in the training form to fine-tune."
    )
    return redirect("model_detail", ws_slug=access.workspace.slug, pk=model.pk)


@workspace_view(Perm.WRITE)
@require_http_methods(["GET", "POST"])
def model_delete_view(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    model = selectors.model_get(workspace=access.workspace, pk=pk)
    if request.method == "POST":
        try:
            model_delete(access=access, model=model)
        except ServiceError as e:
            messages.error(request, str(e))
            return redirect("model_delete", ws_slug=access.workspace.slug, pk=model.pk)
        messages.success(request, f"Deleted {model.name} and its weights.")
        return redirect("model_list", ws_slug=access.workspace.slug)
    deployments = list(Deployment.objects.filter(model=model).values_list("name", flat=True))
    return render(
        request,
        "training/model_delete.html",
        {"access": access, "model": model, "deployments": deployments},
    )
