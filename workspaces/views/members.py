"""Members and invitations: the list, invite, change a role, reviewer flag, remove, revoke an
invitation, and accepting one from its link."""

from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_POST

from core.errors import ServiceError
from core.http import HtmxHttpRequest
from workspaces import selectors
from workspaces.decorators import workspace_view
from workspaces.forms import InvitationForm, RoleForm
from workspaces.models import Role
from workspaces.permissions import Perm, roles_assignable_by
from workspaces.selectors import WorkspaceAccess
from workspaces.services import invitations, members


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
            invitation = invitations.invitation_create(
                access=access,
                email=form.cleaned_data["email"],
                role=form.cleaned_data["role"],
                base_url=request.build_absolute_uri("/"),
            )
        except ServiceError as e:
            form.add_error(None, str(e))
        else:
            messages.success(
                request,
                f"Invitation sent to {invitation.email}. You can also share this link: "
                f"{invitation.accept_url}",
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
            members.membership_change_role(
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
        members.membership_set_reviewer(access=access, membership=membership, is_reviewer=wanted)
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
        members.membership_remove(access=access, membership=membership)
    except ServiceError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, f"Removed {membership.user} from {access.workspace.name}.")
    return redirect("member_list", ws_slug=access.workspace.slug)


@workspace_view(Perm.MANAGE_MEMBERS)
@require_POST
def invitation_revoke(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    invitation = selectors.invitation_get(workspace=access.workspace, pk=pk)
    invitations.invitation_revoke(access=access, invitation=invitation)
    messages.success(request, f"Withdrew the invitation to {invitation.email}.")
    return redirect("member_list", ws_slug=access.workspace.slug)


@require_http_methods(["GET", "POST"])
def invitation_accept(request, token: str) -> HttpResponse:
    """Whoever holds a link learns nothing from it but "sign in": the workspace, the inviter
    and the invitation's state are shown only to a signed-in account, and the details only to
    the account that holds the invited address."""
    if not request.user.is_authenticated:
        try:
            invitations.invitation_token_check(token)
        except ServiceError as e:
            return _invitation_invalid(request, e)
        if request.method == "POST":
            login = reverse("account_login")
            return redirect(f"{login}?{urlencode({'next': request.path})}")
        return render(request, "workspaces/invitation_signin.html", {"next": request.path})
    try:
        invitation = invitations.invitation_from_token(token)
    except ServiceError as e:
        return _invitation_invalid(request, e)
    state = invitations.invitation_address_state(invitation=invitation, user=request.user)
    problem = invitations.invitation_email_problem(
        invitation=invitation, user=request.user, state=state
    )
    if request.method == "POST" and problem is None:
        try:
            invitations.invitation_accept(invitation=invitation, user=request.user)
        except ServiceError as e:
            messages.error(request, str(e))
        else:
            messages.success(request, f"Welcome to {invitation.workspace.name}.")
            return redirect("workspace_detail", ws_slug=invitation.workspace.slug)
    context = {
        "invitation": invitation,
        "problem": problem,
        # The workspace and who invited are shown only to the holder of the invited address.
        "holds_address": state != invitations.InvitedAddress.ABSENT,
    }
    return render(request, "workspaces/invitation_accept.html", context)


def _invitation_invalid(request, error: ServiceError) -> HttpResponse:
    return render(request, "workspaces/invitation_invalid.html", {"error": str(error)}, status=404)
