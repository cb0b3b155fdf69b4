"""Every route and API operation × every kind of caller.

A route or API operation without a row here fails `test_every_route_has_a_row`, so no future
page can skip the tenancy and role checks.
"""

from datetime import timedelta

import pytest
from django.contrib import admin
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse
from django.utils import timezone

from billing.plans import plans_seed
from config.api import api
from datasets.models import Import
from datasets.services.versions import version_create
from tests.authz import LOGIN, ApiRow, Row, _ws
from tests.conftest import stranger_create, team_create
from tests.datasets.factories import (
    DatasetClassFactory,
    DatasetFactory,
    ImageFactory,
    LabelFactory,
)
from tests.workspaces.factories import ProjectFactory
from workspaces.models import ApiKeyScope, Invitation, Membership
from workspaces.services.invitations import invitation_token
from workspaces.services.keys import api_key_create

ROLES = ["viewer", "editor", "admin", "owner"]
ACTORS = ["anonymous", *ROLES, "stranger"]
OUR_APPS = {
    "workspaces",
    "datasets",
    "annotation",
    "training",
    "billing",
    "deploy",
    "evaluations",
    "sweeps",
    "config",
}
ROUTES = [
    Row("home", "get", None, 302, anonymous=200, stranger=302),
    Row("workspace_create", "get", None, 200, stranger=200),
    Row("workspace_create", "post", None, 302, data={"name": "New team"}, stranger=302),
    Row(
        "invitation_accept",
        "get",
        None,
        200,
        kwargs={"token": "@token"},
        anonymous=200,
        stranger=200,
    ),
    Row("invitation_accept", "post", None, 200, kwargs={"token": "@token"}, stranger=200),
    Row("workspace_detail", "get", "viewer", 200, _ws()),
    Row("workspace_settings", "get", "viewer", 200, _ws()),
    Row("workspace_settings", "post", "admin", 302, _ws(), {"name": "Renamed"}),
    Row("workspace_delete", "post", "owner", 302, _ws(), {"confirm": "acme"}),
    Row("workspace_transfer", "post", "owner", 302, _ws(), {"membership": "@editor_membership"}),
    Row("workspace_leave", "get", "viewer", 200, _ws()),
    Row("workspace_leave", "post", "viewer", 302, _ws()),
    Row("workspace_billing", "get", "viewer", 200, _ws()),
    Row("member_list", "get", "admin", 200, _ws()),
    Row("member_invite", "post", "admin", 302, _ws(), {"email": "n@acme.test", "role": "viewer"}),
    Row("member_role", "post", "admin", 302, _ws(pk="@editor_membership"), {"role": "viewer"}),
    Row("member_remove", "post", "admin", 302, _ws(pk="@viewer_membership")),
    Row(
        "member_reviewer", "post", "admin", 302, _ws(pk="@editor_membership"), {"is_reviewer": "1"}
    ),
    Row("invitation_revoke", "post", "admin", 302, _ws(pk="@invitation")),
    Row("project_list", "get", "viewer", 200, _ws()),
    Row("project_create", "get", "editor", 200, _ws()),
    Row("project_create", "post", "editor", 302, _ws(), {"name": "Fresh"}),
    Row("project_detail", "get", "viewer", 200, _ws(pk="@project")),
    Row("project_edit", "get", "editor", 200, _ws(pk="@project")),
    Row("project_edit", "post", "editor", 302, _ws(pk="@project"), {"name": "Renamed"}),
    Row("project_delete", "get", "editor", 200, _ws(pk="@project")),
    Row("project_delete", "post", "editor", 302, _ws(pk="@project"), {"confirm": "Birds"}),
    Row("api_key_list", "get", "admin", 200, _ws()),
    Row("api_key_list", "post", "admin", 302, _ws(), {"name": "k", "scopes": ["read"]}),
    Row("api_key_revoke", "post", "admin", 302, _ws(pk="@api_key")),
]


def _area_rows(name: str) -> list:
    """Rows kept beside each area's tests, in tests/<app>/authz_*.py (ROUTES and API lists)."""
    import importlib
    import pkgutil

    import tests

    rows = []
    for pkg in pkgutil.iter_modules(tests.__path__):
        if not pkg.ispkg:
            continue
        sub = importlib.import_module(f"tests.{pkg.name}")
        for mod in pkgutil.iter_modules(sub.__path__):
            if mod.name.startswith("authz_"):
                module = importlib.import_module(f"tests.{pkg.name}.{mod.name}")
                rows += getattr(module, name, [])
    return rows


ROUTES += _area_rows("ROUTES")


