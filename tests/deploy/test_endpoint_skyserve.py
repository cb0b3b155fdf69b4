"""A dedicated endpoint on a GPU SkyPilot rents, through SkyServe, tested as the remote trainer
is: SkyPilot is answered at its SDK's edge (tests/fake_sky), which runs the service's replica,
Kestrel's own model server, in a network namespace of the test's own. The replica reaches this
machine only over HTTP (its weights with a token it mints itself, deploy/weights_fetch.py, from
the test's web server), and the web routes calls to the address the row holds. Its SkyPilot
task is parsed by SkyPilot's own parsers in the cloud extra's check
(scripts/cloud_extra_check.sh)."""

import contextlib
import importlib.util
import io
import json
import os
import signal
import time
from datetime import timedelta
from pathlib import Path

import httpx
import psutil
import pytest
from django.test import Client, override_settings
from django.utils import timezone

from billing.ledger import account_for, credits_expire, credits_grant
from billing.models import EntryKind, LedgerEntry
from deploy import remote_endpoint, supervisor
from deploy.inference.tokens import inference_token
from deploy.models import Deployment, DeploymentState, Placement
from tests.servers import free_port
from tests.training.factories import trained_model_row
from training.models import GpuType
from training.providers import sky_sdk
from training.providers.base import ProviderError
from workspaces.services.keys import api_key_create

FAKE_SKY = Path(__file__).resolve().parents[1] / "fake_sky" / "sky" / "__init__.py"
COCO_IMAGE = (
    Path(__file__).resolve().parents[2].parent / "shared/datasets/coco8/images/val/000000000036.jpg"
)
TYPES = {"h100-80gb": {"accelerators": "H100"}}

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def fake_sky(monkeypatch, tmp_path):
    """tests/fake_sky as SkyPilot's SDK, in this process (as a module of its own name: the
    real `sky`, where installed, stays what `import sky` gives)."""
    launches = tmp_path / "sky"
    launches.mkdir()
    monkeypatch.setenv("FAKE_SKY_DIR", str(launches))
    spec = importlib.util.spec_from_file_location("kestrel_fake_sky", FAKE_SKY)
    sky = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sky)
    monkeypatch.setattr(sky_sdk, "sky_module", lambda: sky)
    monkeypatch.setattr(sky_sdk, "installed", lambda: True)
    monkeypatch.syspath_prepend(str(FAKE_SKY.parents[1]))  # found where SkyPilot is looked for
    yield sky
    sky._serve_down(all=True)  # nothing rented outlives the test


@pytest.fixture
def gpu_h100(db) -> GpuType:
    return GpuType.objects.create(
        slug="h100-80gb", name="H100 80GB", vram_gb=80, hourly_price=2.5, provider="skypilot"
    )


def _granted(team, credits: int = 100) -> None:
    credits_grant(team.workspace, credits * 1_000_000, reason="test")


def _reconcile_until(deployment: Deployment, state: str, seconds: float = 120) -> Deployment:
    deadline = time.monotonic() + seconds
    while True:
        deployment = supervisor.deployment_reconcile(deployment.pk)
        if deployment.state == state:
            return deployment
        assert time.monotonic() < deadline, (
            f"still {deployment.state} ({deployment.last_error}; {deployment.replicas}):\n"
            + "\n".join(
                p.read_text()[-2000:] for p in Path(os.environ["FAKE_SKY_DIR"]).glob("*.log")
            )
        )
        time.sleep(1)


def _call(client: Client, slug: str):
    image = io.BytesIO(COCO_IMAGE.read_bytes())
    image.name = "bus.jpg"
    return client.post(f"/d/{slug}/predict", {"file": image, "conf": "0.001"})


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@contextlib.contextmanager
def skyserve_lab(monkeypatch):
    """A namespace reaching only the test's web server (the replica's weights), whose replicas
    the fake SDK runs there."""
    from tests.netns import network_namespace
    from tests.servers import app_server

    with network_namespace() as ns, app_server(host=ns.host_ip) as url:
        monkeypatch.setenv("FAKE_SKY_NETNS", ns.name)
        monkeypatch.setenv("FAKE_SKY_NETNS_IP", ns.ip)
        with override_settings(
            TRAINING_PROVIDERS=["local", "skypilot"],
            TRAINING_EVENTS_URL=url,
            TRAINING_SKYPILOT_TYPES=TYPES,
        ):
            yield ns


