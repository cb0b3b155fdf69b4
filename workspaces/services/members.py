"""Writes to memberships: change a role, the reviewer flag, remove a member, leave."""

from django.core.exceptions import PermissionDenied
from django.db import transaction

from core.errors import ServiceError
from workspaces.models import (
    Membership,
    Role,
    Workspace,
)
from workspaces.permissions import ROLE_RANK, Perm, roles_assignable_by
from workspaces.selectors import (
    WorkspaceAccess,
)


def _owners_locked(workspace: Workspace) -> list[Membership]:
    return list(
        Membership.objects.select_for_update()
        .filter(workspace=workspace, role=Role.OWNER)
        .order_by("pk")
    )


def _check_can_manage(access: WorkspaceAccess, membership: Membership) -> None:
    access.require(Perm.MANAGE_MEMBERS)
    if ROLE_RANK[membership.role] > ROLE_RANK[access.role]:
        raise PermissionDenied("Only an owner can change another owner.")


@transaction.atomic
def membership_change_role(
    *, access: WorkspaceAccess, membership: Membership, role: str
) -> Membership:
    _check_can_manage(access, membership)
    if role not in roles_assignable_by(access.role):
        raise ServiceError(f"You cannot give the role “{role}”.")
    if membership.user_id == access.user.pk:
        raise ServiceError("You cannot change your own role.")
    owners = _owners_locked(access.workspace)
    if membership.role == Role.OWNER and role != Role.OWNER and len(owners) <= 1:
        raise ServiceError("A workspace needs at least one owner.")
    membership.role = role
    membership.save(update_fields=["role"])
    return membership


@transaction.atomic
def membership_set_reviewer(
    *, access: WorkspaceAccess, membership: Membership, is_reviewer: bool
) -> Membership:
    """Let an editor approve and reject labels (admins and owners always may; viewers never)."""
    _check_can_manage(access, membership)
    if is_reviewer and membership.role == Role.VIEWER:
        raise ServiceError("Viewers cannot review: make them an editor first.")
    membership.is_reviewer = is_reviewer
    membership.save(update_fields=["is_reviewer"])
    return membership


@transaction.atomic
def membership_remove(*, access: WorkspaceAccess, membership: Membership) -> None:
    if membership.user_id == access.user.pk:
        raise ServiceError("To remove yourself, leave the workspace.")
    _check_can_manage(access, membership)
    owners = _owners_locked(access.workspace)
    if membership.role == Role.OWNER and len(owners) <= 1:
        raise ServiceError("A workspace needs at least one owner.")
    membership.delete()


@transaction.atomic
def membership_leave(*, access: WorkspaceAccess) -> None:
    workspace = access.workspace
    if workspace.is_personal:
        raise ServiceError("You cannot leave your personal workspace.")
    owners = _owners_locked(workspace)
    if access.role == Role.OWNER and len(owners) <= 1:
        raise ServiceError(
            "You are the last owner. Make another member owner first, or delete the workspace."
        )
    Membership.objects.filter(workspace=workspace, user=access.user).delete()