API = [
    ApiRow("/api/v1/workspaces", "get", "viewer", "read", 200),
    ApiRow("/api/v1/workspaces/{slug}", "get", "viewer", "read", 200),
    ApiRow("/api/v1/workspaces/{slug}/members", "get", "viewer", "read", 200),
    ApiRow(
        "/api/v1/workspaces/{slug}/members/{member_id}",
        "patch",
        "admin",
        "members",
        200,
        {"role": "viewer"},
    ),
    ApiRow("/api/v1/workspaces/{slug}/members/{member_id}", "delete", "admin", "members", 204),
    ApiRow("/api/v1/workspaces/{slug}/projects", "get", "viewer", "read", 200),
    ApiRow("/api/v1/workspaces/{slug}/projects", "post", "editor", "write", 201, {"name": "Fresh"}),
    ApiRow("/api/v1/workspaces/{slug}/projects/{project_id}", "get", "viewer", "read", 200),
    ApiRow(
        "/api/v1/workspaces/{slug}/projects/{project_id}",
        "patch",
        "editor",
        "write",
        200,
        {"name": "X"},
    ),
    ApiRow("/api/v1/workspaces/{slug}/projects/{project_id}", "delete", "editor", "write", 204),
    ApiRow("/api/v1/workspaces/{slug}/keys", "get", "admin", "keys", 200),
    ApiRow(
        "/api/v1/workspaces/{slug}/keys",
        "post",
        "admin",
        "keys",
        201,
        {"name": "k", "scopes": ["keys"]},  # a keys-only key may hand on only that
    ),
    ApiRow("/api/v1/workspaces/{slug}/keys/{key_id}", "delete", "admin", "keys", 204),
]
API += _area_rows("API")
API_ACTORS = [*ACTORS, "key_with_scope", "key_without_scope", "key_of_other_workspace"]


def _our_route_names(patterns=None, prefix="") -> set[str]:
    names = set()
    for p in patterns if patterns is not None else get_resolver().url_patterns:
        if isinstance(p, URLResolver):
            if p.namespace in {"admin", "api"}:
                continue
            names |= _our_route_names(p.url_patterns, prefix)
        elif isinstance(p, URLPattern) and p.name:
            module = getattr(p.callback, "__module__", "")
            if module.split(".")[0] in OUR_APPS:
                names.add(p.name)
    return names


# Routes that no session reaches: a trainer's per-attempt token is their only key (their own
# tests refuse every other token: tests/training/test_trainer_events.py).
TOKEN_ROUTES = {"stripe_webhook"}


def test_every_route_has_a_row():
    missing = _our_route_names() - {r.route for r in ROUTES} - TOKEN_ROUTES
    assert not missing, f"add these routes to the authorisation matrix: {sorted(missing)}"


def test_every_api_operation_has_a_row():
    schema = api.get_openapi_schema()
    operations = {(path, method) for path, methods in schema["paths"].items() for method in methods}
    rows = {(r.path, r.method) for r in API}
    assert operations - rows == set(), f"add these API operations: {sorted(operations - rows)}"
    assert rows - operations == set()


@pytest.fixture(scope="module")
def ctx(django_db_setup, django_db_blocker):
    """The world every row is tried in, made once for the module inside a transaction that is
    rolled back at its end. Each test runs in a savepoint of it (pytest-django's `db`), so what
    a row changes (a deletion, a rename) is undone before the next: thousands of rows share
    one world instead of making it each time."""
    with django_db_blocker.unblock(), transaction.atomic():
        values = _world()
        yield values
        transaction.set_rollback(True)


def _world() -> dict:
    plans = plans_seed()
    team, stranger = team_create(plans), stranger_create()
    project = ProjectFactory(workspace=team.workspace, name="Birds")
    invitation = Invitation.objects.create(
        workspace=team.workspace,
        email="invitee@acme.test",
        role="editor",
        expires_at=timezone.now() + timedelta(days=14),
    )
    _, key_raw = api_key_create(access=team.access("owner"), name="k", scopes=["read"])
    key = team.workspace.api_keys.get()
    dataset = DatasetFactory(workspace=team.workspace, name="Birds DS")
    cls = DatasetClassFactory(dataset=dataset, index=0, name="bird")
    image = ImageFactory(dataset=dataset)
    LabelFactory(image=image, dataset_class=cls)
    upload = Import.objects.create(dataset=dataset, filename="birds.zip", total_size=10)
    version = version_create(access=team.access("owner"), dataset=dataset)
    ImageFactory(dataset=dataset)  # changed since the version, so a new one can be saved
    public = DatasetFactory(
        workspace=Membership.objects.get(user=stranger).workspace, name="Open", is_public=True
    )
    ImageFactory(dataset=public)
    values = {
        "version": version.number,
        "public_dataset": public.pk,
        "dataset": dataset.pk,
        "dataset_class": cls.pk,
        "image": image.pk,
        "import": upload.pk,
        "team": team,
        "stranger": stranger,
        "project": project.pk,
        "invitation": invitation.pk,
        "token": invitation_token(invitation),
        "api_key": key.pk,
        "editor_membership": Membership.objects.get(user=team.editor).pk,
        "viewer_membership": Membership.objects.get(user=team.viewer).pk,
    }
    # Areas add their own objects: tests/<app>/authz_*.py may list CTX = [fn(values) -> dict].
    for extend in _area_rows("CTX"):
        values.update(extend(values))
    return values


