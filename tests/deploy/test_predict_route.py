"""The predict routes' short way (config.predict_route): a call with credentials skips Django's
handler. Called through the web's own ASGI application, as uvicorn calls it: every refusal the
full way makes, the short way makes (or leaves to the full way), and what it answers is
answered alike (the full way: Django's test client, which goes around the ASGI application).
No model server: an admitted call is 503."""

import io

import pytest
from django.test import Client
from PIL import Image as PILImage

from deploy.models import Deployment, DeploymentState, UsageDay
from deploy.usage import usage_flush
from tests.clock import well_inside_a_minute
from tests.deploy.asgi_calls import asgi_post, short_way_count
from tests.deploy.conftest import predict_counters_clear
from tests.training.factories import trained_model_row
from workspaces.selectors import workspace_access_for_user
from workspaces.services.keys import api_key_create, api_key_revoke

# The application runs its views on threads of its own: they see committed rows only.
pytestmark = pytest.mark.django_db(transaction=True)
# Headers the middleware chain gives every answer: the short way gives the same.
CHAIN_HEADERS = (
    "content-type",
    "x-frame-options",
    "x-content-type-options",
    "referrer-policy",
    "cross-origin-opener-policy",
    "content-security-policy",
    "strict-transport-security",
)


@pytest.fixture(autouse=True)
def _quiet(settings):
    settings.INFERENCE_URL = "http://127.0.0.1:9"  # nothing listens: an admitted call is 503
    settings.PREDICT_KEY_KEPT_SECONDS = 60  # a slow machine's next call still finds it kept
    predict_counters_clear()


@pytest.fixture
def model(team):
    return trained_model_row(workspace=team.workspace, class_names=["bird"])


def _jpeg() -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (64, 48), (120, 30, 200)).save(out, format="JPEG")
    return out.getvalue()


def _call(path: str, headers: dict, host: str = "testserver", **params):
    return asgi_post(
        path, headers=headers, host=host, files={"file": ("x.jpg", _jpeg(), "image/jpeg")},
        data=params,
    )  # fmt: skip


def _key(team, scopes=("predict",)) -> tuple[object, dict]:
    key, raw = api_key_create(access=team.access("owner"), name="k", scopes=list(scopes))
    return key, {"Authorization": f"Bearer {raw}"}


def _theirs(stranger) -> dict:
    """A predict key of the stranger's own workspace."""
    slug = stranger.memberships.get().workspace.slug
    access = workspace_access_for_user(user=stranger, slug=slug)
    _, raw = api_key_create(access=access, name="theirs", scopes=["predict"])
    return {"Authorization": f"Bearer {raw}"}


def _ways(path: str, headers: dict, **params) -> list[tuple[int, str, bool]]:
    """Two calls (the first looks the caller up, the second finds it kept): (status, detail,
    taken the short way) of each."""
    answers = []
    for _ in range(2):
        before = short_way_count()
        response = _call(path, headers, **params)
        answers.append(
            (response.status_code, response.json()["detail"], short_way_count() == before + 1)
        )
    return answers


def test_a_keys_calls_take_the_short_way_and_are_answered_as_by_the_full_way(team, model):
    _, auth = _key(team)
    url = f"/api/v1/models/{model.pk}/predict"
    before = short_way_count()
    first, kept = _call(url, auth), _call(url, auth)  # looked up, then kept
    assert short_way_count() == before + 2
    image = io.BytesIO(_jpeg())
    image.name = "x.jpg"
    full = Client(headers=auth).post(url, {"file": image})
    for short in (first, kept):
        assert full.status_code == short.status_code == 503
        assert full.json() == short.json() and "not answering" in short.json()["detail"]
        for name in CHAIN_HEADERS:
            assert full.headers.get(name) == short.headers.get(name), name
        assert "limit;dur=" in short.headers["server-timing"]

    # A key sent after a cookie that holds no session takes it too.
    before = short_way_count()
    assert _call(url, {"Cookie": "csrftoken=abc", **auth}).status_code == 503
    assert short_way_count() == before + 1

    # Bad input is answered by the short way as by the full way.
    before = short_way_count()
    bad = _call(url, auth, conf="5")
    assert short_way_count() == before + 1
    assert bad.status_code == 400 and "conf must be between" in bad.json()["detail"]
    not_an_image = asgi_post(
        url, headers=auth, files={"file": ("x.jpg", b"GIF89a nonsense", "image/jpeg")}
    )
    assert not_an_image.status_code == 400 and "not a usable image" in not_an_image.json()["detail"]
    unknown_type = asgi_post(url, headers={**auth, "Content-Type": "text/plain"}, content=b"x")
    assert unknown_type.status_code == 415
    assert short_way_count() == before + 3

    # Counted as the full way counts: every call, after its answer.
    usage_flush()
    row = UsageDay.objects.get(model=model)
    assert (row.calls, row.images, row.errors) == (7, 0, 7)


