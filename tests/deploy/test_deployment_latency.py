"""A deployment's page shows the latency of real calls (issue 16, item 3): the live p50/p95 of
its model server process, and, once the beat task has added up the counts, the mean time of
the answered calls per day. The shared API's calls are timed the same way."""

import re
from pathlib import Path

import pytest
from django.test import Client

from deploy import supervisor
from deploy.models import Deployment, DeploymentState, UsageDay
from deploy.ratelimit import _redis
from deploy.usage import PENDING, usage_flush
from tests.annotation.weights import confident_weights_save
from tests.training.factories import trained_model_row
from workspaces.services.keys import api_key_create

pytestmark = pytest.mark.django_db
IMAGE = (
    Path(__file__).resolve().parents[2].parent / "shared/datasets/coco8/images/val/000000000036.jpg"
)


@pytest.fixture
def model(team, tmp_path):
    weights = confident_weights_save(tmp_path / "confident.pt").read_bytes()
    return trained_model_row(workspace=team.workspace, class_names=["person"], weights=weights)


@pytest.fixture
def running(team, model):
    """The deployment's own model server, started as the worker starts it."""
    _redis().delete(PENDING)
    deployment = Deployment.objects.create(
        workspace=team.workspace,
        model=model,
        slug="latency-test",
        name="Latency",
        desired_running=True,
        state=DeploymentState.STARTING,
    )
    deployment = supervisor.process_start(deployment)
    assert deployment.state == DeploymentState.RUNNING, deployment.last_error
    yield deployment
    supervisor.process_stop(deployment)


def _key_client(team) -> Client:
    _, raw = api_key_create(access=team.access("owner"), name="live", scopes=["predict"])
    return Client(headers={"Authorization": f"Bearer {raw}"})


def _post(client: Client, url: str, data: bytes | None = None):
    with IMAGE.open("rb") as f:
        body = {"file": f} if data is None else {"file": _named(data)}
        return client.post(url, {**body, "imgsz": "64"})


def _named(data: bytes):
    import io

    f = io.BytesIO(data)
    f.name = "not-an-image.jpg"
    return f


def _testid(html: str, testid: str) -> list[str]:
    """The text inside each element with this data-testid (tags stripped)."""
    found = re.findall(rf'data-testid="{testid}"[^>]*>(.*?)</(?:dd|td)>', html, re.S)
    return [re.sub(r"<[^>]+>", "", text).strip() for text in found]


def test_the_deployment_page_shows_the_latency_of_real_calls(team, running):
    caller = _key_client(team)
    for _ in range(3):
        response = _post(caller, f"/d/{running.slug}/predict")
        assert response.status_code == 200, response.content
    viewer = Client()
    viewer.force_login(team.viewer)
    page_url = f"/w/acme/deployments/{running.pk}/"

    # At once: the model server's own figures.
    (live,) = _testid(viewer.get(page_url).content.decode(), "stat-latency")
    figures = re.match(r"p50 ([\d.]+) ms · p95 ([\d.]+) ms", live)
    assert figures, live
    p50, p95 = float(figures[1]), float(figures[2])
    assert 0 < p50 <= p95

    # A call the web refuses (not an image) is an error, not a latency.
    assert _post(caller, f"/d/{running.slug}/predict", b"garbage").status_code == 400

    # Once the beat task has added the counts up: the mean of the answered calls, per day.
    assert usage_flush() == 1
    row = UsageDay.objects.get(deployment=running)
    assert (row.calls, row.errors) == (4, 1)
    mean = row.total_ms / 3
    assert mean >= p50 * 0.5  # the web's time includes the model server's
    (cell,) = _testid(viewer.get(page_url).content.decode(), "usage-latency")
    assert cell == f"{round(mean)} ms"

    # Stopped, there is no process to ask; the days keep their figures.
    supervisor.process_stop(running)
    html = viewer.get(page_url).content.decode()
    assert _testid(html, "stat-latency") == []
    assert _testid(html, "usage-latency") == [f"{round(mean)} ms"]


def test_the_shared_api_times_its_answered_calls_too(team, model, inference_server, settings):
    settings.INFERENCE_URL = inference_server.url
    _redis().delete(PENDING)
    caller = _key_client(team)
    for _ in range(2):
        response = _post(caller, f"/api/v1/models/{model.pk}/predict")
        assert response.status_code == 200, response.content
    assert _post(caller, f"/api/v1/models/{model.pk}/predict", b"garbage").status_code == 400
    usage_flush()
    row = UsageDay.objects.get(model=model, deployment=None)
    assert (row.calls, row.errors) == (3, 1)
    assert row.total_ms > 0
    assert not UsageDay.objects.filter(deployment__isnull=False).exists()
