"""Projects: list, create, edit, delete. A project's own page, its runs and models, is
training.views.projects.project_detail."""

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods
from django_htmx.http import HttpResponseClientRedirect

from core.errors import ServiceError
from core.http import page_of
from workspaces import selectors
from workspaces.decorators import workspace_view
from workspaces.forms import ConfirmForm, ProjectForm
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess
from workspaces.services import projects


@workspace_view(Perm.READ)
def project_list(request, access: WorkspaceAccess) -> HttpResponse:
    page = page_of(request, selectors.project_list(workspace=access.workspace))
    return render(request, "workspaces/project_list.html", {"access": access, "page": page})


@workspace_view(Perm.WRITE)
@require_http_methods(["GET", "POST"])
def project_create(request, access: WorkspaceAccess) -> HttpResponse:
    form = ProjectForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            project = projects.project_create(
                access=access,
                name=form.cleaned_data["name"],
                description=form.cleaned_data["description"],
            )
        except ServiceError as e:
            form.add_error("name", str(e))
        else:
            messages.success(request, f"Created the project {project.name}.")
            return redirect("project_detail", ws_slug=access.workspace.slug, pk=project.pk)
    return render(request, "workspaces/project_form.html", {"access": access, "form": form})


@workspace_view(Perm.WRITE)
@require_http_methods(["GET", "POST"])
def project_edit(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    project = selectors.project_get(workspace=access.workspace, pk=pk)
    form = ProjectForm(request.POST or None, instance=project)
    if request.method == "POST" and form.is_valid():
        try:
            projects.project_update(
                access=access,
                project=selectors.project_get(workspace=access.workspace, pk=pk),
                name=form.cleaned_data["name"],
                description=form.cleaned_data["description"],
            )
        except ServiceError as e:
            form.add_error("name", str(e))
        else:
            messages.success(request, "Project saved.")
            return redirect("project_detail", ws_slug=access.workspace.slug, pk=pk)
    return render(
        request,
        "workspaces/project_form.html",
        {"access": access, "form": form, "project": project},
    )


@workspace_view(Perm.WRITE)
@require_http_methods(["GET", "POST"])
def project_delete(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    project = selectors.project_get(workspace=access.workspace, pk=pk)
    form = ConfirmForm(request.POST or None)
    if request.method == "POST":
        try:
            projects.project_delete(
                access=access, project=project, confirm_name=form.data.get("confirm", "")
            )
        except ServiceError as e:
            form.add_error("confirm", str(e))
        else:
            messages.success(request, f"Deleted the project {project.name}.")
            if request.htmx:
                return HttpResponseClientRedirect(
                    reverse("project_list", kwargs={"ws_slug": access.workspace.slug})
                )
            return redirect("project_list", ws_slug=access.workspace.slug)
    return render(
        request,
        "workspaces/project_delete.html",
        {"access": access, "project": project, "form": form},
    )
