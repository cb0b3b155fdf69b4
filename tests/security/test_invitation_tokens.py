"""Issue 31, "smaller": an invitation link carried a readable id and address.

The link's token was Django's signed value of {"i": <invitation id>, "e": <address>}: signed,
not secret, so whoever saw the link (a forwarded mail, a proxy's log, a browser's history) could
read whom it was for and which row it named. Now the link carries a random token, kept only as
its hash on the invitation; links in the old form, even ones this install signed, name nothing.
"""

import base64
import hashlib
import re
import zlib

import pytest
from django.core import signing
from django.forms.models import model_to_dict
from django.urls import reverse

from tests.workspaces.factories import UserFactory
from workspaces.models import Invitation, Membership, Role
from workspaces.services.invitations import invitation_create

pytestmark = pytest.mark.django_db

BASE = "http://testserver/"
EMAIL = "ada.lovelace@acme.test"


def _invite(team, email: str = EMAIL, role: str = Role.EDITOR) -> Invitation:
    return invitation_create(access=team.access("owner"), email=email, role=role, base_url=BASE)


def _mailed_token(mail) -> str:
    return re.search(r"http://testserver/invite/([^/\s]+)/", mail.body).group(1)


def _readable(token: str) -> bytes:
    """Everything the token's parts say when decoded as Django's signing writes them
    (base64, zlib-compressed when it starts with a dot): what anyone holding it can read."""
    said = b""
    for part in token.split(":"):
        compressed = part.startswith(".")
        raw = part.lstrip(".")
        try:
            data = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4))
        except ValueError:
            continue
        if compressed:
            try:
                data = zlib.decompress(data)
            except zlib.error:
                continue
        said += data
    return said


def test_an_invitation_link_says_nothing_about_whom_it_is_for(
    team, mailoutbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):  # the mail goes once it commits
        invitation = _invite(team)
    token = _mailed_token(mailoutbox[-1])
    said = _readable(token)
    assert EMAIL.encode() not in said and b"acme.test" not in said
    assert f'"i":{invitation.pk}'.encode() not in said.replace(b" ", b"")
    assert ":" not in token and len(token) >= 40  # one random value, not a signed payload
    # Kept only as its hash: the row does not hold the link.
    row = Invitation.objects.get(pk=invitation.pk)
    assert row.token_hash == hashlib.sha256(token.encode()).hexdigest()
    assert token not in repr(model_to_dict(row))


def test_an_old_form_link_signed_by_this_install_joins_nobody(team, client):
    """What the old code mailed: the id and address, signed with this install's own key."""
    invitation = _invite(team)
    old = signing.dumps({"i": invitation.pk, "e": EMAIL}, salt="kestrel.invitation", compress=True)
    invitee = UserFactory(email=EMAIL)
    client.force_login(invitee)
    path = reverse("invitation_accept", kwargs={"token": old})
    page = client.get(path)
    assert page.status_code == 404 and b"not valid" in page.content
    client.post(path)
    assert not Membership.objects.filter(workspace=team.workspace, user=invitee).exists()


def test_inviting_again_sends_a_new_link_and_the_first_stops_working(
    team, client, mailoutbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        _invite(team)
    first = _mailed_token(mailoutbox[-1])
    with django_capture_on_commit_callbacks(execute=True):
        _invite(team, role=Role.VIEWER)
    second = _mailed_token(mailoutbox[-1])
    assert first != second
    invitee = UserFactory(email=EMAIL)
    client.force_login(invitee)
    stale = client.get(reverse("invitation_accept", kwargs={"token": first}))
    assert stale.status_code == 404 and b"not valid" in stale.content
    fresh = reverse("invitation_accept", kwargs={"token": second})
    assert client.get(fresh).status_code == 200
    client.post(fresh)
    membership = Membership.objects.get(workspace=team.workspace, user=invitee)
    assert membership.role == Role.VIEWER
