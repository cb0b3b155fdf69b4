"""The inference server as its callers see it: a real `python -m deploy.inference` process,
real trained models of every task, called over HTTP."""

import asyncio
import io
import os
import signal
import zipfile
from pathlib import Path

import httpx
import pytest
from PIL import Image

from tests.deploy.conftest import SHARED, inference_server_start

COCO_IMAGE = SHARED / "coco8" / "images" / "val" / "000000000036.jpg"
COCO_IMAGE_2 = SHARED / "coco8" / "images" / "val" / "000000000042.jpg"
DOTA_IMAGE = SHARED / "dota8" / "images" / "val" / "P1580__1024__824___824.jpg"
IMAGENET_IMAGE = SHARED / "imagenet10" / "val" / "goldfish" / "ILSVRC2012_val_00002241.JPEG"
IMAGES = {
    "detect": COCO_IMAGE,
    "segment": COCO_IMAGE,
    "pose": COCO_IMAGE,
    "obb": DOTA_IMAGE,
    "classify": IMAGENET_IMAGE,
}
QUERY = {"conf": "0.25", "iou": "0.7", "imgsz": "64", "max_det": "300"}


def predict(server, model: Path, image: bytes, *, key: str, params=None, headers=None, **kw):
    return httpx.post(
        f"{server.url}/predict",
        params={**QUERY, **(params or {})},
        content=image,
        headers={
            **server.auth("predict", key, str(model)),
            "X-Model-Path": str(model),
            "X-Model-Key": key,
            "X-Model-Name": f"{key or 'unnamed'} model",
            **(headers or {}),
        },
        timeout=120,
        **kw,
    )


def stats(server) -> dict:
    response = httpx.get(f"{server.url}/stats", headers=server.auth("stats"), timeout=10)
    assert response.status_code == 200
    return response.json()


_local_models: dict = {}


def in_process_rows(model: Path, image: Path, **options) -> list[dict]:
    """What Ultralytics itself answers for this model and image, in this test process."""
    from ultralytics import YOLO

    if model not in _local_models:
        _local_models[model] = YOLO(str(model))
    result = _local_models[model].predict(str(image), verbose=False, **options)[0]
    return result.summary()


def assert_rows_equal(served: list[dict], local: list[dict]) -> None:
    assert len(served) == len(local)
    for got, want in zip(served, local, strict=True):
        assert got["class"] == want["class"] and got["name"] == want["name"]
        assert got["confidence"] == pytest.approx(want["confidence"], abs=1e-4)
        for part in ("box", "segments", "keypoints"):
            assert (part in got) == (part in want), part
            if part in want:
                assert got[part].keys() == want[part].keys()
                for axis, values in want[part].items():
                    assert got[part][axis] == pytest.approx(values, abs=1e-2), (part, axis)


def served_image(response: httpx.Response, image: Path, model_name: str) -> dict:
    """The one image's answer, after checking what every answer has."""
    import ultralytics

    assert response.status_code == 200, response.text
    body = response.json()
    assert body.keys() == {"images", "metadata"}
    meta = body["metadata"]
    assert meta["imageCount"] == 1
    assert meta["model"] == model_name
    assert meta["version"]["ultralytics"] == ultralytics.__version__
    assert {"torch", "torchvision", "python"} <= meta["version"].keys()
    assert meta["functionTimeCall"] > 0
    (answer,) = body["images"]
    with Image.open(image) as img:
        assert answer["shape"] == [img.height, img.width]
    assert answer["speed"].keys() == {"preprocess", "inference", "postprocess"}
    assert all(v >= 0 for v in answer["speed"].values())
    assert answer["speed"]["inference"] > 0
    return answer


