"""Semantic segmentation and depth models served for real: the predict API in front (an API
key), the shared model server behind, models trained here on painted discs
(tests.deploy.pixel_models, once per session), and their ONNX exports made by the export job."""

import base64
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from django.test import Client
from django.urls import reverse
from PIL import Image as PILImage

from deploy.models import ExportState, ModelExport
from deploy.tasks import export_run
from tests.training.factories import trained_model_row
from workspaces.services.keys import api_key_create

pytestmark = pytest.mark.django_db
# The database only finds the key and the model, as for every task on both databases (the try
# page test below runs on both); these check the model server's answers.
SERVED_ON_ANY_DATABASE = "predict of a pixel task: only the model server's answer differs"
ROOT = Path(__file__).resolve().parents[2]
CLASSES = ["background", "disc"]
# The semantic model's epochs on 12 painted 64 px images. At 1-2 epochs it calls every pixel
# background (IoU 0 with the disc, measured); the first epochs that find the disc are these.
SEMANTIC_EPOCHS = 40
DEPTH_EPOCHS = 2


@pytest.fixture(scope="session")
def pixel_models(tmp_path_factory) -> dict:
    """{"semantic": .pt, "depth": .pt, "image": held-out PNG, "mask": its true disc mask}."""
    work = tmp_path_factory.mktemp("pixel-models")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_CURRENT_TEST", "CI")}
    env.update(
        YOLO_OFFLINE="1",
        YOLO_AUTOINSTALL="0",
        YOLO_CONFIG_DIR=str(work / "config"),
        CUDA_VISIBLE_DEVICES="",
    )
    done = subprocess.run(  # noqa: S603 - our own module
        [
            sys.executable,
            "-m",
            "tests.deploy.pixel_models",
            str(work),
            str(SEMANTIC_EPOCHS),
            str(DEPTH_EPOCHS),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((work / "manifest.json").read_text())


@pytest.fixture
def api(team, inference_server, settings) -> Client:
    settings.INFERENCE_URL = inference_server.url
    _, raw = api_key_create(access=team.access("owner"), name="curl", scopes=["predict"])
    return Client(headers={"Authorization": f"Bearer {raw}"})


def _model(team, pixel_models: dict, task: str):
    weights = Path(pixel_models[task]).read_bytes()
    model = trained_model_row(
        workspace=team.workspace,
        class_names=CLASSES if task == "semantic" else ["depth"],
        task=task,
        weights=weights,
    )
    # The model server's cache key holds the weights' hash, as for a trained or uploaded model:
    # a row id used again after a test's rollback never finds another test's model loaded.
    model.weights_sha256 = hashlib.sha256(weights).hexdigest()
    model.save(update_fields=["weights_sha256"])
    return model


def _predict(client: Client, model, image: Path | bytes, **params):
    data = image.read_bytes() if isinstance(image, Path) else image
    upload = io.BytesIO(data)
    upload.name = "held-out.png"
    return client.post(f"/api/v1/models/{model.pk}/predict", {"file": upload, **params})


def _rle_decode(rle: dict) -> np.ndarray:
    """COCO's uncompressed RLE (column-major, first run 0s) into a boolean [h, w] mask."""
    height, width = rle["size"]
    flat = np.zeros(height * width, dtype=bool)
    position = 0
    for i, count in enumerate(rle["counts"]):
        if i % 2:
            flat[position : position + count] = True
        position += count
    assert position == height * width, "the runs cover the image exactly"
    return flat.reshape((height, width), order="F")


def _class_map(results: list[dict], shape: tuple[int, int]) -> np.ndarray:
    class_map = np.full(shape, 255, dtype=np.uint8)
    for row in results:
        mask = _rle_decode(row["mask"])
        assert not (class_map[mask] != 255).any(), "each pixel is at most one class"
        class_map[mask] = row["class"]
    return class_map


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    union = (a | b).sum()
    return float((a & b).sum() / union) if union else 0.0


@pytest.mark.same_on_any_database(SERVED_ON_ANY_DATABASE)
def test_a_semantic_model_answers_rle_masks_per_class_and_a_png_on_request(team, api, pixel_models):
    model = _model(team, pixel_models, "semantic")
    image = Path(pixel_models["image"])
    with PILImage.open(image) as picture:
        size = (picture.height, picture.width)
    assert size == (72, 96)  # not the 64 px it runs at: the answer is at the image's size

    response = _predict(api, model, image, imgsz="64")
    assert response.status_code == 200, response.content
    (answer,) = response.json()["images"]
    assert answer["shape"] == list(size)
    assert "mask" not in answer  # the PNG only on request
    rows = answer["results"]
    assert rows, "a class is found in some pixel"
    for row in rows:
        assert row["class"] in range(len(CLASSES)) and row["name"] == CLASSES[row["class"]]
        assert row["mask"]["size"] == list(size)
        assert row["pixel_ratio"] == row["pixel_share"]  # Ultralytics' name, the same figure
    class_map = _class_map(rows, size)
    for row in rows:
        share = (class_map == row["class"]).sum() / class_map.size
        assert row["pixel_share"] == pytest.approx(share, abs=1e-5)
    # A two-class model puts every pixel in a class.
    assert sum(row["pixel_share"] for row in rows) == pytest.approx(1.0, abs=1e-4)
    assert (class_map != 255).all()

    # The painted disc is found where it is.
    truth = np.asarray(PILImage.open(pixel_models["mask"])) == 1
    iou = _iou(class_map == 1, truth)
    print(f"semantic IoU with the painted disc after {SEMANTIC_EPOCHS} epochs: {iou:.3f}")
    assert iou > 0, "the disc class overlaps the painted disc"

    # mask=png (a form field, or in the query): the same mask as one PNG, at the image's size.
    response = _predict(api, model, image, imgsz="64", mask="png")
    assert response.status_code == 200, response.content
    png = response.json()["images"][0]["mask"]
    assert png["format"] == "png" and png["size"] == list(size) and png["no_class"] == 255
    with PILImage.open(io.BytesIO(base64.b64decode(png["data"]))) as decoded:
        assert decoded.mode == "L"
        assert np.array_equal(np.asarray(decoded), class_map)


@pytest.mark.same_on_any_database(SERVED_ON_ANY_DATABASE)
def test_a_depth_model_answers_a_16_bit_png_in_metres_at_the_image_size(team, api, pixel_models):
    model = _model(team, pixel_models, "depth")
    image = Path(pixel_models["image"])
    response = _predict(api, model, image, imgsz="64")
    assert response.status_code == 200, response.content
    (answer,) = response.json()["images"]
    assert answer["shape"] == [72, 96] and answer["results"] == []
    depth = answer["depth"]
    assert depth["unit"] == "m" and depth["scale"] > 0 and depth["size"] == [72, 96]
    assert 0 < depth["min"] <= depth["median"] <= depth["max"]
    with PILImage.open(io.BytesIO(base64.b64decode(depth["data"]))) as decoded:
        assert decoded.mode.startswith("I;16") or decoded.mode == "I"
        values = np.asarray(decoded).astype(np.int64)
    assert values.shape == (72, 96)
    readings = values[values > 0] / depth["scale"]
    assert readings.size == values.size * depth["valid_share"]
    # The PNG holds the same depths the figures describe, to its 1/scale steps.
    step = 1 / depth["scale"]
    assert readings.min() == pytest.approx(depth["min"], abs=step)
    assert readings.max() == pytest.approx(depth["max"], abs=step)
    assert np.median(readings) == pytest.approx(depth["median"], abs=step)


@pytest.mark.same_on_any_database(SERVED_ON_ANY_DATABASE)
def test_bad_input_to_pixel_models_is_refused_as_for_any_model(team, api, pixel_models):
    semantic = _model(team, pixel_models, "semantic")
    depth = _model(team, pixel_models, "depth")
    image = Path(pixel_models["image"])
    refusals = [
        (semantic, b"not an image at all", {}, "not a usable image"),
        (semantic, image, {"imgsz": "100000"}, "imgsz must be between 32 and 1280"),
        (semantic, image, {"mask": "gif"}, "mask must be rle or png"),
        (depth, image, {"mask": "png"}, "mask=png is for semantic segmentation"),
    ]
    for model, data, params, words in refusals:
        response = _predict(api, model, data, **params)
        assert response.status_code == 400, (params, response.content)
        assert words in response.json()["detail"], response.json()


@pytest.mark.same_on_any_database(SERVED_ON_ANY_DATABASE)
def test_onnx_exports_of_semantic_and_depth_models_are_made_and_served(team, api, pixel_models):
    image = Path(pixel_models["image"])
    for task in ("semantic", "depth"):
        model = _model(team, pixel_models, task)
        before = _predict(api, model, image, imgsz="64").json()["images"][0]
        export = ModelExport.objects.create(workspace=team.workspace, model=model, format="onnx")
        export_run(export.pk)  # what the worker does with the message
        export.refresh_from_db()
        assert export.state == ExportState.SUCCEEDED, export.error
        # From now on the model server is handed the ONNX file, and answers alike.
        response = _predict(api, model, image, imgsz="64")
        assert response.status_code == 200, response.content
        after = response.json()["images"][0]
        assert after["shape"] == before["shape"] == [72, 96]
        if task == "semantic":
            assert {r["class"] for r in after["results"]} == {r["class"] for r in before["results"]}
            ours = _class_map(after["results"], (72, 96))
            theirs = _class_map(before["results"], (72, 96))
            assert (ours == theirs).mean() > 0.99  # runtimes differ by float noise at edges
        else:
            assert after["depth"]["median"] == pytest.approx(before["depth"]["median"], rel=0.01)


def test_the_try_page_of_pixel_models_explains_their_answer_and_hides_the_threshold(client, team):
    client.force_login(team.editor)
    for task, words, printed in (
        ("semantic", "mask=png", "pixel_share"),
        ("depth", "16-bit PNG", 'depth["min"]'.replace('"', "'")),
    ):
        model = trained_model_row(workspace=team.workspace, class_names=CLASSES, task=task)
        response = client.get(reverse("model_try", kwargs={"ws_slug": "acme", "pk": model.pk}))
        assert response.status_code == 200
        html = response.content.decode()
        assert f'data-task="{task}"' in html and words in html
        assert 'id="try-depth-readout"' in html
        # A per-pixel answer has no confidence to filter by.
        assert '<div class="field" hidden>\n        <label for="try-threshold">' in html
        python = response.context["snippets"]["python"]
        assert printed in python and "confidence" not in python
        compile(python, "snippet.py", "exec")
    detect = trained_model_row(workspace=team.workspace, class_names=CLASSES)
    html = client.get(reverse("model_try", kwargs={"ws_slug": "acme", "pk": detect.pk})).content
    assert b'<div class="field">\n        <label for="try-threshold">' in html
