"""The shared inference API's front door, checked without a model server: who may call,
the plan's rate limit (in Redis, shared by every web process), bad input, usage counts."""

import base64
import io

import pytest
from django.test import Client
from PIL import Image as PILImage

from deploy.models import UsageDay
from deploy.ratelimit import rate_take
from deploy.usage import usage_flush
from tests.clock import well_inside_a_minute
from tests.deploy.conftest import predict_counters_clear
from tests.training.factories import trained_model_row
from training.models import JobState
from workspaces.models import Membership
from workspaces.services.keys import api_key_create

pytestmark = pytest.mark.django_db


def _jpeg(width=64, height=48) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (width, height), (120, 30, 200)).save(out, format="JPEG")
    return out.getvalue()


@pytest.fixture(autouse=True)
def _fresh_redis(settings):
    settings.INFERENCE_URL = "http://127.0.0.1:9"  # nothing listens: the server is "down"
    predict_counters_clear()


@pytest.fixture
def model(team):
    return trained_model_row(workspace=team.workspace, class_names=["bird"])


def _key_client(team, scopes=("predict",)) -> tuple[Client, object]:
    key, raw = api_key_create(access=team.access("owner"), name="k", scopes=list(scopes))
    return Client(headers={"Authorization": f"Bearer {raw}"}), key


def _post(client, model, headers=None, **extra):
    data = {"file": io.BytesIO(_jpeg()), **extra}
    data["file"].name = "x.jpg"
    return client.post(f"/api/v1/models/{model.pk}/predict", data, headers=headers)


def test_callers_without_the_right_are_refused(team, model, stranger):
    assert Client().post(f"/api/v1/models/{model.pk}/predict").status_code == 401
    client, _ = _key_client(team, scopes=("read",))
    response = _post(client, model)
    assert response.status_code == 403 and "scope" in response.json()["detail"]
    other = Membership.objects.get(user=stranger).workspace
    _, raw = api_key_create(
        access=__import__("workspaces.selectors", fromlist=["x"]).workspace_access_for_user(
            user=stranger, slug=other.slug
        ),
        name="theirs",
        scopes=["predict"],
    )
    response = _post(Client(headers={"Authorization": f"Bearer {raw}"}), model)
    assert response.status_code == 404
    assert _post(Client(headers={"Authorization": "Bearer ksk_nonsense"}), model).status_code == 401


def test_a_model_server_that_is_down_is_a_clear_503(team, model):
    client, _ = _key_client(team)
    response = _post(client, model)
    assert response.status_code == 503
    assert "not answering" in response.json()["detail"]


@pytest.mark.parametrize(
    ("data", "status", "words"),
    [
        ({"file": b"not an image at all"}, 400, "not a usable image"),
        ({"imgsz": "4096"}, 400, "imgsz must be between 32 and 1280"),
        ({"conf": "lots"}, 400, "conf must be a number"),
        ({"max_det": "0"}, 400, "max_det"),
    ],
)
def test_bad_input_is_refused_with_the_reason(team, model, data, status, words):
    client, _ = _key_client(team)
    payload = {"file": io.BytesIO(data.pop("file", _jpeg())), **data}
    payload["file"].name = "x.jpg"
    response = client.post(f"/api/v1/models/{model.pk}/predict", payload)
    assert response.status_code == status, response.content
    assert words in response.json()["detail"]


def test_an_image_bomb_is_refused(team, model, settings):
    settings.DATASET_MAX_IMAGE_PIXELS = 1000
    client, _ = _key_client(team)
    response = _post(client, model)
    assert response.status_code == 400 and "megapixels" in response.json()["detail"]


def test_json_base64_urls_and_sizes(team, model, settings):
    client, _ = _key_client(team)
    response = client.post(
        f"/api/v1/models/{model.pk}/predict",
        {"image": "@@not base64@@"},
        content_type="application/json",
    )
    assert response.status_code == 400 and "base64" in response.json()["detail"]
    response = client.post(
        f"/api/v1/models/{model.pk}/predict",
        {"image": base64.b64encode(_jpeg()).decode()},
        content_type="application/json",
    )
    assert response.status_code == 503  # accepted, then no server to run it
    response = client.post(
        f"/api/v1/models/{model.pk}/predict",
        {"url": "http://169.254.169.254/latest/meta-data"},
        content_type="application/json",
    )
    assert response.status_code == 400 and "turned off" in response.json()["detail"]
    settings.PREDICT_URL_SOURCES = True
    for url in (
        "http://169.254.169.254/x.jpg",
        "http://127.0.0.1:8000/x.jpg",
        "file:///etc/passwd",
    ):
        response = client.post(
            f"/api/v1/models/{model.pk}/predict", {"url": url}, content_type="application/json"
        )
        assert response.status_code == 400, url
        detail = response.json()["detail"]
        assert "not a public address" in detail or "Only http" in detail
    settings.PREDICT_MAX_BODY_BYTES = 100
    response = _post(client, model)
    assert response.status_code == 413