def test_health_needs_no_token_and_says_who_it_is(inference_server):
    response = httpx.get(f"{inference_server.url}/health")

    assert response.status_code == 200
    body = response.json()
    assert body["ok"] is True
    assert body["pid"] == inference_server.proc.pid
    assert body["name"] == "shared"
    assert body["device"] == "cpu"
    assert isinstance(body["models"], list)


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_predict_answers_as_the_ultralytics_platform(inference_server, confident_yolo_models, task):
    model, image = confident_yolo_models[task], IMAGES[task]

    response = predict(inference_server, model, image.read_bytes(), key=f"shape-{task}")

    answer = served_image(response, image, f"shape-{task} model")
    rows = answer["results"]
    assert rows, "a model sure of class 0 finds something"
    height, width = answer["shape"]
    corners = 4 if task == "obb" else 2
    for row in rows:
        assert list(row)[:4] == ["class", "name", "confidence", "box"]
        assert row["class"] == 0
        assert row["name"] == ("plane" if task == "obb" else "person")
        assert 0.25 <= row["confidence"] <= 1
        assert list(row["box"]) == [f"{a}{i}" for i in range(1, corners + 1) for a in "xy"]
        xs = [row["box"][f"x{i}"] for i in range(1, corners + 1)]
        ys = [row["box"][f"y{i}"] for i in range(1, corners + 1)]
        if task != "obb":  # an oriented box's corners may lie outside the picture
            assert all(0 <= x <= width for x in xs) and all(0 <= y <= height for y in ys)
            assert xs[0] <= xs[1] and ys[0] <= ys[1]
        assert all(v == round(v, 5) for v in xs + ys)  # Ultralytics' rounding, pixels
        assert ("segments" in row) == (task == "segment")
        assert ("keypoints" in row) == (task == "pose")
        if task == "segment":
            assert row["segments"].keys() == {"x", "y"}
            assert len(row["segments"]["x"]) == len(row["segments"]["y"])
            assert all(0 <= x <= width for x in row["segments"]["x"])
        if task == "pose":
            kpts = row["keypoints"]
            assert kpts.keys() == {"x", "y", "visible"}
            assert len(kpts["x"]) == len(kpts["y"]) == len(kpts["visible"]) == 17
            assert all(0 <= v <= 1 for v in kpts["visible"])  # confidences, as the Platform's
    # Ultralytics' own serialisation of the same prediction, row for row.
    local = in_process_rows(model, image, conf=0.25, iou=0.7, imgsz=64, max_det=300)
    assert_rows_equal(rows, local)


def test_classify_answers_top_five(inference_server, yolo_models):
    # A trained classifier keeps its torchvision transforms in its checkpoint: the restricted
    # loader's list holds those classes.
    model, image = yolo_models["classify"], IMAGES["classify"]

    response = predict(inference_server, model, image.read_bytes(), key="shape-classify")

    answer = served_image(response, image, "shape-classify model")
    rows = answer["results"]
    classes = sorted(p.name for p in (SHARED / "imagenet10" / "train").iterdir())
    assert len(rows) == 5
    for row in rows:
        assert row.keys() == {"class", "name", "confidence"}
        assert row["name"] == classes[row["class"]]
    confidences = [row["confidence"] for row in rows]
    assert confidences == sorted(confidences, reverse=True)
    assert sum(confidences) <= 1.0001
    assert_rows_equal(rows, in_process_rows(model, image, imgsz=64))


def test_normalize_and_decimals(inference_server, confident_yolo_models):
    model = confident_yolo_models["detect"]

    response = predict(
        inference_server,
        model,
        COCO_IMAGE.read_bytes(),
        key="normalize",
        params={"normalize": "true", "decimals": "2"},
    )

    rows = served_image(response, COCO_IMAGE, "normalize model")["results"]
    assert rows
    for row in rows:
        for value in row["box"].values():
            assert 0 <= value <= 1 and value == round(value, 2)


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic x"}],
    ids=["none", "wrong", "not-bearer"],
)
def test_predict_and_stats_need_the_token(inference_server, confident_yolo_models, headers):
    model = confident_yolo_models["detect"]
    response = httpx.post(
        f"{inference_server.url}/predict",
        content=COCO_IMAGE.read_bytes(),
        headers={"X-Model-Path": str(model), "X-Model-Key": "auth", **headers},
    )
    assert response.status_code == 401
    assert response.json() == {"detail": "Missing or wrong inference token."}
    response = httpx.get(f"{inference_server.url}/stats", headers=headers)
    assert response.status_code == 401


