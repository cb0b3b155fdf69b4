"""How the JSON APIs (/api/v1/ and the dedicated endpoints under /d/) answer a caller without
usable credentials: every operation the URLconf mounts, every method it answers, every kind of
missing or bad credential gets 401 with `WWW-Authenticate: Bearer` and a JSON detail saying
how to authenticate, never 403 "CSRF check Failed". A signed-in browser session still needs
its CSRF token for anything but reading (issue 16, item 1)."""

import re
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from config.api import api
from deploy.api import endpoints
from deploy.models import Deployment, DeploymentState, Placement
from tests.training.factories import trained_model_row
from workspaces.models import ApiKey
from workspaces.services.keys import api_key_create, api_key_revoke

APIS = {"api": api, "endpoints": endpoints}
# What django-ninja mounts for itself (the schema, the docs, the reverse target of its root).
NINJA_OWN = {"openapi-json", "openapi-view", "api-root"}
# Reached only with a training attempt's own token, never a key or a session
# (tests/training/test_trainer_events.py, tests/security/test_trainer_events.py,
# tests/training/test_remote_endpoints.py).
TOKEN_ROUTES = {
    ("post", "/api/v1/trainer/jobs/{job_id}/events"),
    ("get", "/api/v1/trainer/jobs/{job_id}/spec"),
    ("get", "/api/v1/trainer/jobs/{job_id}/dataset"),
    ("get", "/api/v1/trainer/jobs/{job_id}/weights/{which}"),
    ("post", "/api/v1/trainer/jobs/{job_id}/uploads"),
}
# Reached only with the token a rented endpoint's replica mints for its weights; anything else
# is an unknown endpoint (tests/deploy/test_endpoint_weights.py).
REPLICA_ROUTES = {"/d/{slug}/weights"}
# Reached only with a URL signed for one file of one attempt (a presigned URL's way).
SIGNED_ROUTES = {"/api/v1/trainer/jobs/{job_id}/attempts/{attempt}/files/{name}"}
UNSAFE = {"post", "put", "patch", "delete"}


def _mounted_routes(patterns=None, prefix: str = "") -> set[str]:
    """Every route of the two APIs in the URLconf, as OpenAPI writes paths ("/x/{id}")."""
    routes = set()
    for p in patterns if patterns is not None else get_resolver().url_patterns:
        if isinstance(p, URLResolver):
            if p.namespace in APIS or prefix:
                routes |= _mounted_routes(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern) and prefix and p.name not in NINJA_OWN:
            route = re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", prefix + str(p.pattern))
            routes.add("/" + route)
    return routes


def _operations() -> list[tuple[str, str]]:
    """(path, method) of every operation, as each API describes itself."""
    return sorted(
        (path, method)
        for one in APIS.values()
        for path, methods in one.get_openapi_schema()["paths"].items()
        for method in methods
    )


OPERATIONS = _operations()


def test_every_mounted_route_is_checked_here():
    described = {path for path, _ in OPERATIONS}
    token_routes = {route for _, route in TOKEN_ROUTES} | SIGNED_ROUTES | REPLICA_ROUTES
    assert _mounted_routes() == described | token_routes
    assert {method for _, method in OPERATIONS} >= {"get", "post", "patch", "delete"}


@pytest.fixture
def deployment(team):
    """A real slug for /d/{slug}/predict: a key is judged only once the deployment is found."""
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])
    return Deployment.objects.create(
        workspace=team.workspace,
        model=model,
        slug="birds-live",
        name="Birds live",
        state=DeploymentState.STOPPED,
        desired_running=False,
    )


def _url(path: str, deployment: Deployment) -> str:
    slug = deployment.slug if path.startswith("/d/") else deployment.workspace.slug
    return re.sub(r"{(\w+)}", lambda m: slug if m.group(1) == "slug" else "999999", path)


def _send(client: Client, method: str, url: str):
    if method == "get":
        return client.get(url)
    return getattr(client, method)(url, {}, content_type="application/json")


def _key(team, **changes) -> tuple[ApiKey, str]:
    key, raw = api_key_create(
        access=team.access("owner"), name="script", scopes=["read", "write", "predict"]
    )
    ApiKey.objects.filter(pk=key.pk).update(**changes)
    return key, raw


def _no_credentials(team):
    return {}


def _stale_session_cookie(team):
    return {"cookie": "a-session-that-was-never-made"}


def _unknown_key(team):
    return {"bearer": "ksk_" + "0" * 16 + "_" + "x" * 43}


def _not_a_key(team):
    return {"bearer": "nonsense"}


def _basic_auth(team):
    return {"authorization": "Basic YWRtaW46c2VjcmV0"}


def _wrong_secret(team):
    _, raw = _key(team)
    return {"bearer": raw[:-4] + ("AAAA" if not raw.endswith("AAAA") else "BBBB")}


def _revoked_key(team):
    key, raw = _key(team)
    api_key_revoke(access=team.access("owner"), key=key)
    return {"bearer": raw}


