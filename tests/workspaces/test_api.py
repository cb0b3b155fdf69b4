import re

import pytest
from django.test import Client

from tests.workspaces.factories import ProjectFactory
from workspaces.models import Membership, Project
from workspaces.services.keys import api_key_create, api_key_revoke


def _key(team, role="admin", scopes=("read", "write")):
    _, raw = api_key_create(access=team.access(role), name="k", scopes=list(scopes))
    return Client(headers={"Authorization": f"Bearer {raw}"})


@pytest.mark.django_db
def test_key_lists_and_creates_projects(team):
    api = _key(team)
    assert api.get("/api/v1/workspaces").json() == [
        {
            "slug": "acme",
            "name": "Acme Vision",
            "is_personal": False,
            "plan": "Pro",
            "role": "admin",
        }
    ]
    created = api.post(
        "/api/v1/workspaces/acme/projects",
        {"name": "Birds", "description": "d"},
        content_type="application/json",
    )
    assert created.status_code == 201
    pid = created.json()["id"]
    listing = api.get("/api/v1/workspaces/acme/projects").json()
    assert listing["count"] == 1 and listing["items"][0]["name"] == "Birds"
    patched = api.patch(
        f"/api/v1/workspaces/acme/projects/{pid}",
        {"name": "Raptors"},
        content_type="application/json",
    )
    assert patched.json()["name"] == "Raptors" and patched.json()["description"] == "d"
    assert api.delete(f"/api/v1/workspaces/acme/projects/{pid}").status_code == 204
    assert not Project.objects.exists()


@pytest.mark.django_db
def test_duplicate_and_empty_names_get_400_with_reason(team):
    api = _key(team)
    ProjectFactory(workspace=team.workspace, name="Birds")
    response = api.post(
        "/api/v1/workspaces/acme/projects", {"name": "BIRDS"}, content_type="application/json"
    )
    assert response.status_code == 400 and "already exists" in response.json()["detail"]
    response = api.post(
        "/api/v1/workspaces/acme/projects", {"name": "  "}, content_type="application/json"
    )
    assert response.status_code == 400
    response = api.post(
        "/api/v1/workspaces/acme/projects", {"nome": "x"}, content_type="application/json"
    )
    assert response.status_code == 422


@pytest.mark.django_db
def test_key_without_scope_gets_403_naming_the_scope(team):
    api = _key(team, scopes=("read",))
    response = api.post(
        "/api/v1/workspaces/acme/projects", {"name": "x"}, content_type="application/json"
    )
    assert response.status_code == 403
    assert "lacks the scope" in response.json()["detail"]


@pytest.mark.django_db
def test_key_is_capped_by_its_creators_current_role(team):
    api = _key(team, role="admin", scopes=("read", "keys"))
    read_only = _key(team, role="owner", scopes=("read",))
    assert api.get("/api/v1/workspaces/acme/keys").status_code == 200
    Membership.objects.filter(user=team.admin).update(role="editor")
    assert api.get("/api/v1/workspaces/acme/keys").status_code == 403  # editors manage no keys
    member = Membership.objects.get(user=team.viewer)
    response = read_only.patch(
        f"/api/v1/workspaces/acme/members/{member.pk}",
        {"role": "admin"},
        content_type="application/json",
    )
    assert response.status_code == 403
    member.refresh_from_db()
    assert member.role == "viewer"


@pytest.mark.django_db
def test_key_stops_working_when_its_creator_leaves(team):
    api = _key(team, role="admin")
    assert api.get("/api/v1/workspaces/acme").status_code == 200
    Membership.objects.filter(user=team.admin).delete()
    assert api.get("/api/v1/workspaces/acme").status_code == 404


@pytest.mark.django_db
def test_other_workspace_via_key_is_404_and_bad_keys_401(team, stranger):
    api = _key(team)
    ProjectFactory(workspace=stranger.memberships.get().workspace, name="Secret")
    assert api.get("/api/v1/workspaces/elsewhere/projects").status_code == 404
    assert api.get("/api/v1/workspaces/nope").status_code == 404
    for header in ["Bearer ksk_abc", "Bearer nonsense", "Basic Zm9vOmJhcg==", "Bearer "]:
        response = Client(headers={"Authorization": header}).get("/api/v1/workspaces")
        assert response.status_code == 401
    assert Client().get("/api/v1/workspaces").status_code == 401


