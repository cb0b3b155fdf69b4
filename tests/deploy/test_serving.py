"""The whole shared-API path with real parts: the web API in front, the model server behind,
a model trained in the tests and its ONNX export (made by the export worker) served in its
place once it exists."""

import io
from pathlib import Path

import httpx
import pytest
from django.test import Client
from PIL import Image as PILImage

from deploy.models import ExportState, ModelExport, UsageDay
from deploy.tasks import export_run
from deploy.usage import usage_flush
from tests.deploy.asgi_calls import asgi_post, short_way_count
from tests.training.factories import trained_model_row
from workspaces.services.keys import api_key_create

pytestmark = pytest.mark.django_db
IMAGE = (
    Path(__file__).resolve().parents[2].parent / "shared/datasets/coco8/images/val/000000000036.jpg"
)


def _predict(client, model, **params):
    with IMAGE.open("rb") as f:
        return client.post(f"/api/v1/models/{model.pk}/predict", {"file": f, **params})


def _served(team, models) -> tuple:
    """A model sure of class 0 in the team's workspace, and a predict key's raw value."""
    model = trained_model_row(
        workspace=team.workspace,
        class_names=["person"],
        weights=Path(models["detect"]).read_bytes(),
    )
    _, raw = api_key_create(access=team.access("owner"), name="curl", scopes=["predict"])
    return model, raw


def _iou(a: dict, b: dict) -> float:
    w = max(0.0, min(a["x2"], b["x2"]) - max(a["x1"], b["x1"]))
    h = max(0.0, min(a["y2"], b["y2"]) - max(a["y1"], b["y1"]))
    inter = w * h
    area_a = (a["x2"] - a["x1"]) * (a["y2"] - a["y1"])
    area_b = (b["x2"] - b["x1"]) * (b["y2"] - b["y1"])
    union = area_a + area_b - inter
    return inter / union if union > 0 else 0.0


