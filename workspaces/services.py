"""Writes. Every change to users' workspaces goes through one of these functions."""

import secrets
from datetime import UTC, datetime
from enum import StrEnum

from allauth.account.models import EmailAddress
from django.conf import settings
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone
from django.utils.text import slugify

from billing.plans import plan_default
from core.errors import ServiceError
from workspaces.models import (
    ApiKey,
    ApiKeyScope,
    Invitation,
    Membership,
    Project,
    Role,
    User,
    Workspace,
)
from workspaces.permissions import ROLE_RANK, Perm, roles_assignable_by
from workspaces.selectors import (
    API_KEY_PREFIX_BYTES,
    PresentedKey,
    WorkspaceAccess,
    api_key_last_use_note,
    workspace_seats_used,
)

# --- workspaces -------------------------------------------------------------------------------


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
    from billing.ledger import account_open

    account_open(workspace)  # the signup credits, granted now, in this transaction
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


# --- members ----------------------------------------------------------------------------------


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


# --- invitations ------------------------------------------------------------------------------

_INVITE_SALT = "kestrel.invitation"


def invitation_token(invitation: Invitation) -> str:
    """The link's token: names the one invitation and the address it was sent to, signed with
    the install's secret, and expires with the invitation."""
    return signing.dumps(
        {"i": invitation.pk, "e": invitation.email.lower()}, salt=_INVITE_SALT, compress=True
    )


def _invitation_token_claims(token: str) -> dict:
    try:
        data = signing.loads(
            token, salt=_INVITE_SALT, max_age=settings.INVITATION_MAX_AGE.total_seconds()
        )
    except signing.SignatureExpired:
        raise ServiceError("This invitation has expired. Ask for a new one.") from None
    except signing.BadSignature:
        raise ServiceError("This invitation link is not valid.") from None
    if not isinstance(data, dict) or not isinstance(data.get("i"), int):
        raise ServiceError("This invitation link is not valid.")
    return data


def invitation_token_check(token: str) -> None:
    """ServiceError unless the link is one this server signed and it has not expired. Reads
    nothing, so it says nothing about the invitation itself (for anonymous visitors)."""
    _invitation_token_claims(token)


def invitation_from_token(token: str) -> Invitation:
    """The invitation a link names, or ServiceError saying why the link cannot be used."""
    data = _invitation_token_claims(token)
    invitation = (
        Invitation.objects.select_related("workspace", "invited_by").filter(pk=data["i"]).first()
    )
    if invitation is not None and invitation.email.lower() != data.get("e"):
        invitation = None  # minted for another address: not this invitation's link
    if invitation is None or invitation.revoked_at is not None:
        raise ServiceError("This invitation was withdrawn.")
    if invitation.accepted_at is not None:
        raise ServiceError("This invitation has already been used.")
    if invitation.expires_at <= timezone.now():
        raise ServiceError("This invitation has expired. Ask for a new one.")
    return invitation


def invitation_accept_url(invitation: Invitation, *, base_url: str) -> str:
    path = reverse("invitation_accept", kwargs={"token": invitation_token(invitation)})
    return base_url.rstrip("/") + path


@transaction.atomic
def invitation_create(
    *, access: WorkspaceAccess, email: str, role: str, base_url: str
) -> Invitation:
    """Invite someone by email; inviting the same address again renews the open invitation."""
    access.require(Perm.MANAGE_MEMBERS)
    workspace = Workspace.objects.select_for_update().get(pk=access.workspace.pk)
    email = User.objects.normalize_email(email.strip())
    if workspace.is_personal:
        raise ServiceError("Personal workspaces have one member. Create a team to invite people.")
    if role not in roles_assignable_by(access.role):
        raise ServiceError(f"You cannot invite someone as “{role}”.")
    if Membership.objects.filter(workspace=workspace, user__email__iexact=email).exists():
        raise ServiceError(f"{email} is already a member.")
    now = timezone.now()
    invitation = (
        Invitation.objects.for_workspace(workspace)
        .filter(email__iexact=email, accepted_at__isnull=True, revoked_at__isnull=True)
        .first()
    )
    if invitation is None:
        if workspace_seats_used(workspace=workspace) >= workspace.plan.max_seats:
            raise ServiceError(
                f"The {workspace.plan.name} plan allows {workspace.plan.max_seats} seats, "
                "counting pending invitations. Remove someone or change plan."
            )
        invitation = Invitation(workspace=workspace, email=email)
    invitation.role = role
    invitation.invited_by = access.user
    invitation.expires_at = now + settings.INVITATION_MAX_AGE
    invitation.save()
    url = invitation_accept_url(invitation, base_url=base_url)
    inviter = access.user.display_name
    transaction.on_commit(
        lambda: send_mail(
            subject=f"{inviter} invited you to {workspace.name} on Kestrel",
            message=(
                f"{inviter} invited you to join the workspace “{workspace.name}” on Kestrel "
                f"as {Role(role).label.lower()}.\n\nAccept the invitation (valid for "
                f"{settings.INVITATION_MAX_AGE.days} days):\n{url}\n"
            ),
            from_email=None,
            recipient_list=[email],
        )
    )
    return invitation


