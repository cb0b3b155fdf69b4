"""Items 5, 6 and 7: joining a team uninvited, keys that mint stronger keys, and the small leaks
(which ids exist, which emails are registered, whose address a rate limit counts, what a
keyless API call is told)."""

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
from itertools import product

import pytest
from django.test import Client
from django.urls import reverse

from tests.datasets.factories import DatasetFactory, ImageFactory
from tests.servers import app_server
from tests.training.factories import job_row, local_gpu, small_version, trained_model_row
from tests.workspaces.factories import PASSWORD, ProjectFactory, UserFactory
from workspaces.models import ApiKey, ApiKeyScope, Membership, Role, User
from workspaces.services.invitations import invitation_create, invitation_token
from workspaces.services.keys import api_key_create

CONFIRM_LINK = re.compile(r"https?://[^\s]+/accounts/confirm-email/[^\s]+/")


def _invite(team, email="new@acme.test", role=Role.ADMIN) -> str:
    invitation = invitation_create(
        access=team.access("owner"), email=email, role=role, base_url="http://testserver/"
    )
    return reverse("invitation_accept", kwargs={"token": invitation_token(invitation)})


def _joined(team, email: str) -> bool:
    return Membership.objects.filter(workspace=team.workspace, user__email=email).exists()


# --- item 5: invitations ------------------------------------------------------------------


@pytest.mark.django_db
def test_an_unconfirmed_account_with_the_invited_address_cannot_join(team, client):
    """Whoever learns a link signs up with the invited address (which they cannot read mail
    at) and accepts: refused, with the pending state shown."""
    path = _invite(team)
    client.force_login(UserFactory(email="new@acme.test", email_verified=False))
    page = client.get(path)
    assert page.status_code == 200
    assert b"Confirm your address new@acme.test first" in page.content
    assert b"Accept and join" not in page.content
    client.post(path)
    assert not _joined(team, "new@acme.test")


