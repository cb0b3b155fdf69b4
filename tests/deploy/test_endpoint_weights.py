"""A rented endpoint's replica fetches its weights with a token it mints when it starts
(deploy/weights_fetch.py), from a view that checks it (deploy.api.deployment_weights): a
replacement started any time later gets them, and nothing else does. The fetch across a network
boundary, by the replica SkyServe runs, is in test_endpoint_skyserve.py."""

import base64
import http.server
import json
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.test import Client, override_settings

from deploy import remote_endpoint, weights_fetch
from deploy.inference.tokens import inference_token
from deploy.models import Deployment, DeploymentState, Placement
from tests.training.factories import trained_model_row
from training.models import GpuType

WEIGHTS = b"kestrel weights " * 4096
TYPES = {"h100-80gb": {"accelerators": "H100"}}


@pytest.fixture
def gpu_h100(db) -> GpuType:
    return GpuType.objects.create(
        slug="h100-80gb", name="H100 80GB", vram_gb=80, hourly_price=2.5, provider="skypilot"
    )


def _endpoint(team, gpu, slug: str, **fields) -> Deployment:
    model = trained_model_row(workspace=team.workspace, class_names=["person"], weights=WEIGHTS)
    return Deployment.objects.create(
        workspace=team.workspace,
        model=model,
        name=slug,
        slug=slug,
        placement=Placement.SKYSERVE,
        gpu_type=gpu,
        desired_running=True,
        state=DeploymentState.RUNNING,
        **fields,
    )


def _token(deployment: Deployment, **kwargs) -> str:
    return weights_fetch.weights_token(
        secret=remote_endpoint.endpoint_secret(deployment),
        endpoint=deployment.server_name,
        **kwargs,
    )


def _get(slug: str, token: str):
    return Client().get(f"/d/{slug}/weights", headers={"Authorization": f"Bearer {token}"})


def _body(response) -> bytes:
    return b"".join(response.streaming_content)


@pytest.fixture
def endpoint(team, gpu_h100) -> Deployment:
    return _endpoint(team, gpu_h100, "far-abc123")


def test_a_replicas_own_token_gets_its_endpoints_weights(endpoint):
    response = _get(endpoint.slug, _token(endpoint))
    assert response.status_code == 200
    assert response["Content-Length"] == str(len(WEIGHTS))
    assert _body(response) == WEIGHTS


def test_every_wrong_token_or_endpoint_is_answered_as_an_unknown_endpoint(
    team, gpu_h100, endpoint, settings
):
    unknown = _get("nobody-000000", _token(endpoint))
    assert unknown.status_code == 404
    other = _endpoint(team, gpu_h100, "other-def456")
    secret = remote_endpoint.endpoint_secret(endpoint)
    name = endpoint.server_name
    payload, mac = _token(endpoint).split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["exp"] += 3600
    longer = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    refused = {
        "expired": _token(endpoint, now=time.time() - weights_fetch.TOKEN_SECONDS - 1),
        "another endpoint's": _token(other),
        "valid for a day": inference_token(
            secret=secret, server=name, action="weights", ttl=24 * 3600
        ),
        "altered": f"{longer}.{mac}",
        "for another call": inference_token(secret=secret, server=name, action="stats"),
        "the install's secret": inference_token(
            secret=settings.INFERENCE_TOKEN, server=name, action="weights"
        ),
        "none": "",
    }
    for why, token in refused.items():
        response = _get(endpoint.slug, token)
        assert (response.status_code, response.content) == (404, unknown.content), why
    # The one another endpoint's replica minted opens that endpoint's weights only.
    assert _get(other.slug, refused["another endpoint's"]).status_code == 200


@pytest.mark.parametrize(
    "fields",
    [
        {"desired_running": False, "state": DeploymentState.STOPPED},
        {"desired_running": False, "state": DeploymentState.STOPPING},
        {"desired_running": False, "state": DeploymentState.FAILED},
        {"placement": Placement.LOCAL},
    ],
    ids=["stopped", "stopping", "failed", "local"],
)
def test_an_endpoint_that_should_not_run_on_rented_gpus_gives_no_weights(endpoint, fields):
    token = _token(endpoint)
    Deployment.objects.filter(pk=endpoint.pk).update(**fields)
    response = _get(endpoint.slug, token)
    assert response.status_code == 404
    assert response.json() == {"detail": "No such deployment."}


def test_a_replica_started_25_hours_after_its_endpoint_still_gets_its_weights(
    endpoint, monkeypatch
):
    """SkyServe replaces a replica with the task the endpoint started with: nothing in it may
    have expired a day later (the old signed URL lasted 24 hours)."""
    with override_settings(
        TRAINING_PROVIDERS=["local", "skypilot"],
        TRAINING_EVENTS_URL="http://kestrel.test",
        TRAINING_SKYPILOT_TYPES=TYPES,
    ):
        task = remote_endpoint.service_task(endpoint)
    later = time.time() + 25 * 3600
    monkeypatch.setattr(time, "time", lambda: later)  # Kestrel's clock, a day and more on
    token = weights_fetch.weights_token(
        secret=task["secrets"]["INFERENCE_TOKEN"], endpoint=task["envs"]["KESTREL_ENDPOINT"]
    )
    source = urlsplit(task["envs"]["KESTREL_WEIGHTS_SOURCE"])
    assert source.netloc == "kestrel.test" and not source.query
    response = Client().get(source.path, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    assert _body(response) == WEIGHTS


class _Edge(http.server.BaseHTTPRequestHandler):
    """Kestrel as a replica may see it: a connection cut mid-download, or a redirect to
    S3's presigned URL, which refuses a request that carries a second credential."""

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path == "/cut":
            self.send_response(200)
            self.send_header("Content-Length", str(len(WEIGHTS)))
            self.end_headers()
            self.wfile.write(WEIGHTS[:1000])
        elif self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/presigned")
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/presigned" and "Authorization" not in self.headers:
            self.send_response(200)
            self.send_header("Content-Length", str(len(WEIGHTS)))
            self.end_headers()
            self.wfile.write(WEIGHTS)
        else:
            self.send_response(400)
            self.send_header("Content-Length", "0")
            self.end_headers()
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def edge():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Edge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_cut_download_stores_nothing_and_says_why(edge, tmp_path: Path):
    target = tmp_path / "weights" / "best.pt"
    with pytest.raises(weights_fetch.WeightsFetchError) as refused:
        weights_fetch.weights_fetch(
            url=f"{edge}/cut", endpoint="deployment-x", secret="s", target=target, wait=0
        )
    assert f"after {weights_fetch.ATTEMPTS} tries" in str(refused.value)
    assert f"the download was cut: 1000 of {len(WEIGHTS)} bytes arrived" in str(refused.value)
    assert list(target.parent.iterdir()) == []  # no partial file, under any name


def test_the_token_does_not_follow_a_redirect_to_storage(edge, tmp_path: Path):
    target = tmp_path / "best.pt"
    size = weights_fetch.weights_fetch(
        url=f"{edge}/redirect", endpoint="deployment-x", secret="s", target=target, attempts=1
    )
    assert size == len(WEIGHTS) and target.read_bytes() == WEIGHTS


def test_the_command_says_what_is_missing(monkeypatch, tmp_path, capsys):
    for name in ("KESTREL_WEIGHTS_SOURCE", "KESTREL_ENDPOINT", "INFERENCE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert weights_fetch.main(["--to", str(tmp_path / "best.pt")]) == 2
    assert "KESTREL_WEIGHTS_SOURCE is not set" in capsys.readouterr().err