@transaction.atomic
def invitation_accept(*, invitation: Invitation, user: User) -> Membership:
    invitation = (
        Invitation.objects.select_for_update().select_related("workspace").get(pk=invitation.pk)
    )
    if invitation.accepted_at is not None:
        raise ServiceError("This invitation has already been used.")
    if invitation.revoked_at is not None:
        raise ServiceError("This invitation was withdrawn.")
    if invitation.expires_at <= timezone.now():
        raise ServiceError("This invitation has expired. Ask for a new one.")
    problem = invitation_email_problem(invitation=invitation, user=user)
    if problem:
        raise ServiceError(problem)
    membership = Membership.objects.filter(workspace=invitation.workspace, user=user).first()
    if membership is None:
        membership = Membership.objects.create(
            workspace=invitation.workspace, user=user, role=invitation.role
        )
    invitation.accepted_at = timezone.now()
    invitation.accepted_by = user
    invitation.save(update_fields=["accepted_at", "accepted_by"])
    return membership


def user_address_confirm(*, user: User) -> None:
    """Mark the account's own address confirmed: for accounts an operator makes (the seeded
    superuser), whose address nobody else chose."""
    EmailAddress.objects.update_or_create(
        user=user, email__iexact=user.email, defaults={"email": user.email, "verified": True}
    )
    if not EmailAddress.objects.filter(user=user, primary=True).exists():
        EmailAddress.objects.filter(user=user, email__iexact=user.email).update(primary=True)


class InvitedAddress(StrEnum):
    """What the signed-in account holds of the address an invitation was sent to."""

    CONFIRMED = "confirmed"
    UNCONFIRMED = "unconfirmed"  # added, but the confirmation link was not opened yet
    ABSENT = "absent"


def invitation_address_state(*, invitation: Invitation, user: User) -> InvitedAddress:
    """allauth's email confirmation proves someone reads mail at an address."""
    address = EmailAddress.objects.filter(user=user, email__iexact=invitation.email).first()
    if address is None:
        return InvitedAddress.ABSENT
    return InvitedAddress.CONFIRMED if address.verified else InvitedAddress.UNCONFIRMED


def email_masked(email: str) -> str:
    """`ada.lovelace@example.com` as `a•••@example.com`: enough to tell which address."""
    local, _, domain = email.partition("@")
    return f"{local[:1]}•••@{domain}"


def invitation_email_problem(
    *, invitation: Invitation, user: User, state: InvitedAddress | None = None
) -> str | None:
    """Why `user` cannot accept yet, or None: they must hold the invited address, confirmed.
    `state`: invitation_address_state's answer, when the caller has it already."""
    state = state or invitation_address_state(invitation=invitation, user=user)
    if state == InvitedAddress.CONFIRMED:
        return None
    if state == InvitedAddress.UNCONFIRMED:
        return (
            f"Confirm your address {invitation.email} first: open the link in the "
            "confirmation mail Kestrel sent you, then come back to this invitation."
        )
    return (
        f"This invitation was sent to {email_masked(invitation.email)}, and you are signed in "
        f"as {user.email}. Sign in with the invited address (or add it to your account and "
        "confirm it) to accept."
    )


@transaction.atomic
def invitation_revoke(*, access: WorkspaceAccess, invitation: Invitation) -> None:
    access.require(Perm.MANAGE_MEMBERS)
    invitation.revoked_at = timezone.now()
    invitation.save(update_fields=["revoked_at"])


def invitations_purge_expired(*, older_than: datetime | None = None) -> int:
    """Delete open invitations that expired; accepted ones stay as the record of who joined."""
    cutoff = older_than or timezone.now()
    deleted, _ = Invitation.objects.filter(accepted_at__isnull=True, expires_at__lt=cutoff).delete()
    return deleted