def test_missing_model_file_is_404(inference_server, tmp_path):
    response = predict(
        inference_server, tmp_path / "gone.pt", COCO_IMAGE.read_bytes(), key="missing"
    )

    assert response.status_code == 404
    assert "gone.pt" in response.json()["detail"]


@pytest.mark.parametrize(
    "body", [b"", b"not an image at all", COCO_IMAGE.read_bytes()[:400]], ids=str
)
def test_unreadable_image_is_400(inference_server, confident_yolo_models, body):
    response = predict(inference_server, confident_yolo_models["detect"], body, key="garbage")

    assert response.status_code == 400
    assert response.json()["detail"]


def test_too_large_body_is_413(inference_server, confident_yolo_models):
    body = b"\xff" * (20 * 1024 * 1024 + 1)
    response = predict(inference_server, confident_yolo_models["detect"], body, key="large")

    assert response.status_code == 413


@pytest.mark.parametrize(
    "params",
    [
        {"conf": "0"},
        {"conf": "1.5"},
        {"conf": "nan"},
        {"iou": "abc"},
        {"iou": "-0.1"},
        {"imgsz": "16"},
        {"imgsz": "2000"},
        {"imgsz": "64.5"},
        {"max_det": "0"},
        {"max_det": "1001"},
        {"normalize": "maybe"},
        {"decimals": "11"},
    ],
    ids=lambda p: "&".join(f"{k}={v}" for k, v in p.items()),
)
def test_bad_parameters_are_400(inference_server, confident_yolo_models, params):
    name = next(iter(params))

    response = predict(
        inference_server, confident_yolo_models["detect"], COCO_IMAGE.read_bytes(),
        key="params", params=params,
    )  # fmt: skip

    assert response.status_code == 400
    assert name in response.json()["detail"]


def test_bad_model_headers_are_400(inference_server, confident_yolo_models):
    model = confident_yolo_models["detect"]
    image = COCO_IMAGE.read_bytes()

    relative = predict(inference_server, Path("weights/best.pt"), image, key="relative")
    no_key = predict(inference_server, model, image, key="")
    other_suffix = predict(inference_server, model.with_suffix(".pkl"), image, key="pkl")

    assert [relative.status_code, no_key.status_code, other_suffix.status_code] == [400] * 3


def test_refused_and_broken_weights_are_500_with_a_reason(inference_server, tmp_path):
    not_zip = tmp_path / "notes.pt"
    not_zip.write_text("hello")
    hostile = tmp_path / "hostile.pt"
    with zipfile.ZipFile(hostile, "w") as zf:  # a pickle that would call os.system("true")
        zf.writestr("hostile/data.pkl", b"\x80\x02cos\nsystem\nX\x04\x00\x00\x00true\x85R.")

    for path in (not_zip, hostile):
        response = predict(inference_server, path, COCO_IMAGE.read_bytes(), key=path.name)

        assert response.status_code == 500
        detail = response.json()["detail"]
        assert "refused" in detail and "Traceback" not in detail
    assert "os.system" in detail


