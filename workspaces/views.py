from datetime import UTC, datetime, time
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_http_methods, require_POST
from django_htmx.http import HttpResponseClientRedirect

from billing import ledger, stripe_gateway
from billing import selectors as billing_selectors
from billing.payments import PRESET_CREDITS
from core.errors import ServiceError
from core.http import HtmxHttpRequest, page_of
from datasets.models import Task
from deploy.selectors import inference_usage
from training import selectors as training_selectors
from workspaces import selectors, services
from workspaces.decorators import workspace_view
from workspaces.forms import (
    ApiKeyForm,
    ConfirmForm,
    InvitationForm,
    ProjectForm,
    RoleForm,
    TransferForm,
    WorkspaceForm,
)
from workspaces.models import Role
from workspaces.permissions import Perm, roles_assignable_by
from workspaces.selectors import WorkspaceAccess

PROJECT_RUNS_PAGE = 25  # a project's runs, sortable, a page at a time
PROJECT_MODELS = 10  # the current model and the latest ones; every job's model is on its page


def home(request) -> HttpResponse:
    if not request.user.is_authenticated:
        return render(request, "workspaces/landing.html")
    workspace = selectors.workspace_list_for_user(user=request.user).first()
    if workspace is None:
        workspace = services.workspace_create_personal(user=request.user)
    return redirect("workspace_detail", ws_slug=workspace.slug)


