import hashlib
import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from core.errors import ServiceError
from tests.workspaces.factories import MembershipFactory, WorkspaceFactory
from workspaces.models import ApiKey, Role
from workspaces.services import keys
from workspaces.services.keys import api_key_authenticate, api_key_create, api_key_revoke


def _create(team, **kwargs):
    defaults = {"name": "ci", "scopes": ["read"]}
    defaults.update(kwargs)
    return api_key_create(access=team.access("admin"), **defaults)


@pytest.mark.django_db
def test_key_format_and_only_its_hash_is_stored(team):
    """Issue 20: `ul_` + 40 hex, the only form `yolo login` keeps; the first 16 hex find it."""
    key, raw = _create(team)
    assert re.fullmatch(r"ul_[0-9a-f]{40}", raw), raw
    assert raw[3:19] == key.prefix and str(key) == f"ci (ul_{key.prefix}…)"
    assert key.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM workspaces_apikey")
        rows = cursor.fetchall()
    secret = raw[19:]
    assert len(secret) == 24 and secret not in repr(rows) and raw not in repr(rows)
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
    hexes = raw[3:]
    for malformed in [
        "ul_" + hexes.upper(),  # `yolo login` keeps lowercase hex only; so does Kestrel
        "UL_" + hexes,
        raw[:-1],
        raw + "0",
        raw + "\n",
        " " + raw,
        "ul_" + hexes[:-1] + "g",
        f"ksk_{key.prefix}_{hexes[16:]}",  # the new key's parts in the old form
        f"ul_{key.prefix}",
    ]:
        assert api_key_authenticate(raw=malformed) is None, malformed


@pytest.mark.django_db
def test_keys_issued_before_issue_20_keep_working_beside_new_ones(team):
    """A `ksk_` key already issued (12-hex prefix, only its SHA-256 stored) still authenticates;
    a new key whose 16-hex prefix starts with the old key's 12 is another key, and neither
    unlocks the other."""
    new, new_raw = _create(team)
    old_prefix = new.prefix[:12]
    old_raw = f"ksk_{old_prefix}_{'Zx-9' * 10}a"
    old = ApiKey.objects.create(
        workspace=team.workspace,
        name="legacy",
        prefix=old_prefix,
        key_hash=hashlib.sha256(old_raw.encode()).hexdigest(),
        scopes=["read"],
        created_by=team.admin,
    )
    assert api_key_authenticate(raw=old_raw) == old and str(old) == f"legacy (ksk_{old_prefix}_…)"
    assert api_key_authenticate(raw=new_raw) == new
    assert api_key_authenticate(raw=f"ksk_{old_prefix}_{new_raw[15:]}") is None
    api = Client(headers={"Authorization": f"Bearer {old_raw}"})
    assert api.get("/api/v1/workspaces/acme").status_code == 200
    listing = Client()
    listing.force_login(team.admin)
    page = listing.get(reverse("api_key_list", kwargs={"ws_slug": "acme"})).content.decode()
    assert f"ksk_{old_prefix}_…" in page and f"ul_{new.prefix}…" in page


@pytest.mark.django_db
def test_a_prefix_already_taken_draws_again(team, monkeypatch):
    """Two keys can never share a prefix (unique): a draw that hits one draws again, inside the
    same transaction, and the key made is whole and works."""
    taken, _ = _create(team)
    draws = iter([taken.prefix + "0" * 24, "ab" * 20])
    monkeypatch.setattr(keys.secrets, "token_hex", lambda n: next(draws))
    key, raw = _create(team, name="second")
    assert raw == "ul_" + "ab" * 20 and key.prefix == "ab" * 8
    assert api_key_authenticate(raw=raw) == key
    assert ApiKey.objects.count() == 2


@pytest.mark.django_db
def test_a_generator_that_only_draws_taken_prefixes_fails_clearly_and_writes_nothing(
    team, monkeypatch
):
    taken, _ = _create(team)
    monkeypatch.setattr(keys.secrets, "token_hex", lambda n: taken.prefix + "1" * 24)
    with pytest.raises(ServiceError, match="unused key prefix"):
        _create(team, name="never")
    assert list(ApiKey.objects.values_list("name", flat=True)) == ["ci"]


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
    assert f"ul_{key.prefix}…".encode() in listing.content
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
    assert raw.startswith(f"ul_{key.prefix}") and api_key_authenticate(raw=raw) == key
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