def test_onnx_model(inference_server, yolo_models, tmp_path):
    import importlib.util

    if importlib.util.find_spec("onnxruntime") is None:
        onnx = tmp_path / "model.onnx"
        onnx.write_bytes(b"\x08\x07")
        response = predict(inference_server, onnx, COCO_IMAGE.read_bytes(), key="onnx")
        assert response.status_code == 500
        assert "onnxruntime" in response.json()["detail"]
        return
    from ultralytics import YOLO

    weights = tmp_path / "detect.pt"  # Ultralytics exports beside it: not beside the run's
    weights.write_bytes(yolo_models["detect"].read_bytes())
    onnx = Path(YOLO(str(weights)).export(format="onnx", imgsz=64, dynamic=True))
    response = predict(
        inference_server, onnx, COCO_IMAGE.read_bytes(), key="onnx",
        params={"conf": "0.001"}, headers={"X-Model-Task": "detect"},
    )  # fmt: skip
    rows = served_image(response, COCO_IMAGE, "onnx model")["results"]
    assert_rows_equal(rows, in_process_rows(onnx, COCO_IMAGE, conf=0.001, imgsz=64))


def test_least_recently_used_model_is_unloaded(inference_server, confident_yolo_models):
    """The session's server keeps 3 models (INFERENCE_MAX_MODELS=3)."""
    model = confident_yolo_models["detect"]
    image = COCO_IMAGE.read_bytes()

    def loaded() -> list[str]:
        return httpx.get(f"{inference_server.url}/health").json()["models"]

    for key in ("lru-1", "lru-2", "lru-3"):
        assert predict(inference_server, model, image, key=key).status_code == 200
    assert loaded() == ["lru-1", "lru-2", "lru-3"]
    assert predict(inference_server, model, image, key="lru-1").status_code == 200
    assert predict(inference_server, model, image, key="lru-4").status_code == 200

    assert loaded() == ["lru-3", "lru-1", "lru-4"]
    models = stats(inference_server)["models"]
    assert models["lru-2"]["loaded"] is False and models["lru-2"]["requests"] == 1
    assert models["lru-1"]["loaded"] is True and models["lru-1"]["requests"] == 2
    # An unloaded model is loaded again when asked for.
    assert predict(inference_server, model, image, key="lru-2").status_code == 200
    assert loaded() == ["lru-1", "lru-4", "lru-2"]


async def _concurrently(server, model: Path, requests: list[tuple[bytes, dict]], key: str):
    limits = httpx.Limits(max_connections=len(requests))
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        calls = [
            client.post(
                f"{server.url}/predict",
                params={**QUERY, **params},
                content=image,
                headers={
                    **server.auth("predict", key, str(model)),
                    "X-Model-Path": str(model),
                    "X-Model-Key": key,
                },
            )
            for image, params in requests
        ]
        return await asyncio.gather(*calls)


def test_concurrent_requests_share_predictions_and_get_their_own_answers(
    inference_server, confident_yolo_models
):
    model = confident_yolo_models["segment"]
    images = [COCO_IMAGE.read_bytes(), COCO_IMAGE_2.read_bytes()] * 4
    params = {"imgsz": "320"}  # long enough a prediction for the others to queue behind it
    key = "batching"
    sequential = []
    for image in images[:2]:
        response = predict(inference_server, model, image, key=key, params=params)
        assert response.status_code == 200
        sequential.append(response.json()["images"][0])
    before = stats(inference_server)["models"][key]

    responses = asyncio.run(
        _concurrently(inference_server, model, [(image, params) for image in images], key)
    )

    after = stats(inference_server)["models"][key]
    assert all(r.status_code == 200 for r in responses)
    assert after["images"] - before["images"] == 8
    assert after["batches"] - before["batches"] < 8
    for i, response in enumerate(responses):
        answer = response.json()["images"][0]
        assert answer["shape"] == sequential[i % 2]["shape"]
        assert_rows_equal(answer["results"], sequential[i % 2]["results"])
    assert after["requests"] - before["requests"] == 8
    assert after["p50_ms"] > 0 and after["p95_ms"] >= after["p50_ms"]