def _expired_key(team):
    return {"bearer": _key(team, expires_at=timezone.now() - timedelta(seconds=1))[1]}


def _key_of_a_deactivated_user(team):
    _, raw = _key(team)
    team.owner.is_active = False
    team.owner.save(update_fields=["is_active"])
    return {"bearer": raw}


CALLERS = [
    _no_credentials,
    _stale_session_cookie,
    _unknown_key,
    _not_a_key,
    _basic_auth,
    _wrong_secret,
    _revoked_key,
    _expired_key,
    _key_of_a_deactivated_user,  # last: the owner cannot sign in after it
]


def _client(credentials: dict) -> Client:
    headers = {}
    if "bearer" in credentials:
        headers["Authorization"] = f"Bearer {credentials['bearer']}"
    if "authorization" in credentials:
        headers["Authorization"] = credentials["authorization"]
    client = Client(enforce_csrf_checks=True, headers=headers)
    if "cookie" in credentials:
        client.cookies[settings.SESSION_COOKIE_NAME] = credentials["cookie"]
    return client


@pytest.mark.django_db
@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda o: f"{o[1]}:{o[0]}")
def test_a_call_without_usable_credentials_is_told_to_authenticate(operation, team, deployment):
    path, method = operation
    for caller in CALLERS:
        response = _send(_client(caller(team)), method, _url(path, deployment))
        what = (caller.__name__, response.status_code, response.content[:300])
        assert response.status_code == 401, what
        assert response["WWW-Authenticate"].startswith("Bearer"), what
        assert response["Content-Type"].startswith("application/json"), what
        detail = response.json()["detail"]
        assert "Authorization: Bearer" in detail and "CSRF" not in detail, what


def _csrf_token(client: Client) -> str:
    """A CSRF secret in the cookie and the same in the header, as the pages' htmx sends it."""
    secret = "s" * 32
    client.cookies[settings.CSRF_COOKIE_NAME] = secret
    return secret


@pytest.mark.django_db
@pytest.mark.parametrize("with_bad_key", [False, True], ids=["session", "session+bad key"])
@pytest.mark.parametrize(
    "operation",
    [o for o in OPERATIONS if o[1] in UNSAFE],
    ids=lambda o: f"{o[1]}:{o[0]}",
)
def test_a_session_still_needs_its_csrf_token_to_write(operation, with_bad_key, team, deployment):
    path, method = operation
    headers = {"Authorization": "Bearer nonsense"} if with_bad_key else {}
    browser = Client(enforce_csrf_checks=True, headers=headers)
    browser.force_login(team.owner)
    keys_before = ApiKey.objects.count()

    refused = _send(browser, method, _url(path, deployment))
    assert refused.status_code == 403, refused.content
    assert "CSRF" in refused.json()["detail"]
    assert ApiKey.objects.count() == keys_before

    # The same call with the token gets past authentication (what it then says is the route's).
    token = _csrf_token(browser)
    url = _url(path, deployment)
    answered = getattr(browser, method)(
        url, {}, content_type="application/json", headers={"X-CSRFToken": token}
    )
    assert answered.status_code != 401 and b"CSRF" not in answered.content, answered.content


@pytest.mark.django_db
@pytest.mark.parametrize(
    "operation", [o for o in OPERATIONS if o[1] == "get"], ids=lambda o: f"get:{o[0]}"
)
def test_a_session_reads_without_a_csrf_token(operation, team, deployment):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(team.owner)
    response = browser.get(_url(operation[0], deployment))
    assert response.status_code not in (401, 403), response.content


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "route"), sorted(TOKEN_ROUTES))
def test_the_trainer_routes_take_only_their_token_and_never_ask_for_csrf(team, method, route):
    url = route.format(job_id=999999, which="model")
    response = _send(Client(enforce_csrf_checks=True), method, url)
    assert response.status_code == 403
    assert "CSRF" not in response.json()["detail"]


def test_the_replica_route_gives_a_session_or_a_key_nothing(team, deployment):
    """Not even the endpoint's owner gets its weights there (they download them from the
    model's page); a key with every scope neither."""
    Deployment.objects.filter(pk=deployment.pk).update(
        placement=Placement.SKYSERVE, desired_running=True, state=DeploymentState.RUNNING
    )
    (route,) = REPLICA_ROUTES
    url = route.format(slug=deployment.slug)
    _, raw = api_key_create(access=team.access("owner"), name="all", scopes=["predict", "read"])
    owner = Client(enforce_csrf_checks=True)
    owner.force_login(team.owner)
    for client in (owner, Client(headers={"Authorization": f"Bearer {raw}"})):
        response = client.get(url)
        assert response.status_code == 404
        assert response.json() == {"detail": "No such deployment."}


def test_the_signed_upload_route_refuses_a_missing_signature_without_csrf(team):
    (route,) = SIGNED_ROUTES
    url = route.format(job_id=999999, attempt=1, name="last-1.pt")
    response = _send(Client(enforce_csrf_checks=True), "put", url)
    assert response.status_code == 403
    assert "CSRF" not in response.json()["detail"]
