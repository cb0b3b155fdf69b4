"""The inference API's per-key limit is one count in the shared Redis: calls spread over two
web processes (as behind a load balancer) share it."""

import io
import urllib.error
import urllib.request
import uuid

import pytest
from PIL import Image as PILImage

from deploy.ratelimit import _redis
from tests.clock import well_inside_a_minute
from tests.servers import app_server
from tests.training.factories import trained_model_row
from workspaces.services.keys import api_key_create

pytestmark = pytest.mark.django_db(transaction=True)


def _jpeg() -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (32, 32), (10, 200, 30)).save(out, format="JPEG")
    return out.getvalue()


def _predict(base: str, model_id: int, raw_key: str) -> tuple[int, dict]:
    boundary = uuid.uuid4().hex
    body = (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.jpg"\r\n'
            "Content-Type: image/jpeg\r\n\r\n"
        ).encode()
        + _jpeg()
        + f"\r\n--{boundary}--\r\n".encode()
    )
    request = urllib.request.Request(
        f"{base}/api/v1/models/{model_id}/predict",
        data=body,
        headers={
            "Authorization": f"Bearer {raw_key}",
            "Content-Type": f"multipart/form-data; boundary={boundary}",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return response.status, {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}


def test_two_web_processes_share_one_limit(team):
    for key in _redis().scan_iter("kestrel:ratelimit:*"):
        _redis().delete(key)
    plan = team.workspace.plan
    plan.predict_requests_per_minute = 4
    plan.save()
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])
    _, raw = api_key_create(access=team.access("owner"), name="lb", scopes=["predict"])
    # No model server in this test: an admitted call is 503, a limited one 429.
    with (
        app_server(INFERENCE_URL="http://127.0.0.1:9") as a,
        app_server(INFERENCE_URL="http://127.0.0.1:9") as b,
    ):
        well_inside_a_minute()
        answers = [_predict([a, b][i % 2], model.pk, raw) for i in range(6)]
    statuses = [status for status, _ in answers]
    assert statuses == [503, 503, 503, 503, 429, 429], statuses
    assert 1 <= int(answers[-1][1]["retry-after"]) <= 60