@pytest.mark.same_on_any_database(
    "the model server's answers are what is tested; the routes' rows are tested on both in "
    "tests/deploy/test_predict_api.py"
)
def test_the_api_answers_in_the_platform_shape_then_serves_the_onnx_export(
    team, confident_yolo_models, inference_server, settings
):
    settings.INFERENCE_URL = inference_server.url
    model, raw = _served(team, confident_yolo_models)
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    response = _predict(client, model, conf="0.25", imgsz="320")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"images", "metadata"}
    (image,) = body["images"]
    with PILImage.open(IMAGE) as picture:
        assert image["shape"] == [picture.height, picture.width]
    assert set(image["speed"]) == {"preprocess", "inference", "postprocess"}
    assert image["results"], "a model sure of class 0 finds something"
    first = image["results"][0]
    assert set(first) >= {"class", "name", "confidence", "box"}
    assert set(first["box"]) == {"x1", "y1", "x2", "y2"}
    assert first["confidence"] >= 0.25
    assert body["metadata"]["imageCount"] == 1 and body["metadata"]["model"] == model.name

    # Export to ONNX for real; from then on the server is handed the ONNX file.
    export = ModelExport.objects.create(workspace=team.workspace, model=model, format="onnx")
    export_run(export.pk)  # what the worker does with the message
    export.refresh_from_db()
    assert export.state == ExportState.SUCCEEDED, export.error
    response = _predict(client, model, conf="0.25", imgsz="320")
    assert response.status_code == 200, response.content
    onnx_results = response.json()["images"][0]["results"]
    # The same boxes, up to float differences between runtimes. This model is equally sure of
    # hundreds of overlapping boxes, so which of two tied boxes survives NMS depends on float
    # noise: the counts may differ by a few percent, but every box either runtime keeps is
    # one the other keeps or suppressed in its favour (an IoU over NMS's 0.7 with a kept box).
    pt_results = image["results"]
    assert abs(len(onnx_results) - len(pt_results)) <= max(2, len(pt_results) // 20)
    assert {r["class"] for r in onnx_results} == {r["class"] for r in pt_results}
    for ours, theirs in ((onnx_results, pt_results), (pt_results, onnx_results)):
        for result in ours:
            best = max(_iou(result["box"], other["box"]) for other in theirs)
            assert best >= 0.6, (result, best)
    stats = httpx.get(
        f"{inference_server.url}/stats", headers=inference_server.auth("stats")
    ).json()
    assert any(key.startswith(f"{model.pk}:onnx:{export.pk}:") for key in stats["models"])

    # Both calls were counted, after their answers went out: two calls, two images, no errors.
    usage_flush()
    row = UsageDay.objects.get(model=model)
    assert (row.calls, row.images, row.errors) == (2, 2, 0)


@pytest.mark.django_db(transaction=True)  # the web's application runs views on its own threads
@pytest.mark.same_on_any_database(
    "the model's answer is what is compared; the short way's rows are tested on both in "
    "tests/deploy/test_predict_route.py"
)
def test_the_short_way_answers_what_the_full_way_answers(
    team, confident_yolo_models, inference_server, settings
):
    """Through the web's own ASGI application (the short way, config.predict_route), and
    through Django's whole handler (the test client): the model's answer is the same."""
    settings.INFERENCE_URL = inference_server.url
    model, raw = _served(team, confident_yolo_models)
    auth = {"Authorization": f"Bearer {raw}"}
    before = short_way_count()
    short = asgi_post(
        f"/api/v1/models/{model.pk}/predict",
        headers=auth,
        files={"file": ("a.jpg", IMAGE.read_bytes(), "image/jpeg")},
        data={"conf": "0.25", "imgsz": "320"},
    )
    assert short_way_count() == before + 1
    full = _predict(Client(headers=auth), model, conf="0.25", imgsz="320")
    answers = []
    for response in (short, full):
        assert response.status_code == 200, response.content
        body = response.json()
        for image in body["images"]:
            image.pop("speed")  # the model's own times, and the call's:
        body["metadata"].pop("functionTimeCall")
        answers.append(body)
    assert answers[0] == answers[1] and answers[0]["images"][0]["results"]


@pytest.mark.same_on_any_database(
    "the model server's side of a refusal is what is tested; the refusals' rows are tested on "
    "both in tests/deploy/test_predict_speed_bad_input.py"
)
def test_a_damaged_image_is_refused_by_the_model_servers_one_decode_with_the_imports_reason(
    team, confident_yolo_models, inference_server, settings
):
    """Every pixel of an image is decoded once, by the model server, which refuses a file an
    import would refuse, with the import's reason (deploy.inference.inputs): a truncated JPEG,
    and one with a marker no scan may hold (OpenCV decoded that one without a word); each next
    call gets its own answer. Not an image, and a bomb, are refused by their header in the web:
    the server never sees them."""
    settings.INFERENCE_URL = inference_server.url
    model, raw = _served(team, confident_yolo_models)
    client = Client(headers={"Authorization": f"Bearer {raw}"})

    def requests() -> int:
        stats = httpx.get(f"{inference_server.url}/stats", headers=inference_server.auth("stats"))
        return stats.json()["requests"]

    def post(data: bytes):
        upload = io.BytesIO(data)
        upload.name = "a.jpg"
        return client.post(f"/api/v1/models/{model.pk}/predict", {"file": upload})

    whole = IMAGE.read_bytes()
    first = post(whole)
    assert first.status_code == 200, first.content
    boxes = first.json()["images"][0]["results"]
    before = requests()
    bomb = io.BytesIO()
    PILImage.new("1", (20_000, 20_000)).save(bomb, format="PNG")
    for data, words in ((b"not an image at all", "not an image"), (bomb.getvalue(), "too many")):
        refused = post(data)
        assert refused.status_code == 400 and words in refused.json()["detail"]
    assert requests() == before
    scan = whole.index(b"\xff\xda")
    broken = whole[: scan + 4000] + b"\xff\x3b" + whole[scan + 4000 :]
    for damaged in (whole[: len(whole) * 3 // 4], broken, whole[: len(whole) // 2]):
        refused = post(damaged)
        assert refused.status_code == 400, refused.content
        assert refused.json()["detail"].startswith(
            "The file is not a usable image: unreadable or truncated image ("
        )
        again = post(whole)
        assert again.status_code == 200, again.content
        assert again.json()["images"][0]["results"] == boxes
    assert requests() == before + 6  # the server decided on the damaged files itself
