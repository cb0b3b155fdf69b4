"""Reads. Every workspace-owned row is reached through `workspace_access_*` + `.for_workspace`."""

from dataclasses import dataclass, field

from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import Http404
from django.utils import timezone

from workspaces.models import ApiKey, Invitation, Membership, Project, Role, User, Workspace
from workspaces.permissions import (
    PERM_REQUIRED_ROLE,
    Perm,
    role_permissions,
    scopes_permissions,
)


@dataclass(frozen=True)
class WorkspaceAccess:
    """Who is acting in which workspace, and what they may do there."""

    workspace: Workspace
    user: User
    role: str
    api_key: ApiKey | None = None
    perms: frozenset[Perm] = field(default=frozenset())

    def can(self, perm: Perm) -> bool:
        return perm in self.perms

    def require(self, perm: Perm) -> None:
        if self.can(perm):
            return
        if self.api_key is not None and perm in role_permissions(self.role):
            raise PermissionDenied(f"This API key lacks the scope needed to {perm.label}.")
        if perm == Perm.REVIEW and Perm.WRITE in self.perms:
            raise PermissionDenied(
                "Only reviewers approve or reject labels: an admin can make you a reviewer "
                "on the members page."
            )
        needed = Role(PERM_REQUIRED_ROLE[perm]).label.lower()
        raise PermissionDenied(
            f"You need the {needed} role in {self.workspace.name} to {perm.label}; "
            f"you are {Role(self.role).label.lower()}."
        )


def workspace_access_for_user(*, user: User, slug: str) -> WorkspaceAccess:
    """The scoping helper for people. Not a member (or no such workspace): 404."""
    if not user.is_authenticated:
        raise Http404("No such workspace.")
    membership = (
        Membership.objects.select_related("workspace", "workspace__plan")
        .filter(user=user, workspace__slug=slug)
        .first()
    )
    if membership is None:
        raise Http404("No such workspace.")
    return WorkspaceAccess(
        workspace=membership.workspace,
        user=user,
        role=membership.role,
        perms=role_permissions(membership.role, is_reviewer=membership.is_reviewer),
    )


def workspace_access_for_api_key(*, api_key: ApiKey, slug: str) -> WorkspaceAccess:
    """The scoping helper for API keys: a key reaches only its own workspace (else 404)."""
    if api_key.workspace.slug != slug:
        raise Http404("No such workspace.")
    membership = Membership.objects.filter(
        workspace_id=api_key.workspace_id, user_id=api_key.created_by_id
    ).first()
    if membership is None:  # the key's creator left: the key no longer acts for anyone
        raise Http404("No such workspace.")
    perms = role_permissions(
        membership.role, is_reviewer=membership.is_reviewer
    ) & scopes_permissions(api_key.scopes)
    return WorkspaceAccess(
        workspace=api_key.workspace,
        user=api_key.created_by,
        role=membership.role,
        api_key=api_key,
        perms=perms,
    )


def workspace_access_for_caller(*, auth, user: User, slug: str) -> WorkspaceAccess:
    """The scoping helper for API calls: by API key when one was presented, else the session."""
    if isinstance(auth, ApiKey):
        return workspace_access_for_api_key(api_key=auth, slug=slug)
    return workspace_access_for_user(user=user, slug=slug)


def workspace_access_for_object(
    *, auth, user: User, slug: str | None, not_found: str
) -> WorkspaceAccess:
    """The scoping helper for a row an API call names by id alone: the caller's access to the
    workspace the row lives in (`slug`, None for no such row). An unknown id and another
    team's id get the same 404 with the same words, `not_found`: the answer never tells a
    stranger that the id exists."""
    if slug is not None:
        try:
            return workspace_access_for_caller(auth=auth, user=user, slug=slug)
        except Http404:
            pass
    raise Http404(not_found)


def workspace_slugs_for_caller(*, auth, user: User) -> list[str]:
    """Every workspace an API caller can reach: a key reaches only its own."""
    if isinstance(auth, ApiKey):
        return [auth.workspace.slug]
    return list(Workspace.objects.for_user(user).values_list("slug", flat=True))


def workspace_list_for_user(*, user: User) -> QuerySet[Workspace]:
    return Workspace.objects.for_user(user).select_related("plan")


def membership_list(*, workspace: Workspace) -> QuerySet[Membership]:
    return (
        Membership.objects.for_workspace(workspace).select_related("user").order_by("user__email")
    )


def membership_get(*, workspace: Workspace, pk: int) -> Membership:
    membership = membership_list(workspace=workspace).filter(pk=pk).first()
    if membership is None:
        raise Http404("No such member.")
    return membership


def invitation_list_open(*, workspace: Workspace) -> QuerySet[Invitation]:
    return (
        Invitation.objects.for_workspace(workspace)
        .filter(accepted_at__isnull=True, revoked_at__isnull=True)
        .select_related("invited_by")
    )


def invitation_get(*, workspace: Workspace, pk: int) -> Invitation:
    invitation = invitation_list_open(workspace=workspace).filter(pk=pk).first()
    if invitation is None:
        raise Http404("No such invitation.")
    return invitation


def project_list(*, workspace: Workspace) -> QuerySet[Project]:
    return Project.objects.for_workspace(workspace).select_related("created_by")


def project_get(*, workspace: Workspace, pk: int) -> Project:
    project = project_list(workspace=workspace).filter(pk=pk).first()
    if project is None:
        raise Http404("No such project.")
    return project


def api_key_list(*, workspace: Workspace) -> QuerySet[ApiKey]:
    return ApiKey.objects.for_workspace(workspace).select_related("created_by")


def api_key_get(*, workspace: Workspace, pk: int) -> ApiKey:
    key = api_key_list(workspace=workspace).filter(pk=pk).first()
    if key is None:
        raise Http404("No such API key.")
    return key


def workspace_seats_used(*, workspace: Workspace) -> int:
    counts = Workspace.objects.filter(pk=workspace.pk).aggregate(
        members=Count("memberships", distinct=True)
    )
    pending = invitation_list_open(workspace=workspace).filter(expires_at__gt=timezone.now())
    return counts["members"] + pending.count()