def _resolve(values: dict, ctx: dict) -> dict:
    return {
        k: ctx[v[1:]] if isinstance(v, str) and v.startswith("@") else v for k, v in values.items()
    }


def _expected(row, actor: str):
    if actor == "anonymous":
        return row.anonymous
    if actor == "stranger":
        return row.stranger
    if row.min_role is None or ROLES.index(actor) >= ROLES.index(row.min_role):
        return row.ok
    return 403


def _client_for(actor: str, ctx) -> Client:
    client = Client()
    if actor == "stranger":
        client.force_login(ctx["stranger"])
    elif actor != "anonymous":
        client.force_login(ctx["team"].user(actor))
    return client


@pytest.mark.django_db
@pytest.mark.parametrize("actor", ACTORS)
@pytest.mark.parametrize("row", ROUTES, ids=lambda r: f"{r.method}:{r.route}")
def test_route(row: Row, actor: str, ctx):
    url = reverse(row.route, kwargs=_resolve(row.kwargs, ctx))
    client = _client_for(actor, ctx)
    response = getattr(client, row.method)(url, _resolve(row.data, ctx))
    expected = _expected(row, actor)
    if expected == LOGIN:
        assert response.status_code == 302, response.content[:300]
        assert response["Location"].startswith(reverse("account_login"))
    else:
        assert response.status_code == expected, response.content[:500]
    if response.status_code in (403, 404):
        assert b"Acme Vision" not in response.content or actor != "stranger"


def _api_client(actor: str, row: ApiRow, ctx) -> Client:
    team = ctx["team"]
    if actor.startswith("key"):
        if actor == "key_of_other_workspace":
            from workspaces.selectors import workspace_access_for_user

            access = workspace_access_for_user(user=ctx["stranger"], slug="elsewhere")
        else:
            access = team.access("owner")
        all_scopes = ApiKeyScope.values
        scopes = (
            [row.scope]
            if actor != "key_without_scope"
            else [s for s in all_scopes if s != row.scope]
        )
        _, raw = api_key_create(access=access, name="m", scopes=scopes)
        return Client(headers={"Authorization": f"Bearer {raw}"})
    return _client_for(actor, ctx)


def _api_expected(row: ApiRow, actor: str) -> int:
    if actor == "anonymous":
        return 401
    if actor in ("stranger", "key_of_other_workspace"):
        return 404
    if actor == "key_with_scope":
        return row.ok
    if actor == "key_without_scope":
        return 403
    return row.ok if ROLES.index(actor) >= ROLES.index(row.min_role) else 403


@pytest.mark.django_db
@pytest.mark.parametrize("actor", API_ACTORS)
@pytest.mark.parametrize("row", API, ids=lambda r: f"{r.method}:{r.path}")
def test_api_operation(row: ApiRow, actor: str, ctx):
    path = (
        row.path.format(
            slug="acme",
            member_id=ctx["viewer_membership"],
            project_id=ctx["project"],
            key_id=ctx["api_key"],
            dataset_id=ctx["dataset"],
            import_id=ctx["import"],
            **_resolve(row.ids, ctx),
        )
        + row.query
    )
    client = _api_client(actor, row, ctx)
    kwargs = {"content_type": "application/json"} if row.body is not None else {}
    args = (_resolve(row.body, ctx),) if row.body is not None else ()
    response = getattr(client, row.method)(path, *args, **kwargs)
    expected = _api_expected(row, actor)
    if row.path == "/api/v1/workspaces" and expected == 404:
        # Listing is not scoped by URL: outsiders get their own workspaces, never acme.
        assert response.status_code == 200
        assert "acme" not in {w["slug"] for w in response.json()}
        return
    assert response.status_code == expected, response.content[:500]


@pytest.mark.django_db
def test_admin_site_needs_staff_and_lists_every_model(client, ctx):
    owner = type(ctx["team"].owner).objects.get(pk=ctx["team"].owner.pk)  # not the world's
    assert client.get("/admin/").status_code == 302
    client.force_login(owner)  # owner of a workspace is not site staff
    assert client.get("/admin/").status_code == 302
    owner.is_staff = owner.is_superuser = True
    owner.save()
    for model in admin.site._registry:
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
        assert client.get(url).status_code == 200, url


def test_the_stripe_webhook_is_the_only_view_without_csrf_protection():
    exempt = set()

    def walk(patterns):
        for p in patterns:
            if isinstance(p, URLResolver):
                # ninja (the API and dedicated endpoints) checks CSRF for sessions itself
                if p.namespace not in {"admin", "api", "endpoints"}:
                    walk(p.url_patterns)
            elif getattr(p.callback, "csrf_exempt", False) and p.name:
                exempt.add(p.name)

    walk(get_resolver().url_patterns)
    # The platform webhooks take a bearer API key or a signed URL, never a session cookie
    # (tests/training/authz_platform_webhooks.py: a signed-in person without a key is 401).
    platform = {"platform_training_metrics", "platform_model_upload", "platform_model_upload_put"}
    assert exempt == {"stripe_webhook", *platform}
