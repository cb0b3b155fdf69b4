"""The workspace's Models page, a model's try-it page (run it on an image from the browser,
with the API call that does the same), and deleting a model. A public model's try-it page is
deploy.views.public."""

from django.contrib import messages
from django.core.paginator import Paginator
from django.db.models import F
from django.db.models.functions import Lower
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from core.errors import ServiceError
from core.http import HtmxHttpRequest
from datasets.models import PIXEL_TASKS, Task
from deploy.collection.rules import collection_panel
from deploy.models import Deployment
from deploy.selectors import model_public_samples, models_for_table
from deploy.services import model_delete
from training import selectors as training_selectors
from training.selectors import MAIN_METRIC
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
# What the try-it page offers to run at; the model's own training size is added.
TRY_IMAGE_SIZES = (320, 480, 640, 960, 1280)


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
        "deploy/model_list.html",
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


# What the Python snippet prints of an answer, per kind of model.
_SNIPPET_PRINTS = {
    Task.SEMANTIC: """for result in response.json()["images"][0]["results"]:
    print(result["name"], f"{result['pixel_share']:.1%} of the pixels")""",
    Task.DEPTH: """depth = response.json()["images"][0]["depth"]
print(f"{depth['min']:.2f} m to {depth['max']:.2f} m, median {depth['median']:.2f} m")""",
}
_SNIPPET_PRINT_OBJECTS = """for result in response.json()["images"][0]["results"]:
    print(result["name"], round(result["confidence"], 2), result.get("box"))"""


def _snippets(predict_url: str, task: str = "") -> dict[str, str]:
    curl = (
        f"curl -X POST {predict_url} \\\n"
        '  -H "Authorization: Bearer $KESTREL_API_KEY" \\\n'
        "  -F file=@image.jpg \\\n"
        "  -F conf=0.25"
    )
    python = f"""import os

import requests

response = requests.post(
    "{predict_url}",
    headers={{"Authorization": f"Bearer {{os.environ['KESTREL_API_KEY']}}"}},
    files={{"file": open("image.jpg", "rb")}},
    data={{"conf": 0.25}},
    timeout=60,
)
response.raise_for_status()
{_SNIPPET_PRINTS.get(task, _SNIPPET_PRINT_OBJECTS)}"""
    return {"curl": curl, "python": python}


def try_context(request: HtmxHttpRequest, model) -> dict:
    """What the try-it page shows of `model`: for its workspace, and for a public model
    (deploy.views.public)."""
    predict_path = reverse("api:model_predict", kwargs={"model_id": model.pk})
    predict_url = request.build_absolute_uri(predict_path)
    return {
        "model": model,
        "predict_path": predict_path,
        "predict_url": predict_url,
        "snippets": _snippets(predict_url, model.task),
        "pixel_task": model.task in PIXEL_TASKS,
        "image_sizes": sorted({*TRY_IMAGE_SIZES, model.imgsz}),
        "samples": model_public_samples(model=model),
    }


@workspace_view(Perm.PREDICT)
@require_GET
def model_try(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    model = training_selectors.model_get(workspace=access.workspace, pk=pk)
    context = {
        "access": access,
        "can_write": access.can(Perm.WRITE),
        # The shared API's collection rule for this model (deploy.collection).
        "collection": collection_panel(access=access, model=model),
        **try_context(request, model),
    }
    return render(request, "deploy/model_try.html", context)


@workspace_view(Perm.WRITE)
@require_http_methods(["GET", "POST"])
def model_delete_view(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    model = training_selectors.model_get(workspace=access.workspace, pk=pk)
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
        "deploy/model_delete.html",
        {"access": access, "model": model, "deployments": deployments},
    )
