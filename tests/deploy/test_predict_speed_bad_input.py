"""Bad input on the predict path is refused cheaply, with the reason: what an image's header or
the parameters show before any model server is asked, a truncated file by the model server's
decode, or by the web's own check when no server answers (bench/predict.py measures how much a
caller flooding it slows the others); and each answer says where its time went
(Server-Timing), which the bench adds up per hop."""

import io

import pytest
from django.test import Client
from PIL import Image as PILImage

from deploy.ratelimit import _redis
from tests.training.factories import trained_model_row
from workspaces.services.keys import api_key_create

pytestmark = pytest.mark.django_db


def _jpeg() -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (64, 48), (120, 30, 200)).save(out, format="JPEG")
    return out.getvalue()


def _png_bomb() -> bytes:
    out = io.BytesIO()
    PILImage.new("1", (20_000, 20_000)).save(out, format="PNG")  # 400 Mpx in a few dozen KB
    return out.getvalue()


@pytest.fixture
def key_client(team, settings):
    settings.INFERENCE_URL = "http://127.0.0.1:9"  # nothing listens: a good call is a 503
    for key in _redis().scan_iter("kestrel:ratelimit:*"):
        _redis().delete(key)
    _, raw = api_key_create(access=team.access("owner"), name="k", scopes=["predict"])
    return Client(headers={"Authorization": f"Bearer {raw}"})


@pytest.mark.parametrize(
    ("body", "query", "words"),
    [
        (lambda: _jpeg()[: len(_jpeg()) // 2], {}, "truncated"),
        (_png_bomb, {}, "too many pixels"),
        (_jpeg, {"conf": "-1"}, "conf must be between"),
        (_jpeg, {"iou": "7"}, "iou must be between"),
        (_jpeg, {"imgsz": "100000"}, "imgsz must be between"),
    ],
)
def test_bad_input_is_a_400_with_the_reason(team, key_client, body, query, words):
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])
    upload = io.BytesIO(body())
    upload.name = "x.jpg"
    response = key_client.post(f"/api/v1/models/{model.pk}/predict", {"file": upload, **query})
    assert response.status_code == 400, response.content
    assert words in response.json()["detail"]
    # Refused before the model server: its hop is not in the answer's timing.
    assert "model;" not in response["Server-Timing"]


def test_an_answer_says_where_its_time_went(team, key_client, settings):
    """Each hop's milliseconds; and `kept` when the caller's lookup was one this process kept
    (the second call, within the keep), which bench/predict.py counts."""
    settings.PREDICT_KEY_KEPT_SECONDS = 60  # a slow machine's second call still finds it kept
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])

    def call():
        upload = io.BytesIO(_jpeg())
        upload.name = "x.jpg"
        return key_client.post(f"/api/v1/models/{model.pk}/predict", {"file": upload})

    response = call()
    again = call()
    assert again["Server-Timing"].endswith(", kept")
    assert again["Server-Timing"].removesuffix(", kept").count(";dur=") == 5
    assert response.status_code == 503  # no model server: every hop before it was taken
    hops = dict(part.strip().split(";dur=") for part in response["Server-Timing"].split(","))
    assert list(hops) == ["auth", "limit", "body", "image", "view"]
    assert all(float(ms) >= 0 for ms in hops.values())
    assert float(hops["view"]) >= sum(float(hops[n]) for n in ("limit", "body", "image"))
