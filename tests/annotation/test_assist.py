"""annotation.assist on real images from ../shared/datasets and real Ultralytics models (built
from their YAML, untrained: nothing can be downloaded here), with nothing mocked."""

import io
import os
import pickle
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from annotation import assist
from annotation.assist import AssistError, Prediction

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "datasets"
COCO = SHARED / "coco8"
PLANT = COCO / "images" / "train" / "000000000030.jpg"  # a potted plant in a white vase
VAL_IMAGES = sorted((COCO / "images" / "val").glob("*.jpg"))
LOW_CONF = 1e-6  # an untrained model's scores are about 1e-4


def yolo_rows(path: Path) -> list[tuple[int, list[float]]]:
    rows = [line.split() for line in path.read_text().splitlines() if line.strip()]
    return [(int(row[0]), [float(v) for v in row[1:]]) for row in rows]


def polygon_bounds(data: list[float]) -> tuple[float, float, float, float]:
    xs, ys = data[0::2], data[1::2]
    return min(xs), min(ys), max(xs), max(ys)


def area(data: list[float]) -> float:
    xs, ys = np.array(data[0::2]), np.array(data[1::2])
    return abs(np.dot(xs, np.roll(ys, -1)) - np.dot(ys, np.roll(xs, -1))) / 2


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    """weights("yolo11n-seg.yaml") -> a .pt saved the way Ultralytics saves a trained model."""
    folder = tmp_path_factory.mktemp("weights")
    saved: dict[str, Path] = {}

    def make(yaml_name: str, path: Path | None = None) -> Path:
        if path is None and yaml_name in saved:
            return saved[yaml_name]
        assist._ultralytics_env()  # offline, before the first import
        import torch
        from ultralytics import YOLO

        torch.manual_seed(0)  # the same untrained model, the same scores, every run
        target = path or folder / yaml_name.replace(".yaml", ".pt")
        YOLO(yaml_name).save(target)
        saved.setdefault(yaml_name, target)
        return target

    return make


# ---------------------------------------------------------------- GrabCut


def test_grabcut_outlines_the_object_in_the_box():
    (plant_class, box), *_ = yolo_rows(COCO / "labels" / "train" / "000000000030.txt")
    polygon = assist.grabcut_polygon(PLANT, box)
    assert len(polygon) % 2 == 0 and 3 <= len(polygon) // 2 <= 40
    assert all(0.0 <= v <= 1.0 for v in polygon)
    cx, cy, w, h = box
    x0, y0, x1, y1 = polygon_bounds(polygon)
    margin = 0.02
    assert x0 >= cx - w / 2 - margin and x1 <= cx + w / 2 + margin
    assert y0 >= cy - h / 2 - margin and y1 <= cy + h / 2 + margin
    assert 0.2 < area(polygon) / (w * h) < 0.95  # the plant, not the whole box
    # ... and it is the plant: close to the hand-drawn outline in coco8-seg.
    truth = [d for c, d in yolo_rows(SHARED / "coco8-seg/labels/train/000000000030.txt")]
    assert max(assist.shape_iou("polygon", polygon, "polygon", t) for t in truth) > 0.7
    assert assist.grabcut_polygon(PLANT, box) == polygon  # the same box, the same outline


def test_grabcut_keeps_to_max_points_and_finds_small_objects():
    for image in VAL_IMAGES:
        for _, box in yolo_rows(COCO / "labels" / "val" / f"{image.stem}.txt")[:3]:
            polygon = assist.grabcut_polygon(image, box, max_points=8, iterations=2)
            assert 3 <= len(polygon) // 2 <= 8
            assert all(0.0 <= v <= 1.0 for v in polygon)


@pytest.mark.parametrize(
    ("box", "message"),
    [
        ([0.5, 0.5, 0.0, 0.3], "too small"),
        ([1.6, 1.6, 0.2, 0.2], "outside the image"),
        ([0.5, 0.5, float("nan"), 0.2], "four numbers"),
        ([0.5, 0.5, 0.2], "four numbers"),
    ],
)
def test_grabcut_refuses_a_box_it_cannot_use(box, message):
    with pytest.raises(AssistError, match=message):
        assist.grabcut_polygon(PLANT, box)


