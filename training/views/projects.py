"""A project's page: its runs, sortable, a page at a time, and its latest models. Its URL sits
with the workspace's project pages; it lives here because what it shows is training's."""

from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import render

from datasets.models import Task
from training import selectors
from workspaces import selectors as workspace_selectors
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

PROJECT_RUNS_PAGE = 25  # a project's runs, sortable, a page at a time
PROJECT_MODELS = 10  # the current model and the latest ones; every job's model is on its page


@workspace_view(Perm.READ)
def project_detail(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    project = workspace_selectors.project_get(workspace=access.workspace, pk=pk)
    sort, direction = selectors.run_sort_clean(request.GET.get("sort"), request.GET.get("dir"))
    runs = selectors.project_runs(
        workspace=access.workspace, project=project, sort=sort, direction=direction
    )
    models = selectors.model_list(workspace=access.workspace).filter(project=project)
    return render(
        request,
        "training/project_detail.html",
        {
            "access": access,
            "project": project,
            "runs": Paginator(runs, PROJECT_RUNS_PAGE).get_page(request.GET.get("page")),
            "sort": sort,
            "dir": direction,
            "models": models.order_by("-is_current", "-created_at", "-id")[:PROJECT_MODELS],
            "tasks": Task.choices,
        },
    )
