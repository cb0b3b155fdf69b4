"""Writes to workspaces: create (personal or team, with the default plan and an empty credit
account), rename, delete, hand over; and a confirmed person's sign-up credits, once."""

from django.db import transaction
from django.utils.text import slugify

from billing.ledger import account_open, signup_credits_grant
from billing.plans import plan_default
from core.errors import ServiceError
from workspaces.models import (
    Membership,
    Role,
    User,
    Workspace,
)
from workspaces.permissions import Perm
from workspaces.selectors import (
    WorkspaceAccess,
)


def _unique_slug(name: str) -> str:
    base = slugify(name)[:50] or "workspace"
    slug, n = base, 1
    while Workspace.objects.filter(slug=slug).exists():
        n += 1
        slug = f"{base}-{n}"
    return slug


def _workspace_create(
    *, user: User, name: str, is_personal: bool, slug_base: str = ""
) -> Workspace:
    workspace = Workspace.objects.create(
        slug=_unique_slug(slug_base or name),
        name=name,
        is_personal=is_personal,
        plan=plan_default(),
        created_by=user,
    )
    Membership.objects.create(workspace=workspace, user=user, role=Role.OWNER)
    # Empty: a new workspace mints no credits. A person's sign-up credits come once, when they
    # confirm their address (user_signup_credits_grant); a team's from an administrator.
    account_open(workspace)
    return workspace


@transaction.atomic
def workspace_create_personal(*, user: User) -> Workspace:
    existing = Workspace.objects.filter(is_personal=True, created_by=user).first()
    if existing is not None:
        return existing
    local_part = user.email.split("@", 1)[0]
    return _workspace_create(
        user=user, name=f"{local_part}'s workspace", is_personal=True, slug_base=local_part
    )


@transaction.atomic
def workspace_create_team(*, user: User, name: str) -> Workspace:
    name = name.strip()
    if not name:
        raise ServiceError("Give the workspace a name.")
    return _workspace_create(user=user, name=name, is_personal=False)


@transaction.atomic
def user_signup_credits_grant(*, user: User) -> bool:
    """A person proved they read mail at their address (allauth's confirmation, or an
    operator's): the plan's sign-up credits into their personal workspace, once per person
    (billing.ledger.signup_credits_grant). Whether they were granted now."""
    personal = workspace_create_personal(user=user)
    return signup_credits_grant(user=user, workspace=personal) is not None


@transaction.atomic
def workspace_rename(*, access: WorkspaceAccess, name: str) -> Workspace:
    access.require(Perm.MANAGE_WORKSPACE)
    name = name.strip()
    if not name:
        raise ServiceError("Give the workspace a name.")
    workspace = access.workspace
    workspace.name = name
    workspace.save(update_fields=["name"])
    return workspace


@transaction.atomic
def workspace_delete(*, access: WorkspaceAccess, confirm_slug: str) -> None:
    access.require(Perm.DELETE_WORKSPACE)
    if access.workspace.is_personal:
        raise ServiceError("Your personal workspace cannot be deleted.")
    if confirm_slug.strip() != access.workspace.slug:
        raise ServiceError(f"Type {access.workspace.slug} to confirm the deletion.")
    access.workspace.delete()


@transaction.atomic
def workspace_transfer_ownership(*, access: WorkspaceAccess, membership: Membership) -> None:
    """Make another member the owner; the current owner stays on as an admin."""
    access.require(Perm.TRANSFER_OWNERSHIP)
    if membership.user_id == access.user.pk:
        raise ServiceError("You already own this workspace.")
    if access.workspace.is_personal:
        raise ServiceError("A personal workspace cannot change hands.")
    Membership.objects.filter(pk=membership.pk).update(role=Role.OWNER)
    Membership.objects.filter(workspace=access.workspace, user=access.user).update(role=Role.ADMIN)