def test_a_model_still_training_or_unchecked_is_refused(team, model):
    from tests.training.factories import job_row, local_gpu, small_version
    from workspaces.models import Project

    version = small_version(access=team.access("owner"))
    job = job_row(
        project=Project.objects.get(pk=model.project_id),
        version=version,
        gpu=local_gpu(),
        state=JobState.RUNNING,
    )
    model.job = job
    model.save(update_fields=["job"])
    client, _ = _key_client(team)
    response = _post(client, model)
    assert response.status_code == 409 and "still training" in response.json()["detail"]
    model.job = None
    model.inspect_state = "pending"
    model.save(update_fields=["job", "inspect_state"])
    assert _post(client, model).status_code == 409


def test_the_plan_rate_limit_answers_429_with_retry_after(team, model):
    well_inside_a_minute()
    team.workspace.plan.predict_requests_per_minute = 3
    team.workspace.plan.save()
    client, _ = _key_client(team)
    statuses = [_post(client, model).status_code for _ in range(4)]
    assert statuses == [503, 503, 503, 429]
    response = _post(client, model)
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 60
    assert "3 calls a minute" in response.json()["detail"]
    # Another key has its own budget.
    other, _ = _key_client(team)
    assert _post(other, model).status_code == 503


def test_the_window_resets_each_minute():
    assert rate_take(who="t", limit=1, now=120.0).allowed
    assert not rate_take(who="t", limit=1, now=150.0).allowed
    assert rate_take(who="t", limit=1, now=180.0).allowed


def test_usage_is_counted_per_key_model_and_day(team, model):
    client, key = _key_client(team)
    for _ in range(3):
        _post(client, model)
    assert usage_flush() == 1
    row = UsageDay.objects.get()
    assert (row.calls, row.errors, row.images) == (3, 3, 0)
    assert row.api_key == key and row.model == model and row.deployment is None
    assert usage_flush() == 0  # nothing counted twice
    _post(client, model)
    usage_flush()
    row.refresh_from_db()
    assert row.calls == 4


def test_the_billing_page_shows_inference_calls_per_day_key_and_model(team, model):
    client, key = _key_client(team)
    _post(client, model)
    usage_flush()
    viewer = Client()
    viewer.force_login(team.viewer)
    page = viewer.get("/w/acme/billing/").content.decode()
    section = page[page.index('data-testid="inference-usage"') :]
    assert key.prefix in section and model.name in section


def test_a_call_finds_its_caller_and_model_in_one_query(
    team, model, client, django_assert_num_queries, settings
):
    """With a key, the key, its creator's membership and the model are one query, kept by the
    process for a second (deploy.api: the next call makes none); from the browser, its user
    (the session comes from the cache), then the membership and the model in one query."""
    settings.PREDICT_KEY_KEPT_SECONDS = 60  # a slow machine's second call still finds it kept
    key_client, _ = _key_client(team)
    _post(key_client, model)  # the key's first use is written once
    with django_assert_num_queries(0):
        assert _post(key_client, model).status_code == 503
    settings.PREDICT_KEY_KEPT_SECONDS = 0
    with django_assert_num_queries(1):
        assert _post(key_client, model).status_code == 503
    client.force_login(team.owner)
    with django_assert_num_queries(2):
        assert _post(client, model).status_code == 503


def test_a_browser_sessions_lookup_is_kept_too_and_still_csrf_checked(
    team, model, django_assert_num_queries, settings
):
    """A session's calls within the second skip the session, its person and the lookup (the
    try-it page and the public demo); the CSRF check is made on every call all the same."""
    settings.PREDICT_KEY_KEPT_SECONDS = 60  # a slow machine's second call still finds it kept
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(team.owner)
    browser.get("/w/acme/")  # the page sets its CSRF cookie
    token = {"X-CSRFToken": browser.cookies["csrftoken"].value}
    # Its person, then membership and model (the session comes from the cache).
    with django_assert_num_queries(2):
        assert _post(browser, model, headers=token).status_code == 503
    with django_assert_num_queries(0):
        assert _post(browser, model, headers=token).status_code == 503
    refused = _post(browser, model)  # kept, but without the page's token
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]


def test_a_kept_session_signed_out_is_refused_where_it_is_looked_up_again(team, model, settings):
    """What was kept was for one model: a call for another looks the session up again, and a
    session signed out since is refused (a kept lookup lapses within the second anyway)."""
    settings.PREDICT_KEY_KEPT_SECONDS = 60
    other = trained_model_row(workspace=team.workspace, class_names=["cat"])
    browser = Client()
    browser.force_login(team.owner)
    assert _post(browser, model).status_code == 503
    assert _post(browser, other).status_code == 503
    session = browser.cookies["sessionid"].value
    second = trained_model_row(workspace=team.workspace, class_names=["dog"])
    browser.logout()
    signed_out = Client()
    signed_out.cookies["sessionid"] = session  # the old cookie, its session now gone
    assert _post(signed_out, second).status_code == 401