@pytest.mark.django_db
def test_signing_up_with_the_invited_address_does_not_sign_in_until_it_is_confirmed(
    team, client, mailoutbox
):
    path = _invite(team)
    response = client.post(
        f"{reverse('account_signup')}?next={path}",
        {"email": "new@acme.test", "password1": PASSWORD, "password2": PASSWORD},
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("account_email_verification_sent")
    assert client.get(path).content.count(b"Sign in to see this invitation") == 1
    client.post(path)
    assert not _joined(team, "new@acme.test")
    # The mail really went to the invited address; opening its link proves the address.
    confirmation = [m for m in mailoutbox if m.to == ["new@acme.test"] and "confirm" in m.body]
    link = CONFIRM_LINK.search(confirmation[-1].body).group(0)
    key_path = urllib.parse.urlparse(link).path
    client.post(key_path)
    page = client.get(path)
    assert b"Accept and join" in page.content
    client.post(path)
    assert _joined(team, "new@acme.test")


@pytest.mark.django_db
def test_an_anonymous_visitor_learns_nothing_from_a_link(team, client):
    path = _invite(team)
    page = client.get(path)
    assert page.status_code == 200
    text = page.content.decode()
    assert "Sign in to see this invitation" in text
    for secret in ("Acme Vision", "new@acme.test", "owner@acme.test", "admin", "Join"):
        assert secret not in text.split("<main", 1)[-1], secret


@pytest.mark.django_db
def test_a_signed_in_stranger_sees_only_whom_the_invitation_is_for(team, stranger, client):
    path = _invite(team)
    client.force_login(stranger)
    text = client.get(path).content.decode().split("<main", 1)[-1]
    assert "n•••@acme.test" in text
    assert "Acme Vision" not in text and "owner@acme.test" not in text
    client.post(path)
    assert not _joined(team, stranger.email)


@pytest.mark.django_db
def test_an_invitation_is_used_once_and_says_so(team, client):
    path = _invite(team)
    first = UserFactory(email="new@acme.test")
    client.force_login(first)
    client.post(path)
    assert _joined(team, "new@acme.test")
    page = client.get(path)
    assert page.status_code == 404 and b"already been used" in page.content


# --- item 6: keys ---------------------------------------------------------------------------


def _key_client(team, scopes: list[str]) -> Client:
    _, raw = api_key_create(access=team.access("owner"), name="parent", scopes=scopes)
    return Client(headers={"Authorization": f"Bearer {raw}"})


@pytest.mark.django_db
@pytest.mark.parametrize(("held", "asked"), list(product(ApiKeyScope.values, ApiKeyScope.values)))
def test_a_key_never_mints_a_key_with_a_scope_it_lacks(team, held, asked):
    url = "/api/v1/workspaces/acme/keys"
    body = {"name": "child", "scopes": [asked]}
    # Without the keys scope a key makes no key at all, whatever it holds.
    if held != ApiKeyScope.KEYS:
        response = _key_client(team, [held]).post(url, body, content_type="application/json")
        assert response.status_code == 403, response.content
    # With it, only what it holds.
    parent = sorted({held, ApiKeyScope.KEYS})
    response = _key_client(team, parent).post(url, body, content_type="application/json")
    if asked in parent:
        assert response.status_code == 201, response.content
        assert response.json()["scopes"] == [asked]
    else:
        assert response.status_code == 403, response.content
        assert asked in response.json()["detail"]
    assert not ApiKey.objects.filter(name="child").exclude(scopes=[asked]).exists()
    made = ApiKey.objects.filter(name="child")
    assert all(set(k.scopes) <= set(parent) for k in made)


@pytest.mark.django_db
def test_a_write_key_cannot_mint_a_key_with_every_scope(team):
    """The attack as it was: a key with only `write` created a key with every scope."""
    response = _key_client(team, ["write"]).post(
        "/api/v1/workspaces/acme/keys",
        {"name": "child", "scopes": ["read", "write", "train", "predict"]},
        content_type="application/json",
    )
    assert response.status_code == 403, response.content
    assert not ApiKey.objects.filter(name="child").exists()


@pytest.mark.django_db
def test_a_key_made_by_a_key_expires_no_later_than_it(team):
    from datetime import timedelta

    from django.utils import timezone

    soon = timezone.now() + timedelta(hours=1)
    _, raw = api_key_create(
        access=team.access("owner"), name="parent", scopes=["read", "keys"], expires_at=soon
    )
    api = Client(headers={"Authorization": f"Bearer {raw}"})
    url = "/api/v1/workspaces/acme/keys"
    for expires in (None, (soon + timedelta(days=30)).isoformat()):
        body = {"name": "child", "scopes": ["read"], "expires_at": expires}
        response = api.post(url, body, content_type="application/json")
        assert response.status_code == 400, response.content
    assert not ApiKey.objects.filter(name="child").exists()


@pytest.mark.django_db
def test_write_and_read_keys_cannot_touch_keys_or_members(team):
    api = _key_client(team, [s for s in ApiKeyScope.values if s not in ("keys", "members")])
    viewer = Membership.objects.get(user=team.viewer)
    assert api.get("/api/v1/workspaces/acme/keys").status_code == 403
    key = ApiKey.objects.get(name="parent")
    assert api.delete(f"/api/v1/workspaces/acme/keys/{key.pk}").status_code == 403
    response = api.patch(
        f"/api/v1/workspaces/acme/members/{viewer.pk}",
        {"role": "admin"},
        content_type="application/json",
    )
    assert response.status_code == 403
    viewer.refresh_from_db()
    assert viewer.role == Role.VIEWER


# --- item 7: the small leaks ----------------------------------------------------------------


@pytest.fixture
def team_objects(team):
    """One of each row the API names by id alone, in the team's workspace."""
    access = team.access("owner")
    version = small_version(access=access)
    project = ProjectFactory(workspace=team.workspace)
    job = job_row(project=project, version=version, gpu=local_gpu(), user=team.owner)
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])
    dataset = DatasetFactory(workspace=team.workspace)
    image = ImageFactory(dataset=dataset)
    return {
        "dataset": dataset.pk,
        "image": image.pk,
        "job": job.pk,
        "model": model.pk,
        "project": project.pk,
    }


ID_ROUTES = [
    ("get", "/api/v1/datasets/{dataset}", None),
    ("get", "/api/v1/datasets/{dataset}/versions", None),
    ("get", "/api/v1/images/{image}/labels", None),
    ("get", "/api/v1/training/jobs/{job}", None),
    ("get", "/api/v1/models/{model}", None),
    ("post", "/api/v1/models/{model}/predict", {}),
    ("post", "/api/v1/training/jobs", {"project_id": "{project}", "dataset_version_id": 1}),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("method", "path", "body"), ID_ROUTES, ids=[r[1] for r in ID_ROUTES])