def test_grabcut_says_when_the_file_is_no_image(tmp_path):
    broken = tmp_path / "photo.jpg"
    broken.write_bytes(b"not a jpeg")
    with pytest.raises(AssistError, match="photo.jpg could not be read as an image"):
        assist.grabcut_polygon(broken, [0.5, 0.5, 0.5, 0.5])


# ---------------------------------------------------------------- model predictions


def test_detect_model_suggests_normalised_boxes_for_every_image(weights):
    results = assist.model_predict(
        weights("yolo11n.yaml"), VAL_IMAGES[:3], conf=LOW_CONF, imgsz=160
    )
    assert [r.image_path for r in results] == [str(p) for p in VAL_IMAGES[:3]]
    for result in results:
        assert 0 < len(result.predictions) <= assist.MAX_PREDICTIONS_PER_IMAGE
        confidences = [p.confidence for p in result.predictions]
        assert confidences == sorted(confidences, reverse=True)
        for p in result.predictions:
            assert p.kind == "box" and len(p.data) == 4
            assert all(0.0 <= v <= 1.0 for v in p.data)
            assert p.confidence >= LOW_CONF and 0 <= p.class_index < 80 and p.class_name
        assert result.uncertainty == pytest.approx(1 - sum(confidences) / len(confidences))


def test_nothing_above_the_threshold_is_no_suggestion(weights):
    (result,) = assist.model_predict(weights("yolo11n.yaml"), VAL_IMAGES[:1], conf=0.5, imgsz=160)
    assert result.predictions == [] and result.uncertainty == 0.0


def test_segment_model_suggests_polygons_of_at_most_60_points(weights):
    results = assist.model_predict(
        weights("yolo11n-seg.yaml"), VAL_IMAGES[:2], conf=LOW_CONF, imgsz=160
    )
    polygons = [p for r in results for p in r.predictions]
    assert polygons and all(p.kind == "polygon" for p in polygons)
    for p in polygons:
        assert len(p.data) % 2 == 0 and 3 <= len(p.data) // 2 <= assist.POLYGON_MAX_POINTS
        assert all(0.0 <= v <= 1.0 for v in p.data)


def test_pose_obb_and_classify_models_suggest_their_kinds(weights):
    pose_image = next((SHARED / "coco8-pose" / "images" / "val").glob("*.jpg"))
    (pose,) = assist.model_predict(
        weights("yolo11n-pose.yaml"), [pose_image], conf=LOW_CONF, imgsz=160
    )
    assert pose.predictions
    for p in pose.predictions:
        assert p.kind == "keypoints" and len(p.data) == 4 + 17 * 3
        coordinates = p.data[:4] + p.data[4::3] + p.data[5::3]
        assert set(p.data[6::3]) <= {0.0, 1.0, 2.0}
        assert all(0.0 <= v <= 1.0 for v in coordinates)

    dota_image = next((SHARED / "dota8" / "images" / "val").glob("*.jpg"))
    (obb,) = assist.model_predict(
        weights("yolo11n-obb.yaml"), [dota_image], conf=LOW_CONF, imgsz=160
    )
    assert obb.predictions
    assert all(p.kind == "obb" and len(p.data) == 8 for p in obb.predictions)

    fish = next((SHARED / "imagenet10" / "val" / "goldfish").iterdir())
    (tags,) = assist.model_predict(weights("yolo11n-cls.yaml"), [fish], conf=LOW_CONF, imgsz=64)
    top1, *others = tags.predictions
    assert all(p.kind == "tag" and p.data == [] for p in tags.predictions)
    assert len(others) == 4 and all(p.confidence <= top1.confidence for p in others)
    assert tags.uncertainty == pytest.approx(1 - top1.confidence)


def test_uncertainty_ranks_the_least_confident_images_first():
    conf = 0.25
    sure = assist.detection_uncertainty([0.95, 0.9], 0.2, conf)
    borderline = assist.detection_uncertainty([0.3, 0.27], 0.2, conf)
    almost_found = assist.detection_uncertainty([], 0.24, conf)
    nothing_there = assist.detection_uncertainty([], 0.01, conf)
    assert borderline > sure
    assert almost_found > nothing_there and almost_found > sure
    assert assist.detection_uncertainty([], conf, conf) == pytest.approx(
        assist.detection_uncertainty([conf], 0.0, conf)
    )
    assert all(0 <= u <= 1 for u in (sure, borderline, almost_found, nothing_there))