@pytest.mark.django_db
def test_revoked_key_gets_401(team):
    key, raw = api_key_create(access=team.access("admin"), name="k", scopes=["read"])
    api = Client(headers={"Authorization": f"Bearer {raw}"})
    assert api.get("/api/v1/workspaces").status_code == 200
    api_key_revoke(access=team.access("admin"), key=key)
    assert api.get("/api/v1/workspaces").status_code == 401


@pytest.mark.django_db
def test_key_creation_returns_plaintext_once(team):
    api = _key(team, scopes=("predict", "keys"))
    created = api.post(
        "/api/v1/workspaces/acme/keys",
        {"name": "bot", "scopes": ["predict"]},
        content_type="application/json",
    ).json()
    assert created["key"].startswith("ul_" + created["prefix"])
    listed = api.get("/api/v1/workspaces/acme/keys").json()
    assert all("key" not in k for k in listed)
    assert {k["name"] for k in listed} == {"k", "bot"}


@pytest.mark.django_db
def test_session_user_uses_the_api_and_sees_all_own_workspaces(team, stranger, client):
    client.force_login(team.viewer)
    slugs = {w["slug"] for w in client.get("/api/v1/workspaces").json()}
    assert slugs == {"acme"}
    members = client.get("/api/v1/workspaces/acme/members").json()
    assert members["count"] == 4


@pytest.mark.django_db
def test_openapi_docs_are_served_without_a_cdn(client):
    page = client.get("/api/v1/docs")
    assert page.status_code == 200
    # Every script, stylesheet and icon comes from Kestrel's own origin. (The page also
    # carries a random CSRF token, so a plain search for "cdn" would fail now and then.)
    html = page.content.decode()
    addresses = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)["']""", html)
    assert any(a.endswith("swagger-ui-bundle.js") for a in addresses)
    assert all(a.startswith("/") and not a.startswith("//") for a in addresses), addresses
    schema = client.get("/api/v1/openapi.json").json()
    assert "/api/v1/workspaces/{slug}/projects" in schema["paths"]


@pytest.mark.django_db
def test_bad_input_is_refused_with_a_reason_never_a_500(team):
    api = _key(team, scopes=("read", "write", "members", "keys"))
    url = "/api/v1/workspaces/acme/projects"
    too_long = api.post(url, {"name": "x" * 101}, content_type="application/json")
    assert too_long.status_code == 422
    assert api.post(url, "not json", content_type="application/json").status_code in (400, 422)
    assert api.get("/api/v1/workspaces/acme/projects/abc").status_code == 422
    assert api.get("/api/v1/workspaces/acme/projects/999999").status_code == 404
    naive = api.post(
        "/api/v1/workspaces/acme/keys",
        {"name": "n", "scopes": ["read"], "expires_at": "2099-01-01T00:00:00"},
        content_type="application/json",
    )
    assert naive.status_code == 201
    assert naive.json()["expires_at"].startswith("2099-01-01T00:00:00")
    past = api.post(
        "/api/v1/workspaces/acme/keys",
        {"name": "n", "scopes": ["read"], "expires_at": "2001-01-01T00:00:00Z"},
        content_type="application/json",
    )
    assert past.status_code == 400 and "future" in past.json()["detail"]
    bad_scope = api.post(
        "/api/v1/workspaces/acme/keys",
        {"name": "n", "scopes": ["root"]},
        content_type="application/json",
    )
    assert bad_scope.status_code == 400
    member = Membership.objects.get(user=team.viewer)
    forged = api.patch(
        f"/api/v1/workspaces/acme/members/{member.pk}",
        {"role": "owner"},
        content_type="application/json",
    )
    assert forged.status_code == 400 and "cannot give" in forged.json()["detail"]
