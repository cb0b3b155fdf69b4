"""A workspace's own pages: home, create, overview, settings (rename, delete, hand over), leave;
and the 403 page."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from core.errors import ServiceError
from workspaces import selectors
from workspaces.decorators import workspace_view
from workspaces.forms import ConfirmForm, TransferForm, WorkspaceForm
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess
from workspaces.services import members
from workspaces.services import workspaces as workspace_services


def home(request) -> HttpResponse:
    if not request.user.is_authenticated:
        return render(request, "workspaces/landing.html")
    workspace = selectors.workspace_list_for_user(user=request.user).first()
    if workspace is None:
        workspace = workspace_services.workspace_create_personal(user=request.user)
    return redirect("workspace_detail", ws_slug=workspace.slug)


@login_required
@require_http_methods(["GET", "POST"])
def workspace_create(request) -> HttpResponse:
    form = WorkspaceForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            workspace = workspace_services.workspace_create_team(
                user=request.user, name=form.cleaned_data["name"]
            )
        except ServiceError as e:
            form.add_error("name", str(e))
        else:
            messages.success(request, f"Created the team workspace {workspace.name}.")
            return redirect("workspace_detail", ws_slug=workspace.slug)
    return render(request, "workspaces/workspace_create.html", {"form": form})


@workspace_view(Perm.READ)
def workspace_detail(request, access: WorkspaceAccess) -> HttpResponse:
    projects = selectors.project_list(workspace=access.workspace)[:6]
    return render(
        request,
        "workspaces/workspace_detail.html",
        {
            "access": access,
            "projects": projects,
            "member_count": selectors.membership_list(workspace=access.workspace).count(),
        },
    )


@workspace_view(Perm.READ)
@require_http_methods(["GET", "POST"])
def workspace_settings(request, access: WorkspaceAccess) -> HttpResponse:
    form = WorkspaceForm(request.POST or None, initial={"name": access.workspace.name})
    if request.method == "POST":
        access.require(Perm.MANAGE_WORKSPACE)
        if form.is_valid():
            try:
                workspace_services.workspace_rename(access=access, name=form.cleaned_data["name"])
            except ServiceError as e:
                form.add_error("name", str(e))
            else:
                messages.success(request, "Workspace renamed.")
                return redirect("workspace_settings", ws_slug=access.workspace.slug)
    others = []
    if access.can(Perm.TRANSFER_OWNERSHIP):
        others = selectors.membership_list(workspace=access.workspace).exclude(user=access.user)
    return render(
        request,
        "workspaces/workspace_settings.html",
        {"access": access, "form": form, "transfer_candidates": others},
    )


@workspace_view(Perm.DELETE_WORKSPACE)
@require_POST
def workspace_delete(request, access: WorkspaceAccess) -> HttpResponse:
    form = ConfirmForm(request.POST)
    try:
        workspace_services.workspace_delete(
            access=access, confirm_slug=form.data.get("confirm", "")
        )
    except ServiceError as e:
        messages.error(request, str(e))
        return redirect("workspace_settings", ws_slug=access.workspace.slug)
    messages.success(request, f"Deleted the workspace {access.workspace.name}.")
    return redirect("home")


@workspace_view(Perm.TRANSFER_OWNERSHIP)
@require_POST
def workspace_transfer(request, access: WorkspaceAccess) -> HttpResponse:
    form = TransferForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose the member who will own the workspace.")
        return redirect("workspace_settings", ws_slug=access.workspace.slug)
    membership = selectors.membership_get(
        workspace=access.workspace, pk=form.cleaned_data["membership"]
    )
    try:
        workspace_services.workspace_transfer_ownership(access=access, membership=membership)
    except ServiceError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, f"{membership.user} now owns {access.workspace.name}.")
    return redirect("workspace_settings", ws_slug=access.workspace.slug)


@workspace_view(Perm.READ)
@require_http_methods(["GET", "POST"])
def workspace_leave(request, access: WorkspaceAccess) -> HttpResponse:
    if request.method == "POST":
        try:
            members.membership_leave(access=access)
        except ServiceError as e:
            messages.error(request, str(e))
            return redirect("workspace_leave", ws_slug=access.workspace.slug)
        messages.success(request, f"You left {access.workspace.name}.")
        return redirect("home")
    return render(request, "workspaces/workspace_leave.html", {"access": access})


def permission_denied(request, exception: PermissionDenied | None = None) -> HttpResponse:
    message = str(exception) if exception and str(exception) else "You may not do that here."
    return render(request, "403.html", {"message": message}, status=403)
