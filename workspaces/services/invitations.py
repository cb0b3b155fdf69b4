"""Invitations: the link's token, create and send, accept, revoke, purge; and what the
signed-in account holds of the invited address."""

import hashlib
import secrets
from datetime import datetime
from enum import StrEnum

from allauth.account.models import EmailAddress
from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.urls import reverse
from django.utils import timezone

from core.errors import ServiceError
from workspaces.models import (
    Invitation,
    Membership,
    Role,
    User,
    Workspace,
)
from workspaces.permissions import Perm, roles_assignable_by
from workspaces.selectors import (
    WorkspaceAccess,
    workspace_seats_used,
)
from workspaces.services.workspaces import user_signup_credits_grant

NOT_VALID = "This invitation link is not valid."
EXPIRED = "This invitation has expired. Ask for a new one."


def _token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@transaction.atomic
def invitation_token(invitation: Invitation) -> str:
    """A new link token for the invitation: random and opaque (no id, no address, nothing to
    decode), kept only as its hash. An earlier link of the invitation stops working."""
    token = secrets.token_urlsafe(32)
    invitation.token_hash = _token_hash(token)
    invitation.token_issued_at = timezone.now()
    invitation.save(update_fields=["token_hash", "token_issued_at"])
    return token


def _invitation_for_token(token: str) -> Invitation:
    """The invitation whose link this is, its link not older than INVITATION_MAX_AGE; or
    ServiceError. A link made before links were opaque (a signed id and address) names none."""
    if not isinstance(token, str) or not 20 <= len(token) <= 100:
        raise ServiceError(NOT_VALID)
    invitation = (
        Invitation.objects.select_related("workspace", "invited_by")
        .filter(token_hash=_token_hash(token))
        .first()
    )
    if invitation is None or invitation.token_issued_at is None:
        raise ServiceError(NOT_VALID)
    if invitation.token_issued_at + settings.INVITATION_MAX_AGE <= timezone.now():
        raise ServiceError(EXPIRED)
    return invitation


def invitation_token_check(token: str) -> None:
    """ServiceError unless the link is a live one. Says nothing about the invitation itself
    (for anonymous visitors): whether it was used, withdrawn or whom it is for."""
    _invitation_for_token(token)


def invitation_from_token(token: str) -> Invitation:
    """The invitation a link names, or ServiceError saying why the link cannot be used."""
    invitation = _invitation_for_token(token)
    if invitation.revoked_at is not None:
        raise ServiceError("This invitation was withdrawn.")
    if invitation.accepted_at is not None:
        raise ServiceError("This invitation has already been used.")
    if invitation.expires_at <= timezone.now():
        raise ServiceError(EXPIRED)
    return invitation


def invitation_accept_url(token: str, *, base_url: str) -> str:
    path = reverse("invitation_accept", kwargs={"token": token})
    return base_url.rstrip("/") + path


@transaction.atomic
def invitation_create(
    *, access: WorkspaceAccess, email: str, role: str, base_url: str
) -> Invitation:
    """Invite someone by email; inviting the same address again renews the open invitation
    (with a new link: the earlier one stops working). The invitation returned carries the link
    as `accept_url`, which is not stored."""
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
    # Known only now: the inviter's page shows it once (`accept_url`), the mail carries it.
    url = invitation_accept_url(invitation_token(invitation), base_url=base_url)
    invitation.accept_url = url
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


@transaction.atomic
def user_address_confirm(*, user: User) -> None:
    """Mark the account's own address confirmed: for accounts an operator makes (the seeded
    superuser), whose address nobody else chose. Like a confirmation link, it brings the
    person's sign-up credits, once."""
    EmailAddress.objects.update_or_create(
        user=user, email__iexact=user.email, defaults={"email": user.email, "verified": True}
    )
    if not EmailAddress.objects.filter(user=user, primary=True).exists():
        EmailAddress.objects.filter(user=user, email__iexact=user.email).update(primary=True)
    user_signup_credits_grant(user=user)  # confirmed like anyone else: their credits, once


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