def test_requests_with_other_parameters_get_their_own_predictions(
    inference_server, confident_yolo_models
):
    model = confident_yolo_models["detect"]
    image = COCO_IMAGE.read_bytes()
    few, many = {"max_det": "2", "imgsz": "320"}, {"max_det": "50", "imgsz": "320"}

    responses = asyncio.run(
        _concurrently(inference_server, model, [(image, few), (image, many)] * 4, "mixed")
    )

    counts = [len(r.json()["images"][0]["results"]) for r in responses]
    assert counts[0::2] == [2] * 4
    assert all(count > 2 for count in counts[1::2])


def test_errors_and_latency_are_counted_per_model(inference_server, confident_yolo_models):
    model = confident_yolo_models["pose"]
    key = "counted"

    predict(inference_server, model, COCO_IMAGE.read_bytes(), key=key)
    predict(inference_server, model, b"garbage", key=key)
    predict(inference_server, model, COCO_IMAGE.read_bytes(), key=key)

    body = stats(inference_server)
    counted = body["models"][key]
    assert counted["name"] == f"{key} model"
    assert (counted["requests"], counted["errors"], counted["images"]) == (3, 1, 2)
    assert 0 < counted["p50_ms"] <= counted["p95_ms"]
    assert body["name"] == "shared" and body["pid"] == inference_server.proc.pid
    assert body["batches"] >= counted["batches"] and body["images"] >= counted["images"]


def test_health_answers_while_a_model_predicts(inference_server, confident_yolo_models):
    """Predictions run in worker threads: the server keeps answering meanwhile."""
    model = confident_yolo_models["segment"]
    big = io.BytesIO()
    Image.open(COCO_IMAGE).resize((1280, 1280)).save(big, format="JPEG")
    predict(inference_server, model, COCO_IMAGE.read_bytes(), key="busy")  # loaded

    async def scenario():
        async with httpx.AsyncClient(timeout=120) as client:
            slow = asyncio.ensure_future(
                client.post(
                    f"{inference_server.url}/predict",
                    params={**QUERY, "imgsz": "1280", "conf": "0.01"},
                    content=big.getvalue(),
                    headers={
                        **inference_server.auth("predict", "busy", str(model)),
                        "X-Model-Path": str(model),
                        "X-Model-Key": "busy",
                    },
                )
            )
            await asyncio.sleep(0.15)
            health = await client.get(f"{inference_server.url}/health")
            return health, slow.done(), await slow

    health, slow_done_before_health, slow = asyncio.run(scenario())
    assert health.status_code == 200
    assert not slow_done_before_health
    assert slow.status_code == 200


def test_dedicated_endpoint_loads_its_model_at_start(confident_yolo_models, tmp_path):
    model = confident_yolo_models["obb"]
    server = inference_server_start(
        tmp_path, "--name", "deployment-ships", "--model-path", str(model),
        "--model-key", "7:abc", "--model-name", "Ships", "--batch-max", "1",
    )  # fmt: skip
    try:
        health = httpx.get(f"{server.url}/health").json()
        assert health["name"] == "deployment-ships"
        assert health["models"] == ["7:abc"]
        assert stats(server)["models"]["7:abc"]["name"] == "Ships"

        response = predict(server, model, DOTA_IMAGE.read_bytes(), key="7:abc")

        assert served_image(response, DOTA_IMAGE, "7:abc model")["results"]
    finally:
        server.stop()


def test_dedicated_endpoint_with_a_missing_model_does_not_start(tmp_path):
    with pytest.raises(AssertionError, match=r"exited [1-9](.|\n)*gone.pt does not exist"):
        inference_server_start(
            tmp_path, "--name", "deployment-x", "--model-path", str(tmp_path / "gone.pt"),
            "--model-key", "1:x",
        )  # fmt: skip


@pytest.mark.skipif(not hasattr(os, "killpg"), reason="POSIX process groups")
def test_server_stops_on_sigterm(tmp_path):
    server = inference_server_start(tmp_path, "--name", "stopping")

    server.stop()

    assert server.proc.returncode == -signal.SIGTERM  # shut down in time, not killed
    assert "Traceback" not in server.log.read_text()
