import re

import pytest
from django.urls import reverse

from tests.workspaces.factories import UserFactory


@pytest.mark.django_db
def test_unknown_workspace_slug_is_a_friendly_404(team, client):
    client.force_login(team.owner)
    response = client.get("/w/no-such-team/projects/")
    assert response.status_code == 404
    assert b"not a member of" in response.content


@pytest.mark.django_db
def test_member_without_the_role_sees_why(team, client):
    client.force_login(team.viewer)
    response = client.get(reverse("member_list", kwargs={"ws_slug": "acme"}))
    assert response.status_code == 403
    assert b"You need the admin role in Acme Vision to manage members; you are viewer." in (
        response.content
    )


@pytest.mark.django_db
def test_landing_page_for_visitors(client):
    page = client.get("/")
    assert page.status_code == 200
    assert b"/accounts/signup/" in page.content


@pytest.mark.django_db
def test_password_reset_by_email(client, plans, mailoutbox):
    UserFactory(email="forgetful@acme.test")
    response = client.post(reverse("account_reset_password"), {"email": "forgetful@acme.test"})
    assert response.status_code == 302
    assert len(mailoutbox) == 1
    link = re.search(r"http://testserver(/accounts/password/reset/key/\S+)", mailoutbox[0].body)
    form = client.get(link.group(1), follow=True)
    assert form.status_code == 200
    response = client.post(
        form.redirect_chain[-1][0] if form.redirect_chain else link.group(1),
        {"password1": "a brand new passphrase 42", "password2": "a brand new passphrase 42"},
    )
    assert response.status_code == 302
    client.logout()
    assert client.login(email="forgetful@acme.test", password="a brand new passphrase 42")


@pytest.mark.django_db
def test_pages_send_a_csp_without_inline_script(team, client):
    client.force_login(team.owner)
    response = client.get(reverse("workspace_detail", kwargs={"ws_slug": "acme"}))
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert b"<script>" not in response.content
    assert b'hx-headers=\'{"X-CSRFToken"' in response.content
    assert b"/static/django_htmx/htmx" in response.content  # vendored, no CDN


@pytest.mark.django_db
def test_logout_needs_a_post(team, client):
    client.force_login(team.owner)
    client.post(reverse("account_logout"))
    response = client.get(reverse("workspace_detail", kwargs={"ws_slug": "acme"}))
    assert response.status_code == 302