@pytest.mark.same_on_any_database(
    "SkyServe's answers and the model server across a network boundary are what is tested; "
    "the row is written as a local endpoint's (tests/deploy/test_deployments.py runs on both)"
)
def test_an_endpoint_on_a_rented_gpu_serves_heals_meters_and_stops(
    team, yolo_models, gpu_h100, fake_sky, monkeypatch, settings, tmp_path
):
    settings.TRAINING_DIR = tmp_path / "training"
    _granted(team)
    model = trained_model_row(
        workspace=team.workspace,
        class_names=["person"],
        weights=Path(yolo_models["detect"]).read_bytes(),
    )
    owner = Client()
    owner.force_login(team.owner)
    with skyserve_lab(monkeypatch) as ns:
        # The form offers the catalogue's SkyPilot GPU with its price; picking it places it.
        page = owner.get("/w/acme/deployments/").content.decode()
        assert "H100 80GB via SkyPilot (2.5 credits an hour)" in page
        response = owner.post(
            "/w/acme/deployments/new/", {"model": model.pk, "name": "Far", "gpu": gpu_h100.pk}
        )
        assert response.status_code == 302
        deployment = Deployment.objects.get()
        assert deployment.placement == Placement.SKYSERVE and deployment.gpu_type == gpu_h100

        deployment = supervisor.deployment_reconcile(deployment.pk)
        assert deployment.state == DeploymentState.STARTING, deployment.last_error
        [launched] = Path(os.environ["FAKE_SKY_DIR"]).glob("serve-launched-*-1.json")
        task = json.loads(launched.read_text())["task"]
        # The server on the rented machine is Kestrel's own, with a secret of this endpoint
        # alone, which also mints the replica's token for its weights: no secret in `run`, and
        # nothing that expires (SkyServe starts replacements with this task at any time).
        assert "-m deploy.inference" in task["run"] and "--name deployment-" in task["run"]
        assert "python3 -m deploy.weights_fetch" in task["run"]
        assert task["secrets"]["INFERENCE_TOKEN"] not in (settings.INFERENCE_TOKEN, "")
        assert set(task["secrets"]) == {"INFERENCE_TOKEN", "SECRET_KEY"}
        source = task["envs"]["KESTREL_WEIGHTS_SOURCE"]
        assert source == f"{settings.TRAINING_EVENTS_URL}/d/{deployment.slug}/weights"
        assert not any(word in json.dumps(task) for word in ("exp=", "sig=", "/api/signed/"))
        assert all(value not in task["run"] for value in task["secrets"].values())
        assert task["resources"]["accelerators"] == "H100:1" and task["resources"]["ports"]

        deployment = _reconcile_until(deployment, DeploymentState.RUNNING)
        assert deployment.url == f"http://{ns.ip}:{remote_endpoint.PORT}"
        # The replica fetched the weights itself, across the network boundary, whole.
        home = Path(os.environ["FAKE_SKY_DIR"]) / f"home-{deployment.service_name}-1"
        [fetched] = home.glob("kestrel-weights/best-*.pt")
        assert fetched.read_bytes() == Path(yolo_models["detect"]).read_bytes()
        assert not list(fetched.parent.glob(".*part*"))
        _, raw = api_key_create(access=team.access("owner"), name="far", scopes=["predict"])
        caller = Client(headers={"Authorization": f"Bearer {raw}"})
        response = _call(caller, deployment.slug)
        assert response.status_code == 200, response.content
        assert response.json()["metadata"]["imageCount"] == 1
        # The install's own secret opens nothing on the rented machine.
        refused = httpx.get(
            f"{deployment.url}/stats",
            headers={
                "Authorization": "Bearer "
                + inference_token(
                    secret=settings.INFERENCE_TOKEN,
                    server=deployment.server_name,
                    action="stats",
                )
            },
            timeout=5,
        )
        assert refused.status_code == 401
        page = owner.get(f"/w/acme/deployments/{deployment.pk}/").content.decode()
        assert 'data-status="READY"' in page and "H100 80GB, rented through SkyPilot" in page

        # Metered per second of ready replica time, from one check to the next.
        time.sleep(1.2)
        deployment = supervisor.deployment_reconcile(deployment.pk)
        assert deployment.replica_seconds >= 1.2 and remote_endpoint.owed(deployment) > 0
        billed = deployment.replica_seconds
        # Captured from the workspace's credits as it runs, at the GPU's price.
        assert deployment.charged == remote_endpoint.owed(deployment)
        [capture] = LedgerEntry.objects.filter(kind=EntryKind.CAPTURE)
        assert -capture.amount == deployment.charged and "Endpoint Far" in capture.reason

        # The replica dies: SkyServe replaces it, the page says so, calls are served again;
        # the time it was not ready is not billed.
        pid = json.loads(launched.read_text())["pid"]
        os.killpg(pid, signal.SIGKILL)
        deployment = _reconcile_until(deployment, DeploymentState.STARTING, 30)
        assert deployment.replaced == 1 and "replaced replica 1" in deployment.last_error
        assert deployment.replica_seconds == billed
        deployment = _reconcile_until(deployment, DeploymentState.RUNNING)
        assert _call(caller, deployment.slug).status_code == 200
        page = owner.get(f"/w/acme/deployments/{deployment.pk}/").content.decode()
        assert 'data-testid="replaced">1<' in page and "SkyServe replaced replica 1" in page

        # Stop: the service is torn down, its replica gone, calls refused.
        [second] = Path(os.environ["FAKE_SKY_DIR"]).glob("serve-launched-*-2.json")
        owner.post(f"/w/acme/deployments/{deployment.pk}/stop/")
        deployment = _reconcile_until(deployment, DeploymentState.STOPPED, 30)
        assert not _alive(json.loads(second.read_text())["pid"])
        assert deployment.url == "" and not fake_sky._services
        assert _call(caller, deployment.slug).status_code == 503