@pytest.mark.parametrize("caller", ["stranger-session", "stranger-key"])
def test_another_teams_id_and_an_unknown_id_get_the_same_answer(
    team_objects, stranger, method, path, body, caller
):
    client = Client()
    if caller == "stranger-session":
        client.force_login(stranger)
    else:
        from workspaces.selectors import workspace_access_for_user

        access = workspace_access_for_user(user=stranger, slug="elsewhere")
        _, raw = api_key_create(access=access, name="k", scopes=ApiKeyScope.values)
        client = Client(headers={"Authorization": f"Bearer {raw}"})

    def call(ids: dict):
        url = path.format(**ids)
        if body is None:
            return getattr(client, method)(url)
        data = {k: (int(v.format(**ids)) if isinstance(v, str) else v) for k, v in body.items()}
        return getattr(client, method)(url, data, content_type="application/json")

    theirs = call(team_objects)
    unknown = call({name: 10**9 + pk for name, pk in team_objects.items()})
    assert theirs.status_code == unknown.status_code == 404, (theirs.content, unknown.content)
    assert theirs.json() == unknown.json()


@pytest.mark.django_db
def test_signup_does_not_say_whether_an_address_is_registered(client, plans, mailoutbox):
    UserFactory(email="taken@example.com")

    def sign_up(email: str):
        return Client().post(
            reverse("account_signup"),
            {"email": email, "password1": PASSWORD, "password2": PASSWORD},
        )

    taken, fresh = sign_up("taken@example.com"), sign_up("fresh@example.com")
    assert taken.status_code == fresh.status_code == 302
    assert taken["Location"] == fresh["Location"] == reverse("account_email_verification_sent")
    assert User.objects.filter(email__iexact="taken@example.com").count() == 1
    # The owner of the address hears of it; the page said nothing.
    assert any(m.to == ["taken@example.com"] for m in mailoutbox)


@pytest.mark.django_db
def test_a_keyless_api_call_is_told_to_authenticate(team):
    anonymous = Client(enforce_csrf_checks=True)
    for method, path, body in [
        ("get", "/api/v1/workspaces", None),
        ("post", "/api/v1/datasets", {"name": "x", "task": "detect"}),
        ("post", "/api/v1/workspaces/acme/keys", {"name": "k", "scopes": ["read"]}),
    ]:
        kwargs = {"content_type": "application/json"} if body is not None else {}
        response = getattr(anonymous, method)(path, *([body] if body else []), **kwargs)
        assert response.status_code == 401, (path, response.content)
        assert response["WWW-Authenticate"].startswith("Bearer")
        assert "CSRF" not in response.content.decode()
    # A signed-in browser session still needs its CSRF token to write.
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(team.admin)
    response = browser.post(
        "/api/v1/workspaces/acme/keys", {"name": "k", "scopes": ["read"]}, "application/json"
    )
    assert response.status_code == 403
    assert not ApiKey.objects.filter(name="k").exists()


def _failed_login(base: str, email: str, forwarded_for: str) -> str:
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    headers = {"X-Forwarded-For": forwarded_for}
    page = opener.open(urllib.request.Request(f"{base}/accounts/login/", headers=headers))
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.read().decode())
    body = urllib.parse.urlencode(
        {"csrfmiddlewaretoken": token.group(1), "login": email, "password": "wrong"}
    ).encode()
    try:
        answer = opener.open(
            urllib.request.Request(f"{base}/accounts/login/", data=body, headers=headers)
        )
        return answer.read().decode()
    except urllib.error.HTTPError as e:
        return e.read().decode()


@pytest.mark.django_db(transaction=True)
def test_a_local_client_cannot_pick_the_address_the_login_limit_counts(plans):
    limit = {"LOGIN_FAILED_RATE_LIMIT": "3/m/ip,100/m/key"}
    with app_server(**limit) as base:
        answers = [_failed_login(base, f"u{i}@x.test", f"203.0.113.{i}") for i in range(5)]
    wrong = "The email address and/or password you specified are not correct."
    assert all(wrong in answer for answer in answers[:3])  # really tried, then limited
    assert "Too many failed login attempts" in answers[-1], answers[-1][:300]
    # Behind a front server named in TRUSTED_PROXIES, its X-Forwarded-For is the client.
    with app_server(TRUSTED_PROXIES="127.0.0.1", **limit) as base:
        answers = [_failed_login(base, f"v{i}@x.test", f"198.51.100.{i}") for i in range(5)]
    assert all(wrong in answer for answer in answers), [a[:200] for a in answers]
