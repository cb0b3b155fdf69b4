"""Label Studio's JSON and JSON-MIN exports, built in Label Studio's own structure (and real ones
from its SDK's test data, tests/datasets/fixtures/labelstudio/), imported end to end."""

import io
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage

from datasets.models import Dataset, Image, ImportStatus, Label
from datasets.services.masks import label_studio_rle_encode
from datasets.services.tool_formats.labelstudio import claim_label_studio
from tests.datasets.archives import jpeg_bytes, zip_of
from tests.datasets.test_ingest import _import

FIXTURES = Path(__file__).parent / "fixtures" / "labelstudio"
_colors = itertools.count(1)


def _jpeg(width=64, height=48) -> bytes:
    n = next(_colors)
    return jpeg_bytes(width, height, color=((n * 53) % 256, (n * 29) % 256, (n * 71) % 256))


def _png(width, height) -> bytes:
    out = io.BytesIO()
    n = next(_colors)
    PILImage.new("RGB", (width, height), ((n * 41) % 256, 90, 140)).save(out, format="PNG")
    return out.getvalue()


def _result(kind, value, rid, w=64, h=48, **extra) -> dict:
    """One result as Label Studio writes it."""
    out = {"id": rid, "type": kind, "value": value, "from_name": "label", "to_name": "image"}
    out.update({"original_width": w, "original_height": h, "image_rotation": 0, **extra})
    return out


def _rect(label, x, y, w, h, rotation=0, rid="r1", **extra) -> dict:
    value = {"x": x, "y": y, "width": w, "height": h, "rotation": rotation}
    return _result("rectanglelabels", {**value, "rectanglelabels": [label]}, rid, **extra)


def _task(tid, image, results, **extra) -> dict:
    annotation = {"id": tid * 10, "result": results, "was_cancelled": False, "ground_truth": False}
    task = {"id": tid, "data": {"image": image}, "annotations": [annotation]}
    task.update({"predictions": [], "drafts": [], **extra})
    return task


def _labels(dataset, filename) -> list[Label]:
    return list(
        Label.objects.filter(image__dataset=dataset, image__filename=filename)
        .select_related("dataset_class")
        .order_by("id")
    )


def _skipped(imp) -> dict[str, str]:
    return {s["file"]: s["reason"] for s in imp.report["skipped"]}


def _rotated_corners(x, y, w, h, degrees, iw, ih) -> list[float]:
    """utils.py::convert_annotation_to_yolo_obb of the Label Studio SDK, normalised."""
    px, py, pw, ph = x / 100 * iw, y / 100 * ih, w / 100 * iw, h / 100 * ih
    cos, sin = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    pts = [
        (px, py),
        (px + pw * cos, py + pw * sin),
        (px + pw * cos - ph * sin, py + pw * sin + ph * cos),
        (px - ph * sin, py + ph * cos),
    ]
    return [v for cx, cy in pts for v in (cx / iw, cy / ih)]