def test_a_replaced_weights_file_is_loaded_afresh(weights, tmp_path):
    path = tmp_path / "model.pt"
    weights("yolo11n.yaml", path)
    (first,) = assist.model_predict(path, VAL_IMAGES[:1], conf=LOW_CONF, imgsz=64)
    assert first.predictions[0].kind == "box"
    weights("yolo11n-cls.yaml", path)
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))
    (second,) = assist.model_predict(path, VAL_IMAGES[:1], conf=LOW_CONF, imgsz=64)
    assert second.predictions[0].kind == "tag"


def test_one_unreadable_image_fails_the_whole_call(weights, tmp_path):
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8 not really")
    with pytest.raises(AssistError, match="broken.jpg could not be read"):
        assist.model_predict(weights("yolo11n.yaml"), [VAL_IMAGES[0], broken], conf=LOW_CONF)


class _Payload:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _checkpoint_zip(path: Path, pickled: bytes) -> Path:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("archive/data.pkl", pickled)
        zf.writestr("archive/version", "3\n")
    path.write_bytes(buffer.getvalue())
    return path


def test_hostile_weights_are_refused_before_anything_loads_them(tmp_path):
    marker = tmp_path / "pwned"
    hostile = _checkpoint_zip(tmp_path / "model.pt", pickle.dumps(_Payload(marker), protocol=4))
    cached = dict(assist.predict._models)
    with pytest.raises(AssistError, match=r"refused: .*would call posix\.system"):
        assist.model_predict(hostile, VAL_IMAGES[:1])
    with pytest.raises(AssistError, match="refused"):
        assist.sam_polygon(hostile, PLANT, points=[[0.5, 0.5]])
    assert not marker.exists() and dict(assist.predict._models) == cached


def test_weights_that_are_missing_or_not_a_model_say_so(tmp_path):
    with pytest.raises(AssistError, match="weights file gone.pt is missing"):
        assist.model_predict(tmp_path / "gone.pt", VAL_IMAGES[:1])
    onnx = tmp_path / "model.onnx"
    onnx.write_bytes(b"onnx")
    with pytest.raises(AssistError, match="model.onnx is not a .pt weights file"):
        assist.model_predict(onnx, VAL_IMAGES[:1])
    empty = _checkpoint_zip(tmp_path / "empty.pt", pickle.dumps(None, protocol=4))
    with pytest.raises(AssistError, match="empty.pt could not be loaded as a YOLO model"):
        assist.model_predict(empty, VAL_IMAGES[:1])


def test_sam_without_usable_weights_is_a_readable_error(weights, tmp_path):
    # No SAM checkpoint exists on this machine and none can be downloaded: only the paths
    # that refuse are exercised here.
    with pytest.raises(AssistError, match="sam_b.pt is missing"):
        assist.sam_polygon(tmp_path / "sam_b.pt", PLANT, points=[[0.5, 0.5, 1]])
    with pytest.raises(AssistError, match="Click on the object"):
        assist.sam_polygon(tmp_path / "sam_b.pt", PLANT)
    with pytest.raises(AssistError, match="not named like a SAM checkpoint"):
        assist.sam_polygon(weights("yolo11n.yaml"), PLANT, box=[0.5, 0.5, 0.4, 0.7])


# ---------------------------------------------------------------- overlap


def test_shape_iou_of_boxes_is_exact():
    box = [0.3, 0.5, 0.2, 0.2]
    assert assist.shape_iou("box", box, "box", box) == 1.0
    assert assist.shape_iou("box", box, "box", [0.8, 0.5, 0.2, 0.2]) == 0.0
    shifted_by_half = [0.4, 0.5, 0.2, 0.2]  # overlap 0.1 x 0.2 of a union 0.06
    assert assist.shape_iou("box", box, "box", shifted_by_half) == pytest.approx(1 / 3)
    keypoints = [*shifted_by_half, 0.4, 0.5, 2]  # counts as its box
    assert assist.shape_iou("keypoints", keypoints, "box", box) == pytest.approx(1 / 3)