def test_a_replica_that_cannot_start_fails_with_skypilots_reason_unbilled(
    team, gpu_h100, fake_sky, settings
):
    """No cloud had the GPU: the endpoint ends failed, saying why, its service torn down, and
    no replica second billed (none was ever ready)."""
    _granted(team)
    model = trained_model_row(workspace=team.workspace, class_names=["person"])
    deployment = Deployment.objects.create(
        workspace=team.workspace,
        model=model,
        name="nowhere",
        slug="nowhere-abc123",
        placement=Placement.SKYSERVE,
        gpu_type=gpu_h100,
    )
    name = remote_endpoint.service_name(deployment)
    (Path(os.environ["FAKE_SKY_DIR"]) / f"no-capacity-{name}").touch()
    with override_settings(
        TRAINING_PROVIDERS=["local", "skypilot"],
        TRAINING_EVENTS_URL="http://kestrel.test",
        TRAINING_SKYPILOT_TYPES=TYPES,
    ):
        supervisor.deployment_reconcile(deployment.pk)
        deployment = _reconcile_until(deployment, DeploymentState.FAILED, 10)
    assert "no cloud SkyPilot may use had this GPU free" in deployment.last_error
    assert "no capacity" in deployment.last_error  # SkyPilot's own words, from its log
    assert not deployment.desired_running and not fake_sky._services
    assert deployment.replica_seconds == 0 and remote_endpoint.owed(deployment) == 0


