import hashlib
import re
from datetime import timedelta
from urllib.parse import quote

import pytest
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.urls import reverse
from django.utils import timezone

from core.errors import ServiceError
from tests.workspaces.factories import PASSWORD, UserFactory
from workspaces.models import Invitation, Membership, Role
from workspaces.selectors import workspace_access_for_user
from workspaces.services.invitations import (
    invitation_accept,
    invitation_create,
    invitation_from_token,
    invitation_token,
    invitations_purge_expired,
)
from workspaces.tasks import invitations_purge_expired_task

BASE = "http://testserver/"


def _invite(team, email="new@acme.test", role=Role.EDITOR, by="admin"):
    return invitation_create(access=team.access(by), email=email, role=role, base_url=BASE)


def _link_from_email(mail) -> str:
    return re.search(r"http://testserver(/invite/[^/\s]+/)", mail.body).group(1)


@pytest.mark.django_db(transaction=True)
def test_invite_sends_a_link_that_joins_with_the_invited_role(team, mailoutbox, client):
    invitation = _invite(team, role=Role.VIEWER)
    assert len(mailoutbox) == 1
    assert mailoutbox[0].to == ["new@acme.test"]
    path = _link_from_email(mailoutbox[0])
    token = path.strip("/").split("/")[-1]  # random, kept only as its hash
    assert hashlib.sha256(token.encode()).hexdigest() == Invitation.objects.get().token_hash
    assert invitation.accept_url == f"http://testserver{path}"  # what the inviter is shown

    invitee = UserFactory(email="new@acme.test")
    client.force_login(invitee)
    page = client.get(path)
    assert page.status_code == 200
    assert b"Join Acme Vision" in page.content
    response = client.post(path)
    assert response.status_code == 302
    assert Membership.objects.get(workspace=team.workspace, user=invitee).role == Role.VIEWER


@pytest.mark.django_db
def test_anonymous_invitee_is_sent_to_sign_up_then_back(team, client):
    path = reverse("invitation_accept", kwargs={"token": invitation_token(_invite(team))})
    page = client.get(path)
    assert page.status_code == 200
    assert f"/accounts/signup/?next={quote(path)}".encode() in page.content
    assert f"/accounts/login/?next={quote(path)}".encode() in page.content
    response = client.post(path)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("account_login"))


@pytest.mark.django_db
def test_invitation_cannot_be_used_twice(team, client):
    invitation = _invite(team)
    invitee = UserFactory(email="new@acme.test")
    invitation_accept(invitation=invitation, user=invitee)
    with pytest.raises(ServiceError, match="already been used"):
        invitation_accept(invitation=invitation, user=invitee)
    client.force_login(invitee)
    page = client.get(reverse("invitation_accept", kwargs={"token": invitation_token(invitation)}))
    assert page.status_code == 404
    assert b"already been used" in page.content