def test_shape_iou_of_polygons_and_mixtures():
    box = [0.5, 0.5, 0.4, 0.4]
    square = [0.3, 0.3, 0.7, 0.3, 0.7, 0.7, 0.3, 0.7]
    assert assist.shape_iou("polygon", square, "box", box) == pytest.approx(1.0, abs=0.02)
    half = [0.3, 0.3, 0.7, 0.3, 0.7, 0.7]  # a triangle: half the box
    assert assist.shape_iou("polygon", half, "box", box) == pytest.approx(0.5, abs=0.02)
    diamond = [0.5, 0.3, 0.7, 0.5, 0.5, 0.7, 0.3, 0.5]  # an oriented box inside the square
    assert assist.shape_iou("obb", diamond, "polygon", square) == pytest.approx(0.5, abs=0.02)
    small = [0.01, 0.01, 0.02, 0.01, 0.02, 0.02, 0.01, 0.02]  # measured as finely as a big one
    assert assist.shape_iou("polygon", small, "box", [0.0175, 0.015, 0.005, 0.01]) == (
        pytest.approx(0.5, abs=0.02)
    )
    assert assist.shape_iou("polygon", square, "polygon", [0.8, 0.8, 0.9, 0.8, 0.9, 0.9]) == 0.0
    assert assist.shape_iou("tag", [], "tag", []) == 1.0
    assert assist.shape_iou("tag", [], "box", box) == 0.0


def test_suggestions_filter_hides_what_is_already_labelled():
    labels = [("box", 7, [0.5, 0.5, 0.4, 0.4]), ("tag", 3, [])]
    suggestions = [
        ("box", 7, [0.51, 0.5, 0.4, 0.38]),  # the same object, same class: hidden
        ("box", 8, [0.51, 0.5, 0.4, 0.38]),  # another class: shown
        ("box", 7, [0.6, 0.5, 0.4, 0.4]),  # the same class, IoU 0.6: shown
        ("polygon", 7, [0.3, 0.3, 0.7, 0.3, 0.7, 0.7, 0.3, 0.7]),  # traced the same box: hidden
        Prediction("box", 0, [0.1, 0.1, 0.1, 0.1], 0.9),  # class index 0 is no label's class
        ("tag", 3, []),  # the image already has this class
        ("tag", 4, []),
    ]
    assert assist.suggestions_filter(suggestions, labels) == [
        False,
        True,
        True,
        False,
        True,
        False,
        True,
    ]
    mapped = Prediction("box", 0, [0.5, 0.5, 0.4, 0.4], 0.9)
    mapped.class_id = 7  # mapped to the dataset's class: now it duplicates the label
    assert assist.suggestions_filter([mapped], labels, threshold=0.7) == [False]


def test_suggestions_filter_is_quick_for_a_crowded_image():
    rng = np.random.default_rng(0)

    def polygon(cx, cy, r):
        angles = np.sort(rng.uniform(0, 2 * np.pi, 12))
        points = np.stack([cx + r * np.cos(angles), cy + r * np.sin(angles)], axis=1)
        return np.clip(points, 0, 1).reshape(-1).tolist()

    centres = rng.uniform(0.05, 0.95, (500, 2))
    labels = [("polygon", i % 3, polygon(x, y, 0.03)) for i, (x, y) in enumerate(centres)]
    # Half trace a label closely (IoU ~0.9); half are the same shapes of another class.
    suggestions = [
        ("polygon", i % 3 + 3 * (i % 2), [v + 0.002 for v in data])
        for i, (_, _, data) in enumerate(labels[:100])
    ]
    keep = assist.suggestions_filter(suggestions, labels)
    assert keep == [i % 2 == 1 for i in range(100)]


def test_sam_runs_offline_on_a_checkpoint_ultralytics_can_build(tmp_path):
    """No real SAM weights exist here: an untrained MobileSAM, built by Ultralytics' own
    builder and saved as its state dict (as real checkpoints are), passes the weights check,
    loads offline and takes clicks and a box together. Untrained, it finds no object."""
    assist._ultralytics_env()
    import torch
    from ultralytics.models.sam.build import build_mobile_sam

    torch.manual_seed(0)
    weights = tmp_path / "mobile_sam.pt"
    torch.save(build_mobile_sam().state_dict(), weights)
    with pytest.raises(AssistError, match="found no object there"):
        assist.sam_polygon(
            weights, PLANT, points=[[0.5, 0.4, 1], [0.05, 0.05, 0]], box=[0.52, 0.45, 0.4, 0.76]
        )