def test_a_service_no_endpoint_names_is_torn_down_by_the_check(team, gpu_h100, fake_sky):
    """The workspace was deleted with its rows: the check finds this install's service and
    tears it down (a rented GPU never outlives its endpoint)."""
    model = trained_model_row(workspace=team.workspace, class_names=["person"])
    deployment = Deployment(workspace=team.workspace, model=model, slug="gone-abc123")
    name = remote_endpoint.service_name(deployment)
    (Path(os.environ["FAKE_SKY_DIR"]) / f"no-capacity-{name}").touch()  # no process to run
    service = {"readiness_probe": {"path": "/health"}}
    task = {"run": "sleep 30", "resources": {"ports": 8080}, "service": service}
    fake_sky._serve_up(fake_sky.Task(task), name)
    fake_sky._serve_up(fake_sky.Task(task), "theirs")  # another install's
    with override_settings(TRAINING_PROVIDERS=["local", "skypilot"]):
        supervisor.deployments_check()
    assert set(fake_sky._services) == {"theirs"}


@pytest.mark.skipif(
    importlib.util.find_spec("sky") is None,
    reason="SkyPilot is not installed here (scripts/cloud_extra_check.sh runs it)",
)
def test_skypilots_own_parsers_load_the_service(team, gpu_h100):
    """The service as SkyPilot's own task and service-spec parsers read it (offline)."""
    model = trained_model_row(workspace=team.workspace, class_names=["person"])
    deployment = Deployment.objects.create(
        workspace=team.workspace,
        model=model,
        name="parsed",
        slug="parsed-abc123",
        placement=Placement.SKYSERVE,
        gpu_type=gpu_h100,
    )
    with override_settings(
        TRAINING_SKYPILOT_TYPES=TYPES, TRAINING_EVENTS_URL="https://kestrel.example.com"
    ):
        config = remote_endpoint.service_task(deployment)
    before = json.dumps(config)
    from deploy import skyserve

    skyserve.service_check(config)
    assert json.dumps(config) == before  # the parser empties what it gets: it got a copy
    import sky

    task = sky.Task.from_yaml_config(json.loads(before))
    assert task.service.readiness_path == "/health"
    assert task.service.min_replicas == 1
    assert set(task.secrets) == {"INFERENCE_TOKEN", "SECRET_KEY"}
    assert {r.ports[0] for r in task.resources} == {str(remote_endpoint.PORT)}
    with pytest.raises(ProviderError, match="SkyPilot refused the service"):
        skyserve.service_check({**config, "service": {"readiness_probe": {"nope": 1}}})


def _ready_for_a_minute(team, gpu_h100, fake_sky, tmp_path, credits: int) -> Deployment:
    """An endpoint whose one replica (answering its readiness probe; no model, only its time
    is metered here) has been ready for a minute since its last check, in a workspace with
    exactly `credits` micro-credits."""
    if available := account_for(team.workspace).available:
        credits_expire(team.workspace, available, reason="test")
    credits_grant(team.workspace, credits, reason="test")
    model = trained_model_row(workspace=team.workspace, class_names=["person"])
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "health").write_text("ok")
    port = free_port()
    task = {
        "run": f"exec python3 -m http.server {port} --bind 127.0.0.1 -d {tmp_path / 'site'}",
        "resources": {"ports": port},
        "service": {"readiness_probe": {"path": "/health"}},
    }
    name, _ = fake_sky._serve_up(fake_sky.Task(task), "kestrel-ep-test-broke")
    deadline = time.monotonic() + 15
    while fake_sky._serve_status([name])[0]["status"].name != "READY":
        assert time.monotonic() < deadline, "the replica never answered"
        time.sleep(0.2)
    a_minute_ago = timezone.now() - timedelta(minutes=1)
    return Deployment.objects.create(
        workspace=team.workspace,
        model=model,
        name="broke",
        slug="broke-abc123",
        placement=Placement.SKYSERVE,
        gpu_type=gpu_h100,
        service_name=name,
        state=DeploymentState.RUNNING,
        replicas=[{"id": 1, "status": "READY", "endpoint": "", "launched_at": None}],
        metered_at=a_minute_ago,
        last_ready_at=a_minute_ago,
    )