@login_required
@require_http_methods(["GET", "POST"])
def workspace_create(request) -> HttpResponse:
    form = WorkspaceForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            workspace = services.workspace_create_team(
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
                services.workspace_rename(access=access, name=form.cleaned_data["name"])
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
        services.workspace_delete(access=access, confirm_slug=form.data.get("confirm", ""))
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
        services.workspace_transfer_ownership(access=access, membership=membership)
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
            services.membership_leave(access=access)
        except ServiceError as e:
            messages.error(request, str(e))
            return redirect("workspace_leave", ws_slug=access.workspace.slug)
        messages.success(request, f"You left {access.workspace.name}.")
        return redirect("home")
    return render(request, "workspaces/workspace_leave.html", {"access": access})


@workspace_view(Perm.READ)
def workspace_billing(request, access: WorkspaceAccess) -> HttpResponse:
    """Every member sees the credits (they decide whether training can start); buying them
    needs MANAGE_BILLING."""
    account = ledger.account_for(access.workspace)
    usage = billing_selectors.usage_per_day(account=account)
    return render(
        request,
        "workspaces/workspace_billing.html",
        {
            "access": access,
            "plan": access.workspace.plan,
            "seats_used": selectors.workspace_seats_used(workspace=access.workspace),
            "account": account,
            "entries": page_of(request, billing_selectors.ledger_entry_list(account=account)),
            "usage": usage,
            "usage_chart": {
                "labels": [row["day"].isoformat() for row in usage],
                "micro": [row["spent"] for row in usage],
            },
            "job_costs": billing_selectors.job_costs(account=account),
            "inference": inference_usage(workspace=access.workspace),
            "topups_enabled": stripe_gateway.enabled(),
            "can_buy": access.can(Perm.MANAGE_BILLING),
            "presets": PRESET_CREDITS,
        },
    )


# --- members ----------------------------------------------------------------------------------


def _role_choices(access: WorkspaceAccess) -> dict:
    assignable = roles_assignable_by(access.role)
    return {
        "assignable_roles": [c for c in Role.choices if c[0] in assignable],
        "assignable_values": assignable,
    }


def _members_context(access: WorkspaceAccess, invite_form=None) -> dict:
    assignable = roles_assignable_by(access.role)
    return {
        **_role_choices(access),
        "access": access,
        "members": selectors.membership_list(workspace=access.workspace),
        "invitations": selectors.invitation_list_open(workspace=access.workspace),
        "invite_form": invite_form or InvitationForm(assignable=assignable),
        "seats_used": selectors.workspace_seats_used(workspace=access.workspace),
        "now": timezone.now(),
    }


@workspace_view(Perm.MANAGE_MEMBERS)
def member_list(request, access: WorkspaceAccess) -> HttpResponse:
    return render(request, "workspaces/member_list.html", _members_context(access))


@workspace_view(Perm.MANAGE_MEMBERS)
@require_POST
def member_invite(request, access: WorkspaceAccess) -> HttpResponse:
    form = InvitationForm(request.POST, assignable=roles_assignable_by(access.role))
    if form.is_valid():
        try:
            invitation = services.invitation_create(
                access=access,
                email=form.cleaned_data["email"],
                role=form.cleaned_data["role"],
                base_url=request.build_absolute_uri("/"),
            )
        except ServiceError as e:
            form.add_error(None, str(e))
        else:
            url = services.invitation_accept_url(
                invitation, base_url=request.build_absolute_uri("/")
            )
            messages.success(
                request,
                f"Invitation sent to {invitation.email}. You can also share this link: {url}",
            )
            return redirect("member_list", ws_slug=access.workspace.slug)
    return render(
        request, "workspaces/member_list.html", _members_context(access, form), status=400
    )


@workspace_view(Perm.MANAGE_MEMBERS)
@require_POST
def member_role(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    membership = selectors.membership_get(workspace=access.workspace, pk=pk)
    form = RoleForm(request.POST, assignable=roles_assignable_by(access.role))
    error = None
    if not form.is_valid():
        error = "Choose one of the roles offered."
    else:
        try:
            services.membership_change_role(
                access=access, membership=membership, role=form.cleaned_data["role"]
            )
        except ServiceError as e:
            error = str(e)
    if request.htmx:  # just the row: no member list, invitations or seat counts to read
        membership.refresh_from_db()
        context = {**_role_choices(access), "access": access, "member": membership}
        context["row_error"] = error
        return render(request, "workspaces/member_list.html#member-row", context)
    if error:
        messages.error(request, error)
    else:
        messages.success(request, f"{membership.user} is now {membership.get_role_display()}.")
    return redirect("member_list", ws_slug=access.workspace.slug)


@workspace_view(Perm.MANAGE_MEMBERS)
@require_POST
def member_reviewer(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    membership = selectors.membership_get(workspace=access.workspace, pk=pk)
    wanted = request.POST.get("is_reviewer") == "1"
    try:
        services.membership_set_reviewer(access=access, membership=membership, is_reviewer=wanted)
    except ServiceError as e:
        messages.error(request, str(e))
    else:
        messages.success(
            request,
            f"{membership.user} {'may now' if wanted else 'no longer may'} review labels.",
        )
    return redirect("member_list", ws_slug=access.workspace.slug)


@workspace_view(Perm.MANAGE_MEMBERS)
@require_POST
def member_remove(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    membership = selectors.membership_get(workspace=access.workspace, pk=pk)
    try:
        services.membership_remove(access=access, membership=membership)
    except ServiceError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, f"Removed {membership.user} from {access.workspace.name}.")
    return redirect("member_list", ws_slug=access.workspace.slug)


@workspace_view(Perm.MANAGE_MEMBERS)
@require_POST
def invitation_revoke(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    invitation = selectors.invitation_get(workspace=access.workspace, pk=pk)
    services.invitation_revoke(access=access, invitation=invitation)
    messages.success(request, f"Withdrew the invitation to {invitation.email}.")
    return redirect("member_list", ws_slug=access.workspace.slug)


@require_http_methods(["GET", "POST"])
def invitation_accept(request, token: str) -> HttpResponse:
    """Whoever holds a link learns nothing from it but "sign in": the workspace, the inviter
    and the invitation's state are shown only to a signed-in account, and the details only to
    the account that holds the invited address."""
    if not request.user.is_authenticated:
        try:
            services.invitation_token_check(token)
        except ServiceError as e:
            return _invitation_invalid(request, e)
        if request.method == "POST":
            login = reverse("account_login")
            return redirect(f"{login}?{urlencode({'next': request.path})}")
        return render(request, "workspaces/invitation_signin.html", {"next": request.path})
    try:
        invitation = services.invitation_from_token(token)
    except ServiceError as e:
        return _invitation_invalid(request, e)
    state = services.invitation_address_state(invitation=invitation, user=request.user)
    problem = services.invitation_email_problem(
        invitation=invitation, user=request.user, state=state
    )
    if request.method == "POST" and problem is None:
        try:
            services.invitation_accept(invitation=invitation, user=request.user)
        except ServiceError as e:
            messages.error(request, str(e))
        else:
            messages.success(request, f"Welcome to {invitation.workspace.name}.")
            return redirect("workspace_detail", ws_slug=invitation.workspace.slug)
    context = {
        "invitation": invitation,
        "problem": problem,
        # The workspace and who invited are shown only to the holder of the invited address.
        "holds_address": state != services.InvitedAddress.ABSENT,
    }
    return render(request, "workspaces/invitation_accept.html", context)


def _invitation_invalid(request, error: ServiceError) -> HttpResponse:
    return render(request, "workspaces/invitation_invalid.html", {"error": str(error)}, status=404)


# --- projects ---------------------------------------------------------------------------------


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
            project = services.project_create(
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


@workspace_view(Perm.READ)
def project_detail(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    project = selectors.project_get(workspace=access.workspace, pk=pk)
    sort, direction = training_selectors.run_sort_clean(
        request.GET.get("sort"), request.GET.get("dir")
    )
    runs = training_selectors.project_runs(
        workspace=access.workspace, project=project, sort=sort, direction=direction
    )
    models = training_selectors.model_list(workspace=access.workspace).filter(project=project)
    return render(
        request,
        "workspaces/project_detail.html",
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


@workspace_view(Perm.WRITE)
@require_http_methods(["GET", "POST"])
def project_edit(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    project = selectors.project_get(workspace=access.workspace, pk=pk)
    form = ProjectForm(request.POST or None, instance=project)
    if request.method == "POST" and form.is_valid():
        try:
            services.project_update(
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
            services.project_delete(
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


# --- API keys ---------------------------------------------------------------------------------


@workspace_view(Perm.MANAGE_KEYS)
@require_http_methods(["GET", "POST"])
def api_key_list(request, access: WorkspaceAccess) -> HttpResponse:
    # POST/redirect/GET, so a reload cannot create a second key: the plaintext waits in the
    # session (never in a URL) and the next GET of this workspace's page pops it, shown once.
    session_key = f"new_api_key:{access.workspace.pk}"
    form = ApiKeyForm(request.POST or None)
    new_key = None
    if request.method == "GET" and session_key in request.session:
        pending = request.session.pop(session_key)
        key = selectors.api_key_list(workspace=access.workspace).filter(pk=pending["pk"]).first()
        if key is not None:
            new_key = {"key": key, "raw": pending["raw"]}
    if request.method == "POST" and form.is_valid():
        expires = form.cleaned_data["expires_at"]
        try:
            key, raw = services.api_key_create(
                access=access,
                name=form.cleaned_data["name"],
                scopes=form.cleaned_data["scopes"],
                expires_at=(datetime.combine(expires, time.min, tzinfo=UTC) if expires else None),
            )
        except ServiceError as e:
            form.add_error(None, str(e))
        else:
            request.session[session_key] = {"pk": key.pk, "raw": raw}
            return redirect("api_key_list", ws_slug=access.workspace.slug)
    response = render(
        request,
        "workspaces/api_key_list.html",
        {
            "access": access,
            "form": form,
            "new_key": new_key,
            "page": page_of(request, selectors.api_key_list(workspace=access.workspace)),
            "now": timezone.now(),
        },
        status=400 if form.errors else 200,
    )
    if new_key is not None:
        add_never_cache_headers(response)  # Back must not bring the plaintext back from a cache
    return response


@workspace_view(Perm.MANAGE_KEYS)
@require_POST
def api_key_revoke(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    key = selectors.api_key_get(workspace=access.workspace, pk=pk)
    services.api_key_revoke(access=access, key=key)
    messages.success(request, f"Revoked the key {key.name}. Calls using it now get 401.")
    return redirect("api_key_list", ws_slug=access.workspace.slug)


def permission_denied(request, exception: PermissionDenied | None = None) -> HttpResponse:
    message = str(exception) if exception and str(exception) else "You may not do that here."
    return render(request, "403.html", {"message": message}, status=403)
