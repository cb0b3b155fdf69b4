from datetime import timedelta

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone

from tests.workspaces.factories import MembershipFactory, WorkspaceFactory
from workspaces.models import ApiKey, Role
from workspaces.services.keys import api_key_authenticate, api_key_create, api_key_revoke


def _create(team, **kwargs):
    defaults = {"name": "ci", "scopes": ["read"]}
    defaults.update(kwargs)
    return api_key_create(access=team.access("admin"), **defaults)


@pytest.mark.django_db
def test_key_format_and_only_its_hash_is_stored(team):
    key, raw = _create(team)
    assert raw.startswith(f"ksk_{key.prefix}_")
    assert len(raw) > 50
    assert key.key_hash != raw and len(key.key_hash) == 64
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM workspaces_apikey")
        rows = cursor.fetchall()
    secret = raw.split("_", 2)[2]
    assert secret not in repr(rows) and raw not in repr(rows)
    assert api_key_authenticate(raw=raw) == key


@pytest.mark.django_db
def test_prefix_is_indexed_for_lookup(team):
    """Asked of the database through Django's introspection, so it holds on every engine."""
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, ApiKey._meta.db_table)
    # A unique constraint is kept by an index on PostgreSQL and SQLite alike.
    found = [
        name
        for name, c in constraints.items()
        if c["columns"][:1] == ["prefix"] and (c["index"] or c["unique"])
    ]
    assert found, constraints


@pytest.mark.django_db
def test_wrong_secret_with_a_real_prefix_is_refused(team):
    key, raw = _create(team)
    assert api_key_authenticate(raw=raw[:-4] + "AAAA") is None
    for malformed in ["", "ksk_", "ksk__", "Bearer x", f"ksk_{key.prefix}", "xyz_" + raw[4:]]:
        assert api_key_authenticate(raw=malformed) is None


@pytest.mark.django_db
def test_revoked_and_expired_keys_stop_working(team):
    key, raw = _create(team)
    api_key_revoke(access=team.access("admin"), key=key)
    assert api_key_authenticate(raw=raw) is None
    key2, raw2 = _create(team, expires_at=timezone.now() + timedelta(days=1))
    assert api_key_authenticate(raw=raw2) == key2
    ApiKey.objects.filter(pk=key2.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert api_key_authenticate(raw=raw2) is None


@pytest.mark.django_db
def test_last_used_is_recorded_at_most_once_a_minute(team, django_assert_num_queries):
    key, raw = _create(team)
    assert key.last_used_at is None
    with django_assert_num_queries(2):  # lookup + update
        api_key_authenticate(raw=raw)
    with django_assert_num_queries(1):  # lookup only
        api_key_authenticate(raw=raw)
    key.refresh_from_db()
    assert key.last_used_at is not None


@pytest.mark.django_db
def test_keys_page_shows_the_key_once_then_only_its_prefix(team, client):
    client.force_login(team.admin)
    url = reverse("api_key_list", kwargs={"ws_slug": "acme"})
    response = client.post(
        url, {"name": "ci runner", "scopes": ["read", "predict"], "expires_at": "2099-01-01"}
    )
    assert response.status_code == 302 and response["Location"] == url
    response = client.get(url)
    raw = response.context["new_key"]["raw"]
    assert raw.encode() in response.content
    key = ApiKey.objects.get()
    assert key.scopes == ["read", "predict"]
    assert key.expires_at.year == 2099
    listing = client.get(url)
    assert raw.encode() not in listing.content
    assert f"ksk_{key.prefix}".encode() in listing.content
    assert b"read, predict" in listing.content and b"never" in listing.content

    client.post(reverse("api_key_revoke", kwargs={"ws_slug": "acme", "pk": key.pk}))
    assert b"revoked" in client.get(url).content
    assert api_key_authenticate(raw=raw) is None


@pytest.mark.django_db
def test_reloading_the_keys_page_after_creating_shows_the_key_once_and_makes_no_second(
    team, client
):
    """Issue 16: the POST redirects, so a reload re-sends a GET; the plaintext is never in a URL."""
    client.force_login(team.admin)
    url = reverse("api_key_list", kwargs={"ws_slug": "acme"})
    response = client.post(url, {"name": "ci", "scopes": ["read"]}, follow=True)
    assert response.redirect_chain == [(url, 302)]
    key = ApiKey.objects.get()
    raw = response.context["new_key"]["raw"]
    assert raw.startswith(f"ksk_{key.prefix}_") and api_key_authenticate(raw=raw) == key
    assert response.content.count(raw.encode()) == 1
    assert "no-store" in response["Cache-Control"]
    for _ in range(2):  # reloading is a GET again: no key made, the plaintext gone
        reload = client.get(url)
        assert reload.status_code == 200 and reload.context["new_key"] is None
        assert raw.encode() not in reload.content and b"Copy it now" not in reload.content
    assert ApiKey.objects.count() == 1
    assert not any(k.startswith("new_api_key") for k in client.session.keys())


@pytest.mark.django_db
def test_a_new_key_is_shown_only_on_its_own_workspace_page(team, client):
    other = WorkspaceFactory(name="Other", slug="other")
    MembershipFactory(workspace=other, user=team.admin, role=Role.ADMIN)
    client.force_login(team.admin)
    client.post(
        reverse("api_key_list", kwargs={"ws_slug": "acme"}), {"name": "ci", "scopes": ["read"]}
    )
    elsewhere = client.get(reverse("api_key_list", kwargs={"ws_slug": "other"}))
    assert elsewhere.context["new_key"] is None
    assert client.get(reverse("api_key_list", kwargs={"ws_slug": "acme"})).context["new_key"]


@pytest.mark.django_db
def test_bad_key_input_gets_clear_errors(team, client):
    client.force_login(team.admin)
    url = reverse("api_key_list", kwargs={"ws_slug": "acme"})
    response = client.post(url, {"name": "x", "scopes": ["admin"]})
    assert response.status_code == 400 and b"Select a valid choice" in response.content
    response = client.post(url, {"name": "x", "scopes": ["read"], "expires_at": "2001-01-01"})
    assert response.status_code == 400 and b"must be in the future" in response.content
    assert not ApiKey.objects.exists()