def test_an_endpoint_stops_when_the_workspaces_credits_run_out(team, gpu_h100, fake_sky, tmp_path):
    """A minute of H100 replica time (2.5 credits an hour: about 0.042) against 0.01 credits
    left: what is left is taken, and the endpoint stops, saying why, its service torn down."""
    deployment = _ready_for_a_minute(team, gpu_h100, fake_sky, tmp_path, credits=10_000)
    deployment = supervisor.deployment_reconcile(deployment.pk)
    assert deployment.state == DeploymentState.STOPPED and not deployment.desired_running
    assert "ran out of credits" in deployment.last_error
    assert 60 <= deployment.replica_seconds < 70
    assert deployment.charged == 10_000 and account_for(team.workspace).available == 0
    assert not fake_sky._services


def test_an_endpoint_stops_before_its_credits_cannot_pay_until_the_next_check(
    team, gpu_h100, fake_sky, tmp_path
):
    """Credits for the minute it ran and 0.02 more, less than the 45 s to the next check
    (0.03125 on an H100): the minute is captured whole, and the endpoint stops now rather than
    run on credits the workspace does not have; the 0.02 stay the workspace's."""
    minute = 41_667  # a little over a minute's 0.041667
    deployment = _ready_for_a_minute(
        team, gpu_h100, fake_sky, tmp_path, credits=minute + 200_000 + 20_000
    )
    deployment = supervisor.deployment_reconcile(deployment.pk)
    assert deployment.state == DeploymentState.RUNNING, deployment.last_error  # 0.22 is plenty
    credits_expire(team.workspace, 200_000, reason="test")
    later = deployment.metered_at - timedelta(seconds=5)
    Deployment.objects.filter(pk=deployment.pk).update(metered_at=later)
    deployment = supervisor.deployment_reconcile(deployment.pk)
    assert deployment.state == DeploymentState.STOPPED and not deployment.desired_running
    assert deployment.charged == remote_endpoint.owed(deployment)  # nothing run on credit
    left = account_for(team.workspace).available
    assert 0 < left < remote_endpoint.owed(deployment)
    assert (
        f"would not cover the replica time until the next check (45 s on {gpu_h100.name}: "
        "0.03125)" in deployment.last_error
    ), deployment.last_error
    assert not fake_sky._services


def test_an_endpoint_is_not_rented_while_the_installs_data_would_be_uploaded_with_its_code(
    team, gpu_h100, fake_sky, settings
):
    """SkyPilot uploads Kestrel's folder to the rented machine, less what .skyignore names
    (var/: the database, every workspace's images and models, the secret key). With the images
    moved inside that folder elsewhere, the endpoint does not start, says why, and nothing is
    rented."""
    _granted(team)
    model = trained_model_row(workspace=team.workspace, class_names=["person"])
    deployment = Deployment.objects.create(
        workspace=team.workspace,
        model=model,
        name="leaky",
        slug="leaky-abc123",
        placement=Placement.SKYSERVE,
        gpu_type=gpu_h100,
    )
    ignored = (remote_endpoint.ROOT / ".skyignore").read_text().split()
    assert {"var/", ".env", ".env.*", ".git/"} <= set(ignored)
    settings.MEDIA_ROOT = str(remote_endpoint.ROOT / "uploads")
    with override_settings(
        TRAINING_PROVIDERS=["local", "skypilot"],
        TRAINING_EVENTS_URL="http://kestrel.test",
        TRAINING_SKYPILOT_TYPES=TYPES,
    ):
        with pytest.raises(ProviderError, match="MEDIA_ROOT .* lies inside Kestrel's code folder"):
            remote_endpoint.service_task(deployment)
        deployment = supervisor.deployment_reconcile(deployment.pk)
    assert deployment.state in (DeploymentState.STOPPED, DeploymentState.FAILED)
    assert "MEDIA_ROOT" in deployment.last_error, deployment.last_error
    assert not fake_sky._services