def _box_around(xy: list[float]) -> list[float]:
    xs, ys = xy[0::2], xy[1::2]
    return [(min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2, max(xs) - min(xs), max(ys) - min(ys)]


def _mask_rle(x1, y1, x2, y2, w=64, h=48) -> list[int]:
    mask = np.zeros((h, w), dtype=bool)
    mask[y1:y2, x1:x2] = True
    return label_studio_rle_encode(mask)


# --- JSON: every result type, image paths, what is left out ---------------------------------------


def _detect_export() -> list[dict]:
    chosen = [
        _rect("cat", 25, 50, 50, 25, rid="plain"),
        _rect("cat", 40, 20, 30, 20, rotation=30, rid="turned"),
        _result(
            "polygonlabels",
            {"points": [[10, 10], [60, 20], [30, 80]], "closed": True, "polygonlabels": ["dog"]},
            "poly",
        ),
        _result("keypointlabels", {"x": 50, "y": 50, "width": 1, "keypointlabels": ["nose"]}, "kp"),
        _result("choices", {"choices": ["indoor"]}, "cls"),
        _result("textarea", {"text": ["a cat"]}, "txt"),
        {"type": "relation", "from_id": "plain", "to_id": "poly", "direction": "right"},
        _result("number", {"number": 3}, "count"),
    ]
    first = _task(1, "/data/upload/1/3f2a9b1c-a.jpg", chosen)
    first["annotations"] = [
        {"id": 9, "result": [_rect("cat", 0, 0, 100, 100, rid="gone")], "was_cancelled": True},
        first["annotations"][0],
        {"id": 11, "result": [_rect("dog", 0, 0, 10, 10, rid="other")], "was_cancelled": False},
    ]
    first["predictions"] = [
        {"model_version": "v1", "result": [_rect("cat", 1, 1, 5, 5, rid="p1")]},
        {"model_version": "v2", "result": [_rect("cat", 2, 2, 5, 5, rid="p2")]},
    ]
    first["drafts"] = [{"result": [_rect("dog", 3, 3, 5, 5, rid="d1")]}]
    brush = {"format": "rle", "rle": _mask_rle(8, 12, 24, 36), "brushlabels": ["dog"]}
    return [
        first,
        _task(2, "/data/local-files/?d=photos/train/b.jpg", [_result("brushlabels", brush, "m")]),
        _task(
            3, "https://example.com/bucket/c.jpg?X-Amz-Signature=1", [_rect("dog", 0, 0, 50, 50)]
        ),
        _task(4, "s3://bucket/folder/missing.jpg", [_rect("dog", 0, 0, 50, 50)]),
        _task(5, "/data/upload/1/abcdef12-dup.jpg", [_rect("dog", 0, 0, 50, 50)]),
    ]


@pytest.mark.django_db
def test_json_export_into_a_detect_dataset(team, tmp_path):
    files = {
        "project-1-at-2024/result.json": json.dumps(_detect_export()).encode(),
        "images/a.jpg": _jpeg(),
        "export/photos/train/b.jpg": _jpeg(),
        "export/photos/val/b.jpg": _jpeg(),  # same name: the ?d= path's folders tell them apart
        "val/c.jpg": _jpeg(),
        "x/dup.jpg": _jpeg(),
        "y/dup.jpg": _jpeg(),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "ls.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    report = imp.report
    assert report["format"] == "label-studio"
    assert [c.name for c in dataset.classes.order_by("index")] == ["cat", "dog"]

    plain, turned, poly = _labels(dataset, "a.jpg")
    assert (plain.kind, plain.dataset_class.name) == ("box", "cat")
    assert plain.data == pytest.approx([0.5, 0.625, 0.5, 0.25])
    corners = _rotated_corners(40, 20, 30, 20, 30, 64, 48)
    assert turned.kind == "box"
    assert turned.data == pytest.approx(_box_around(corners))
    assert (poly.kind, poly.dataset_class.name) == ("box", "dog")
    assert poly.data == pytest.approx([0.35, 0.45, 0.5, 0.7])

    # the brush mask: the box around its pixels 8..24 × 12..36
    splits = {i.filename + i.split: i.label_count for i in Image.objects.filter(dataset=dataset)}
    assert splits["b.jpgtrain"] == 1 and splits["b.jpgval"] == 0
    (mask,) = Label.objects.filter(
        image__dataset=dataset, image__split="train", image__filename="b.jpg"
    )
    assert mask.kind == "box" and mask.data == pytest.approx([0.25, 0.5, 0.25, 0.5])
    (url_box,) = _labels(dataset, "c.jpg")
    assert url_box.data == pytest.approx([0.25, 0.25, 0.5, 0.5])
    assert splits["c.jpgval"] == 1

    skipped = _skipped(imp)
    where = "project-1-at-2024/result.json task"
    assert "keypoints are imported into a pose dataset" in skipped[f"{where} 1 result kp"]
    assert "imported into a classify dataset" in skipped[f"{where} 1 result cls"]
    assert "textarea" in skipped[f"{where} 1 result txt"]
    assert "relations between regions" in skipped[f"{where} 1 result 7"]
    assert "number results are not imported" in skipped[f"{where} 1 result count"]
    assert skipped[f"{where} 4"] == "its image s3://bucket/folder/missing.jpg is not in the upload"
    assert "matches 2 uploaded files (x/dup.jpg, y/dup.jpg)" in skipped[f"{where} 5"]
    kinds = {s["file"]: s["kind"] for s in report["skipped"]}
    assert kinds[f"{where} 4"] == kinds[f"{where} 5"] == "no_image"

    notes = "\n".join(report["notes"])
    assert "5 Label Studio tasks read from project-1-at-2024/result.json" in notes
    assert "2 predictions and 1 drafts left out" in notes
    assert "1 tasks had several annotations: the first not cancelled" in notes
    assert "1 cancelled (skipped) annotations left out" in notes
    assert "1 rotated rectangles imported as the box around each" in notes
    assert "1 upload paths (/data/upload/) by file name without Label Studio's 8-character" in notes
    assert "1 local-files paths (?d=) by the end of their path" in notes
    assert "1 URLs by file name" in notes
    assert "1 brush masks decoded and imported as the box around each" in notes


@pytest.mark.django_db
def test_json_export_into_an_obb_dataset_keeps_the_rotation(team, tmp_path):
    export = [
        _task(
            1,
            "/data/upload/4/0badcafe-a.jpg",
            [
                _rect("ship", 25, 25, 50, 25, rid="plain"),
                _rect("ship", 40, 20, 30, 20, rotation=30, rid="turned"),
                _result(
                    "polygonlabels",
                    {"points": [[10, 10], [40, 10], [40, 50], [10, 50]], "polygonlabels": ["dock"]},
                    "poly",
                ),
            ],
        ),
    ]
    files = {"result.json": json.dumps(export).encode(), "a.jpg": _jpeg()}
    dataset, imp = _import(team, zip_of(files, tmp_path / "obb.zip"), task="obb")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    plain, turned, poly = _labels(dataset, "a.jpg")
    assert plain.kind == turned.kind == poly.kind == "obb"
    assert plain.data == pytest.approx([0.25, 0.25, 0.75, 0.25, 0.75, 0.5, 0.25, 0.5])
    assert turned.data == pytest.approx(_rotated_corners(40, 20, 30, 20, 30, 64, 48))
    # an axis-aligned polygon's smallest rotated box is itself, its corners in some order
    got = sorted(zip(poly.data[0::2], poly.data[1::2], strict=True))
    flat = [v for xy in got for v in xy]
    assert flat == pytest.approx([0.1, 0.1, 0.1, 0.5, 0.4, 0.1, 0.4, 0.5], abs=1e-4)
    assert any("1 polygons imported as the smallest rotated box" in n for n in imp.report["notes"])


@pytest.mark.django_db
def test_json_export_into_a_segment_dataset(team, tmp_path):
    brush = {"format": "rle", "rle": _mask_rle(8, 12, 24, 36), "brushlabels": ["blob"]}
    export = [
        _task(
            1,
            "/data/upload/1/11111111-a.jpg",
            [
                _result(
                    "polygonlabels",
                    {"points": [[10, 10], [60, 20], [30, 80]], "polygonlabels": ["leaf"]},
                    "poly",
                ),
                _rect("leaf", 25, 50, 50, 25, rid="plain"),
                _rect("leaf", 40, 20, 30, 20, rotation=30, rid="turned"),
                _result("brushlabels", brush, "mask"),
            ],
        ),
    ]
    files = {"result.json": json.dumps(export).encode(), "a.jpg": _jpeg()}
    dataset, imp = _import(team, zip_of(files, tmp_path / "seg.zip"), task="segment")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    poly, plain, turned, mask = _labels(dataset, "a.jpg")
    assert poly.kind == "polygon" and poly.data == pytest.approx([0.1, 0.1, 0.6, 0.2, 0.3, 0.8])
    assert plain.kind == "box" and plain.data == pytest.approx([0.5, 0.625, 0.5, 0.25])
    assert turned.kind == "polygon"
    assert turned.data == pytest.approx(_rotated_corners(40, 20, 30, 20, 30, 64, 48))
    assert mask.kind == "polygon" and mask.dataset_class.name == "blob"
    # the traced outline of the 16 × 24 pixel rectangle at (8, 12)
    # (contours run through the outer pixels' centres: 8..23 × 12..35)
    assert _box_around(mask.data) == pytest.approx([15.5 / 64, 23.5 / 48, 15 / 64, 23 / 48])
    notes = "\n".join(imp.report["notes"])
    assert "1 brush masks decoded and imported as 1 polygons (one per region)" in notes
    assert "1 rotated rectangles imported as polygons of their 4 corners" in notes


@pytest.mark.django_db
def test_json_export_into_a_pose_dataset_groups_keypoints_in_rectangles(team, tmp_path):
    def point(name, x, y, rid, **extra):
        value = {"x": x, "y": y, "width": 0.5, "keypointlabels": [name]}
        return _result("keypointlabels", value, rid, from_name="kp", **extra)

    export = [
        _task(
            1,
            "/data/upload/2/22222222-a.jpg",
            [
                _rect("person", 10, 10, 40, 80, rid="p1"),
                _rect("person", 60, 10, 30, 30, rid="p2"),
                point("nose", 20, 30, "k1", parentID="p1"),
                point("left_eye", 30, 40, "k2"),  # no parentID: inside p1
                point("nose", 70, 20, "k3"),  # inside p2
                point("tail", 95, 95, "k4"),  # in no rectangle
                point("nose", 25, 35, "k5", parentID="p1"),  # p1 has a nose already
            ],
        ),
    ]
    files = {"result.json": json.dumps(export).encode(), "a.jpg": _jpeg()}
    dataset, imp = _import(team, zip_of(files, tmp_path / "pose.zip"), task="pose")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert Dataset.objects.get(pk=dataset.pk).keypoint_shape == [2, 3]
    first, second = _labels(dataset, "a.jpg")
    assert first.kind == "keypoints" and first.dataset_class.name == "person"
    assert first.data == pytest.approx([0.3, 0.5, 0.4, 0.8, 0.2, 0.3, 2, 0.3, 0.4, 2])
    assert second.data == pytest.approx([0.75, 0.25, 0.3, 0.3, 0.7, 0.2, 2, 0, 0, 0])
    skipped = _skipped(imp)
    assert skipped["result.json task 1 result k4"] == "keypoint 'tail' lies in no rectangle"
    assert "a second 'nose'" in skipped["result.json task 1 result k5"]
    notes = "\n".join(imp.report["notes"])
    assert "keypoint order (by first appearance of each keypoint label): nose, left_eye" in notes


@pytest.mark.django_db
def test_json_export_into_a_classify_dataset(team, tmp_path):
    def choice(*names):
        return _result("choices", {"choices": list(names)}, "c", from_name="class")

    export = [
        _task(1, "/data/upload/1/aaaaaaaa-a.jpg", [choice("cat")]),
        _task(2, "/data/upload/1/bbbbbbbb-b.jpg", [choice("dog"), _rect("dog", 0, 0, 9, 9)]),
        _task(3, "/data/upload/1/cccccccc-c.jpg", [choice("cat", "dog")]),
    ]
    files = {
        "result.json": json.dumps(export).encode(),
        "a.jpg": _jpeg(),
        "b.jpg": _jpeg(),
        "c.jpg": _jpeg(),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "cls.zip"), task="classify")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert [(lb.kind, lb.dataset_class.name) for lb in _labels(dataset, "a.jpg")] == [
        ("tag", "cat")
    ]
    assert [(lb.kind, lb.dataset_class.name) for lb in _labels(dataset, "b.jpg")] == [
        ("tag", "dog")
    ]
    assert _labels(dataset, "c.jpg") == []
    skipped = _skipped(imp)
    assert "classify dataset takes image classes" in skipped["result.json task 2 result r1"]
    assert "several image classes (cat, dog)" in skipped["result.json task 3 result c"]


@pytest.mark.django_db
def test_a_rectangle_tag_beside_a_labels_tag(team, tmp_path):
    """<Rectangle> and <Labels> tags: two results of one id, the "labels" one with the shape."""
    box = {"x": 10, "y": 20, "width": 30, "height": 40, "rotation": 0}
    export = [
        _task(
            1,
            "/data/upload/1/12345678-a.jpg",
            [
                _result("rectangle", box, "A"),
                _result("labels", {**box, "labels": ["car"]}, "A"),
                _result("rectangle", box, "B"),
                _result("labels", {"start": 0, "end": 4, "labels": ["PER"]}, "C"),
            ],
        ),
    ]
    files = {"result.json": json.dumps(export).encode(), "a.jpg": _jpeg()}
    dataset, imp = _import(team, zip_of(files, tmp_path / "tags.zip"))
    (label,) = _labels(dataset, "a.jpg")
    assert label.dataset_class.name == "car"
    assert label.data == pytest.approx([0.25, 0.4, 0.3, 0.4])
    skipped = _skipped(imp)
    assert skipped["result.json task 1 result B"] == "a rectangle without a label"
    assert "text spans (labels) are not imported" in skipped["result.json task 1 result C"]
    assert len(skipped) == 2


@pytest.mark.django_db
def test_brush_mask_is_decoded_from_label_studio_rle(team, tmp_path):
    mask = np.zeros((48, 64), dtype=bool)
    mask[4:20, 40:60] = True  # one region at x 40..60, y 4..20
    brush = {"format": "rle", "rle": label_studio_rle_encode(mask), "brushlabels": ["spot"]}
    broken = {"format": "rle", "rle": label_studio_rle_encode(mask)[:-20], "brushlabels": ["spot"]}
    export = [
        _task(
            1,
            "/data/upload/1/12345678-a.jpg",
            [_result("brushlabels", brush, "ok"), _result("brushlabels", broken, "cut")],
        ),
    ]
    files = {"result.json": json.dumps(export).encode(), "a.jpg": _jpeg()}
    dataset, imp = _import(team, zip_of(files, tmp_path / "brush.zip"))
    (box,) = _labels(dataset, "a.jpg")
    assert box.data == pytest.approx([50 / 64, 12 / 48, 20 / 64, 16 / 48])
    assert "brush RLE" in _skipped(imp)["result.json task 1 result cut"]


# --- JSON-MIN -------------------------------------------------------------------------------------


def _min_export() -> list[dict]:
    """As converter.py::convert_to_json_min writes records: the task's data, its id, one key per
    control tag (named by the labelling config), then the annotation's own keys."""
    meta = {
        "created_at": "2024-05-07T12:22:30Z",
        "updated_at": "2024-05-07T12:22:31Z",
        "lead_time": 4.2,
    }
    size = {"original_width": 64, "original_height": 48}
    return [
        {
            "img": "/data/upload/3/1a2b3c4d-cat.jpg",
            "id": 7,
            "bbox": [
                {
                    "x": 25,
                    "y": 50,
                    "width": 50,
                    "height": 25,
                    "rotation": 0,
                    "rectanglelabels": ["cat"],
                    **size,
                },
                {
                    "x": 40,
                    "y": 20,
                    "width": 30,
                    "height": 20,
                    "rotation": 30,
                    "rectanglelabels": ["cat"],
                    **size,
                },
            ],
            "outline": [
                {
                    "points": [[10, 10], [60, 20], [30, 80]],
                    "closed": True,
                    "polygonlabels": ["dog"],
                    **size,
                }
            ],
            "mood": [
                {
                    "x": 0,
                    "y": 0,
                    "radiusX": 5,
                    "radiusY": 5,
                    "rotation": 0,
                    "ellipselabels": ["calm"],
                    **size,
                }
            ],
            "scene": "indoor",
            "annotator": 1,
            "annotation_id": 30,
            **meta,
        },
        {
            "img": "/data/upload/3/1a2b3c4d-cat.jpg",
            "id": 7,
            "bbox": [],
            "annotator": 2,
            "annotation_id": 29,
            **meta,
        },
        {
            "img": "/data/upload/3/99999999-dog.jpg",
            "id": 8,
            "scene": "outdoor",
            "annotator": 1,
            "annotation_id": 31,
            **meta,
        },
    ]


@pytest.mark.django_db
def test_json_min_export_into_a_detect_dataset(team, tmp_path):
    files = {
        "result.json": json.dumps(_min_export(), indent=2).encode(),
        "cat.jpg": _jpeg(),
        "dog.jpg": _jpeg(),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "min.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    report = imp.report
    assert report["format"] == "label-studio-min"
    plain, turned, poly = _labels(dataset, "cat.jpg")
    assert plain.data == pytest.approx([0.5, 0.625, 0.5, 0.25])
    assert turned.data == pytest.approx(_box_around(_rotated_corners(40, 20, 30, 20, 30, 64, 48)))
    assert poly.dataset_class.name == "dog" and poly.data == pytest.approx([0.35, 0.45, 0.5, 0.7])
    assert _labels(dataset, "dog.jpg") == []
    assert "ellipses are not imported" in _skipped(imp)["result.json task 7 mood"]
    notes = "\n".join(report["notes"])
    assert "2 Label Studio JSON-MIN records read from result.json" in notes
    assert "1 tasks had several annotations: the first record of each" in notes
    assert "text fields scene not read" in notes


@pytest.mark.django_db
def test_json_min_single_choice_is_the_image_class(team, tmp_path):
    files = {
        "result.json": json.dumps(_min_export()).encode(),
        "cat.jpg": _jpeg(),
        "dog.jpg": _jpeg(),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "min.zip"), task="classify")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert [lb.dataset_class.name for lb in _labels(dataset, "cat.jpg")] == ["indoor"]
    assert [lb.dataset_class.name for lb in _labels(dataset, "dog.jpg")] == ["outdoor"]
    assert any("image classes read from its text field 'scene'" in n for n in imp.report["notes"])


@pytest.mark.django_db
def test_json_min_keypoints_without_a_rectangle_are_one_object(team, tmp_path):
    size = {"original_width": 64, "original_height": 48}
    records = [
        {
            "img": "/data/local-files/?d=mice/run1/img90.png",
            "id": 101,
            "kp-1": [
                {"x": 20, "y": 30, "width": 1, "keypointlabels": ["nose"], **size},
                {"x": 60, "y": 70, "width": 1, "keypointlabels": ["tail"], **size},
            ],
            "annotator": 1,
            "annotation_id": 101,
            "created_at": "x",
            "updated_at": "y",
            "lead_time": None,
        }
    ]
    files = {
        "a.json": json.dumps(records).encode(),
        "data/mice/run1/img90.png": _png(64, 48),
        "data/mice/run2/img90.png": _png(64, 48),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "kp.zip"), task="pose")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    (label,) = Label.objects.filter(image__dataset=dataset, image__label_count=1)
    assert label.dataset_class.name == "kp-1"
    assert label.data == pytest.approx([0.4, 0.5, 0.4, 0.4, 0.2, 0.3, 2, 0.6, 0.7, 2])
    notes = "\n".join(imp.report["notes"])
    assert "1 local-files paths (?d=) by the end of their path" in notes
    assert "boxed around their keypoints" in notes