# --- projects ---------------------------------------------------------------------------------


def _project_save(project: Project, update_fields: list[str] | None = None) -> Project:
    try:
        with transaction.atomic():
            project.save(update_fields=update_fields)
    except IntegrityError:
        raise ServiceError(f"A project named “{project.name}” already exists here.") from None
    return project


def _clean_name(name: str) -> str:
    name = name.strip()
    if not name:
        raise ServiceError("Give the project a name.")
    return name


@transaction.atomic
def project_create(*, access: WorkspaceAccess, name: str, description: str = "") -> Project:
    access.require(Perm.WRITE)
    project = Project(
        workspace=access.workspace,
        name=_clean_name(name),
        description=description.strip(),
        created_by=access.user,
    )
    return _project_save(project)


@transaction.atomic
def project_update(
    *, access: WorkspaceAccess, project: Project, name: str, description: str
) -> Project:
    access.require(Perm.WRITE)
    project.name = _clean_name(name)
    project.description = description.strip()
    return _project_save(project, update_fields=["name", "description", "updated_at"])


@transaction.atomic
def project_delete(*, access: WorkspaceAccess, project: Project, confirm_name: str) -> None:
    access.require(Perm.WRITE)
    if confirm_name.strip() != project.name:
        raise ServiceError(f"Type the project name “{project.name}” to confirm.")
    project.delete()


# --- API keys ---------------------------------------------------------------------------------

API_KEY_SECRET_BYTES = 32


@transaction.atomic
def api_key_create(
    *,
    access: WorkspaceAccess,
    name: str,
    scopes: list[str],
    expires_at: datetime | None = None,
) -> tuple[ApiKey, str]:
    """Create a key; the plaintext is returned once and never stored."""
    access.require(Perm.MANAGE_KEYS)
    name = name.strip()
    if not name:
        raise ServiceError("Give the key a name, so you know later what uses it.")
    unknown = set(scopes) - set(ApiKeyScope.values)
    if unknown or not scopes:
        raise ServiceError(f"Choose scopes among: {', '.join(ApiKeyScope.values)}.")
    if expires_at is not None and timezone.is_naive(expires_at):
        expires_at = timezone.make_aware(expires_at, UTC)  # the API documents UTC
    if expires_at is not None and expires_at <= timezone.now():
        raise ServiceError("The expiry must be in the future.")
    parent = access.api_key
    if parent is not None:
        # A key making a key (it has the keys scope, checked above) hands on only what it has.
        missing = [s for s in ApiKeyScope.values if s in scopes and s not in parent.scopes]
        if missing:
            raise PermissionDenied(
                f"This API key cannot grant scopes it does not have: {', '.join(missing)}."
            )
        if parent.expires_at is not None and (expires_at is None or expires_at > parent.expires_at):
            raise ServiceError(
                "A key made by a key must expire no later than it "
                f"({parent.expires_at:%Y-%m-%d %H:%M} UTC)."
            )
    prefix = secrets.token_hex(API_KEY_PREFIX_BYTES)
    raw = f"ksk_{prefix}_{secrets.token_urlsafe(API_KEY_SECRET_BYTES)}"
    key = ApiKey.objects.create(
        workspace=access.workspace,
        name=name,
        prefix=prefix,
        key_hash=PresentedKey(raw).hash,
        scopes=sorted(set(scopes), key=ApiKeyScope.values.index),
        created_by=access.user,
        expires_at=expires_at,
    )
    return key, raw


@transaction.atomic
def api_key_revoke(*, access: WorkspaceAccess, key: ApiKey) -> None:
    access.require(Perm.MANAGE_KEYS)
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])


def api_key_authenticate(*, raw: str) -> ApiKey | None:
    """The live key for a presented secret, or None (malformed, unknown, revoked, expired)."""
    presented = PresentedKey(raw)
    if presented.prefix is None:
        return None
    key = (
        ApiKey.objects.select_related("workspace", "created_by")
        .filter(prefix=presented.prefix)
        .first()
    )
    if key is None or not presented.matches(key.key_hash):
        return None
    now = timezone.now()
    if key.revoked_at is not None or (key.expires_at is not None and key.expires_at <= now):
        return None
    if not key.created_by.is_active:
        return None
    if api_key_last_use_note(key_id=key.pk, last_used_at=key.last_used_at, now=now):
        key.last_used_at = now
    return key