@pytest.mark.django_db
def test_invitation_expires_after_14_days(team, client):
    invitation = _invite(team)
    token = invitation_token(invitation)
    Invitation.objects.filter(pk=invitation.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    with pytest.raises(ServiceError, match="expired"):
        invitation_from_token(token)
    page = client.get(reverse("invitation_accept", kwargs={"token": token}))
    assert b"Sign in to see this invitation" in page.content  # nothing more to a stranger
    client.force_login(UserFactory(email="new@acme.test"))
    page = client.get(reverse("invitation_accept", kwargs={"token": token}))
    assert page.status_code == 404
    assert b"expired" in page.content


@pytest.mark.django_db
def test_signed_link_older_than_14_days_is_refused_even_if_row_says_otherwise(team, settings):
    invitation = _invite(team)
    token = invitation_token(invitation)
    settings.INVITATION_MAX_AGE = timedelta(seconds=-1)
    with pytest.raises(ServiceError, match="expired"):
        invitation_from_token(token)


@pytest.mark.django_db
def test_forged_or_mangled_token_is_refused(team, client):
    invitation = _invite(team)
    forged = signing.dumps({"i": invitation.pk}, salt="another-salt")
    for token in [forged, invitation_token(invitation)[:-3] + "abc", "garbage"]:
        page = client.get(reverse("invitation_accept", kwargs={"token": token}))
        assert page.status_code == 404
        assert b"not valid" in page.content


@pytest.mark.django_db
def test_invitation_is_bound_to_the_invited_address(team):
    invitation = _invite(team)
    other = UserFactory(email="someone-else@acme.test")
    with pytest.raises(ServiceError, match="sent to n•••@acme.test"):
        invitation_accept(invitation=invitation, user=other)
    assert not Membership.objects.filter(user=other, workspace=team.workspace).exists()


@pytest.mark.django_db
def test_admin_cannot_invite_an_owner_but_owner_can(team):
    with pytest.raises(ServiceError, match="cannot invite"):
        _invite(team, role=Role.OWNER, by="admin")
    assert _invite(team, role=Role.OWNER, by="owner").role == Role.OWNER


@pytest.mark.django_db
def test_forged_role_in_the_invite_form_is_refused(team, client):
    client.force_login(team.admin)
    url = reverse("member_invite", kwargs={"ws_slug": "acme"})
    for role in ["owner", "superuser"]:
        response = client.post(url, {"email": "x@acme.test", "role": role})
        assert response.status_code == 400
        assert b"Select a valid choice" in response.content
    assert not Invitation.objects.filter(email="x@acme.test").exists()


@pytest.mark.django_db
def test_editors_and_viewers_cannot_invite(team):
    for role in ["editor", "viewer"]:
        with pytest.raises(PermissionDenied, match="admin role"):
            _invite(team, by=role)
    assert not Invitation.objects.exists()


@pytest.mark.django_db
def test_inviting_a_member_or_into_a_personal_workspace_is_refused(team, stranger):
    with pytest.raises(ServiceError, match="already a member"):
        _invite(team, email="Viewer@ACME.test")
    access = workspace_access_for_user(user=stranger, slug="elsewhere")
    access.workspace.is_personal = True
    access.workspace.save()
    with pytest.raises(ServiceError, match="Personal workspaces"):
        invitation_create(access=access, email="a@b.test", role=Role.EDITOR, base_url=BASE)


@pytest.mark.django_db
def test_reinviting_renews_the_open_invitation(team):
    first = _invite(team, role=Role.VIEWER)
    second = _invite(team, email="NEW@acme.test", role=Role.EDITOR)
    assert first.pk == second.pk
    assert Invitation.objects.get().role == Role.EDITOR


@pytest.mark.django_db
def test_seats_include_pending_invitations(team):
    plan = team.workspace.plan
    plan.max_seats = 5  # four members already
    plan.save()
    _invite(team, email="fifth@acme.test")
    with pytest.raises(ServiceError, match="allows 5 seats"):
        _invite(team, email="sixth@acme.test")


@pytest.mark.django_db
def test_revoked_invitation_link_stops_working(team, client):
    invitation = _invite(team)
    client.force_login(team.admin)
    client.post(reverse("invitation_revoke", kwargs={"ws_slug": "acme", "pk": invitation.pk}))
    page = client.get(reverse("invitation_accept", kwargs={"token": invitation_token(invitation)}))
    assert page.status_code == 404
    assert b"withdrawn" in page.content


@pytest.mark.django_db
def test_beat_task_purges_expired_open_invitations_only(team):
    expired = _invite(team, email="old@acme.test")
    live = _invite(team, email="live@acme.test")
    accepted = _invite(team, email="joined@acme.test")
    invitation_accept(invitation=accepted, user=UserFactory(email="joined@acme.test"))
    Invitation.objects.filter(pk__in=[expired.pk, accepted.pk]).update(
        expires_at=timezone.now() - timedelta(days=1)
    )
    assert invitations_purge_expired_task() == 1
    assert set(Invitation.objects.values_list("email", flat=True)) == {
        "live@acme.test",
        "joined@acme.test",
    }
    assert invitations_purge_expired() == 0
    assert live.pk in Invitation.objects.values_list("pk", flat=True)


@pytest.mark.django_db
def test_signup_creates_a_personal_workspace_and_login_uses_email(client, plans):
    response = client.post(
        reverse("account_signup"),
        {"email": "Fresh@Example.com", "password1": PASSWORD, "password2": PASSWORD},
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("account_email_verification_sent")
    membership = Membership.objects.select_related("workspace").get(
        user__email__iexact="fresh@example.com"
    )
    assert membership.workspace.is_personal and membership.role == Role.OWNER