def test_what_the_full_way_refuses_the_short_way_refuses(team, model, stranger):
    url = f"/api/v1/models/{model.pk}/predict"
    # A key revoked by a person: refused by its very next call, though its lookup was kept.
    key, auth = _key(team)
    assert [status for status, _, _ in _ways(url, auth)] == [503, 503]
    api_key_revoke(access=team.access("owner"), key=key)
    assert _call(url, auth).status_code == 401

    # Refusals of the lookup, each answered as the API answers it, and never kept.
    _, read_only = _key(team, scopes=("read",))
    answers = _ways(url, read_only)
    assert [(s, short) for s, _, short in answers] == [(403, True)] * 2
    assert "scope" in answers[0][1]
    theirs = _theirs(stranger)
    unknown = f"/api/v1/models/{model.pk + 1000}/predict"
    for path in (url, unknown):  # another team's model and no model: the same 404
        assert _ways(path, theirs) == [(404, "No such model.", True)] * 2
    _, raw = api_key_create(access=team.access("owner"), name="k", scopes=["predict"])
    wrong = {"Authorization": f"Bearer {raw[:-4]}{'aaaa' if raw[-4:] != 'aaaa' else 'bbbb'}"}
    assert [(s, short) for s, _, short in _ways(url, wrong)] == [(401, True)] * 2
    assert _call(url, wrong).headers["www-authenticate"] == 'Bearer realm="Kestrel API"'
    nonsense = {"Authorization": "Bearer nonsense"}  # not shaped like a key: no caller at all
    assert [(s, short) for s, _, short in _ways(url, nonsense)] == [(401, False)] * 2

    # No credentials, and a host this server does not serve: refused by the full way.
    assert [(s, short) for s, _, short in _ways(url, {})] == [(401, False)] * 2
    _, auth = _key(team)
    assert _call(url, auth).status_code == 503
    before = short_way_count()
    assert _call(url, auth, host="evil.example").status_code == 400
    assert short_way_count() == before


def test_the_plans_rate_limit_holds_on_the_short_way(team, model):
    plan = team.workspace.plan
    plan.predict_requests_per_minute = 3
    plan.save()
    _, auth = _key(team)
    url = f"/api/v1/models/{model.pk}/predict"
    well_inside_a_minute()
    before = short_way_count()
    statuses = [_call(url, auth) for _ in range(4)]
    assert [r.status_code for r in statuses] == [503, 503, 503, 429]
    assert short_way_count() == before + 4
    assert int(statuses[-1].headers["retry-after"]) >= 1
    assert "allows 3 calls a minute per key" in statuses[-1].json()["detail"]


def test_a_kept_session_takes_the_short_way_only_with_its_csrf_token(team, model, client):
    client.force_login(team.owner)
    client.get("/w/acme/")  # the page sets its CSRF cookie
    session, token = client.cookies["sessionid"].value, client.cookies["csrftoken"].value
    browser = {"Cookie": f"sessionid={session}; csrftoken={token}", "X-CSRFToken": token}
    url = f"/api/v1/models/{model.pk}/predict"
    assert [(s, short) for s, _, short in _ways(url, browser)] == [(503, True)] * 2
    # Kept, but without the page's token: refused, by the full way.
    no_token = {"Cookie": browser["Cookie"]}
    assert [(s, d, short) for s, d, short in _ways(url, no_token)] == [
        (403, "CSRF check Failed", False)
    ] * 2
    wrong_origin = {**browser, "Origin": "https://evil.example"}
    assert [(s, short) for s, _, short in _ways(url, wrong_origin)] == [(403, False)] * 2


def test_the_public_demo_takes_the_short_way_for_a_stranger_and_only_for_a_public_model(
    team, model, stranger, client, settings
):
    client.force_login(stranger)
    client.get("/explore/")
    session, token = client.cookies["sessionid"].value, client.cookies["csrftoken"].value
    browser = {"Cookie": f"sessionid={session}; csrftoken={token}", "X-CSRFToken": token}
    url = f"/api/v1/models/{model.pk}/predict"
    assert [(s, short) for s, _, short in _ways(url, browser)] == [(404, True)] * 2
    model.is_public = True
    model.save(update_fields=["is_public"])
    assert [(s, short) for s, _, short in _ways(url, browser)] == [(503, True)] * 2
    # Signed out: once its kept lookup lapses (here at once), the cookie names no person.
    settings.PREDICT_KEY_KEPT_SECONDS = 0
    client.logout()
    assert [s for s, _, _ in _ways(url, browser)] == [401, 401]


def test_a_dedicated_endpoint_through_the_short_way(team, model, stranger):
    deployment = Deployment.objects.create(
        workspace=team.workspace,
        model=model,
        slug="short-way",
        name="Short",
        desired_running=True,
        state=DeploymentState.RUNNING,
        port=9,  # nothing listens
    )
    _, auth = _key(team)
    url = "/d/short-way/predict"
    answers = _ways(url, auth)
    assert [(s, short) for s, _, short in answers] == [(503, True)] * 2
    assert "not answering" in answers[1][1]
    # Stopped: the very next call says so (the row is read on every call).
    Deployment.objects.filter(pk=deployment.pk).update(
        state=DeploymentState.STOPPED, desired_running=False
    )
    before = short_way_count()
    stopped = _call(url, auth)
    assert short_way_count() == before + 1
    assert stopped.status_code == 503 and "start it on its page" in stopped.json()["detail"]
    # Another team's key, and an unknown endpoint: the same 404.
    for path, headers in ((url, _theirs(stranger)), ("/d/no-such-endpoint/predict", auth)):
        assert _ways(path, headers) == [(404, "No such deployment.", True)] * 2, path