# --- almost Label Studio, and other tools' files --------------------------------------------------


@pytest.mark.django_db
def test_unknown_results_and_missing_sizes_are_reported(team, tmp_path):
    def unsized(rid, kind, **value):
        return {"id": rid, "type": kind, "value": value, "from_name": "x", "to_name": "image"}

    box = {"x": 10, "y": 10, "width": 20, "height": 20}
    export = [
        _task(
            1,
            "/data/upload/1/abcdef01-a.jpg",
            [
                unsized("v", "videorectangle", sequence=[]),
                unsized("t", "hypertextlabels", start="/p[1]"),
                unsized("n", "rectanglelabels", **box, rectanglelabels=["car"]),
                unsized("r", "rectanglelabels", **box, rotation=15, rectanglelabels=["car"]),
                unsized("m", "brushlabels", format="rle", rle=[0, 1], brushlabels=["car"]),
            ],
        ),
        _task(
            2,
            "/data/upload/1/abcdef02-b.jpg",
            [
                _rect("car", 50, 50, 10, 10, rid="ok"),
                _rect("car", 10, 10, 20, 20, rid="big", original_width=640, original_height=480),
            ],
        ),
        {"id": 3, "data": {"text": "a sentence"}, "annotations": []},
    ]
    files = {"result.json": json.dumps(export).encode(), "a.jpg": _jpeg(), "b.jpg": _jpeg()}
    dataset, imp = _import(team, zip_of(files, tmp_path / "odd.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    # percent needs no size; one drawn on another size than the task's others is refused
    (no_size,) = _labels(dataset, "a.jpg")
    assert no_size.data == pytest.approx([0.2, 0.2, 0.2, 0.2])
    (sized,) = _labels(dataset, "b.jpg")
    assert sized.data == pytest.approx([0.55, 0.55, 0.1, 0.1])
    skipped = _skipped(imp)
    where = "result.json task 1 result"
    assert skipped[f"{where} v"] == "videorectangle results are not imported: Kestrel labels images"
    assert "hypertextlabels results are not imported" in skipped[f"{where} t"]
    assert "rotated rectangle without original_width/original_height" in skipped[f"{where} r"]
    assert "brush mask without original_width/original_height" in skipped[f"{where} m"]
    assert "drawn on a 640×480 image" in skipped["result.json task 2 result big"]
    assert skipped["result.json task 3"] == "no image path in its data (keys: text)"
    assert any(
        "1 tasks have results without original_width/original_height" in n
        for n in imp.report["notes"]
    )


@pytest.mark.django_db
def test_a_task_list_with_only_other_tools_data_is_reported(team, tmp_path):
    export = [
        {
            "id": 1,
            "data": {"image": "/data/upload/1/abcdef01-a.jpg"},
            "annotations": [{"result": [{"type": "taxonomy", "value": {"taxonomy": [["A"]]}}]}],
        }
    ]
    files = {"result.json": json.dumps(export).encode(), "a.jpg": _jpeg()}
    _, imp = _import(team, zip_of(files, tmp_path / "tax.zip"))
    assert imp.report["format"] == "label-studio"
    assert imp.report["labels_imported"] == 0
    skipped = _skipped(imp)
    assert "taxonomy results are not imported" in skipped["result.json task 1 result 1"]
    assert imp.report["warning"]  # nothing imported of what was found


def test_claim_leaves_other_formats_alone():
    files = {
        "coco.json": {"images": [], "annotations": [{"id": 1, "image_id": 1}], "categories": []},
        "labelme.json": {"version": "5", "shapes": [], "imagePath": "a.jpg"},
        "createml.json": [
            {
                "image": "a.jpg",
                "annotations": [
                    {"label": "cat", "coordinates": {"x": 1, "y": 2, "width": 3, "height": 4}}
                ],
            }
        ],
        "notes.json": {
            "categories": [{"id": 0, "name": "cat"}],
            "info": {"year": 2024, "version": "1.0", "contributor": "Label Studio"},
        },
        "tasks.json": [{"data": {"image": "/data/upload/1/abcdef01-a.jpg"}}],  # not annotated
        "via.json": {"a.jpg123": {"filename": "a.jpg", "regions": [], "size": 123}},
        "empty.json": [],
    }
    data = {k: json.dumps(v).encode() for k, v in files.items()}
    assert claim_label_studio(list(data), lambda n, limit: data[n]) == []
    data["export.json"] = json.dumps(_detect_export()).encode()
    data["min.json"] = json.dumps(_min_export()).encode()
    assert claim_label_studio(list(data), lambda n, limit: data[n]) == ["export.json", "min.json"]


@pytest.mark.django_db
def test_label_studio_yolo_export_goes_to_the_yolo_parser(team, tmp_path):
    notes = {
        "categories": [{"id": 0, "name": "cat"}],
        "info": {"year": 2024, "version": "1.0", "contributor": "Label Studio"},
    }
    files = {
        "classes.txt": b"cat\n",
        "notes.json": json.dumps(notes).encode(),
        "images/3f2a9b1c-a.jpg": _jpeg(),
        "labels/3f2a9b1c-a.txt": b"0 0.5 0.5 0.25 0.25\n",
    }
    _, imp = _import(team, zip_of(files, tmp_path / "ls-yolo.zip"))
    assert imp.report["format"] == "yolo"
    assert imp.report["labels_imported"] == 1


# --- real exports (Label Studio SDK's test data) --------------------------------------------------


def _fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


@pytest.mark.django_db
def test_real_export_of_rotated_rectangles(team, tmp_path):
    files = {
        "export/result.json": _fixture("obb.json"),
        "export/images/image1.jpg": _jpeg(597, 768),
        "export/images/image2.jpg": _jpeg(433, 768),
        "export/images/image3.jpg": _jpeg(716, 768),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "obb.zip"), task="obb")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["labels_imported"] == 25
    assert [c.name for c in dataset.classes.order_by("index")] == ["Butterfly", "butterfly"]
    first = _labels(dataset, "image1.jpg")[0]
    expected = _rotated_corners(
        10.537066764905694,
        79.55767690059092,
        19.045470024656687,
        8.132522043893882,
        328.33240366032834,
        597,
        768,
    )
    assert first.kind == "obb" and first.data == pytest.approx(expected)
    assert any("paths without a suffix" in n for n in imp.report["notes"])


@pytest.mark.django_db
def test_real_export_of_keypoints_in_a_rectangle(team, tmp_path):
    files = {"result.json": _fixture("keypoints.json"), "image1.jpg": _jpeg(216, 174)}
    dataset, imp = _import(team, zip_of(files, tmp_path / "kp.zip"), task="pose")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    (label,) = _labels(dataset, "image1.jpg")
    assert label.dataset_class.name == "person"
    box = [
        0.38849487785658 + 0.47304964539007095 / 2,
        0.0765957446808511 + 0.5092198581560283 / 2,
        0.47304964539007095,
        0.5092198581560283,
    ]
    nose = [0.6444444444444444, 0.39290780141843975, 2]
    assert label.data[:7] == pytest.approx(box + nose)
    assert Dataset.objects.get(pk=dataset.pk).keypoint_shape == [3, 3]
    # the relations linking keypoints to their rectangle are used; the rectangle's to itself not
    reasons = [s["reason"] for s in imp.report["skipped"]]
    assert reasons == ["relations between regions are not imported"]


@pytest.mark.django_db
def test_real_exports_of_polygons(team, tmp_path):
    files = {
        "a/result.json": _fixture("polygons.json"),
        "b/result.json": _fixture("polygon_example.json"),
        "000000000025.jpg": _jpeg(640, 426),
        "example.png": _png(128, 128),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "poly.zip"), task="segment")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["labels_imported"] == 2
    (example,) = _labels(dataset, "example.png")
    assert example.kind == "polygon" and example.dataset_class.name == "Airplane"
    assert example.data == pytest.approx(
        [
            0.4444444444444444,
            0.4825396825396825,
            0.4253968253968254,
            0.6031746031746032,
            0.5619047619047619,
            0.5079365079365079,
        ]
    )
    assert len(_labels(dataset, "000000000025.jpg")) == 1
    assert any(
        "tasks by their file_upload name without Label Studio's 8-character prefix" in n
        for n in imp.report["notes"]
    )


@pytest.mark.django_db
def test_real_export_with_urls_and_predictions(team, tmp_path):
    files = {
        "result.json": _fixture("urls_predictions.json"),
        "0030019819f25b28.jpg": _jpeg(768, 576),
        "00155094b7acc33b.jpg": _jpeg(768, 510),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "urls.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    (car,) = _labels(dataset, "0030019819f25b28.jpg")
    assert car.data == pytest.approx(
        [
            (4.857412088705009 + 92.51 / 2) / 100,
            (11.690682128240109 + 71.76 / 2) / 100,
            0.9251,
            0.7176,
        ]
    )
    # a box 1.6% past the bottom edge is cut at it
    cut, _ = _labels(dataset, "00155094b7acc33b.jpg")
    assert cut.data == pytest.approx(
        [(92.93 + 100) / 200, (57.39 + 100) / 200, (100 - 92.93) / 100, (100 - 57.39) / 100]
    )
    notes = "\n".join(imp.report["notes"])
    assert "2 predictions and 0 drafts left out" in notes
    assert "2 URLs by file name" in notes
    assert "1 regions reaching past the image's edge cut at the edge" in notes


def test_the_claim_does_not_read_a_json_file_per_image():
    """An upload of LabelMe files (one JSON beside each image) is not read once more to ask
    whether it is Label Studio's."""
    from datasets.services.tool_formats.labelstudio import claim_label_studio

    names = [f"ann/{i}.json" for i in range(500)] + [f"ann/{i}.jpg" for i in range(500)]
    reads = []

    def read(name, limit):
        reads.append(name)
        return json.dumps({"version": "5", "shapes": [], "imagePath": name}).encode()

    assert claim_label_studio(names, read) == []
    assert reads == []
