"""Datumaro, Supervisely, VIA and CreateML exports, each built small in its tool's own shape:
read by format detection (what each format claims, and what it must leave to COCO, LabelMe and
Label Studio), then a few imported end to end, where labels in pixels meet the image's size."""

import base64
import io
import itertools
import json
import math
import zlib

import numpy as np
import pytest
from PIL import Image as PILImage

from datasets.models import Image, ImportStatus, Label
from datasets.services.format_detect import detect_and_parse
from datasets.services.formats import LabelFileError
from datasets.services.tool_formats.createml import claim_createml
from datasets.services.tool_formats.datumaro import claim_datumaro
from datasets.services.tool_formats.supervisely import claim_supervisely
from datasets.services.tool_formats.via import claim_via
from tests.datasets.archives import jpeg_bytes, zip_of
from tests.datasets.test_ingest import _import

_colors = itertools.count(1)


def _jpeg(width=64, height=48) -> bytes:
    n = next(_colors)
    return jpeg_bytes(width, height, color=((n * 37) % 256, (n * 91) % 256, (n * 13) % 256))


def _reader(files: dict[str, bytes]):
    def read(name: str, limit: int) -> bytes:
        data = files[name]
        if len(data) > limit:
            raise LabelFileError("too large")
        return data

    return read


def _encoded(files: dict) -> dict[str, bytes]:
    return {k: v if isinstance(v, bytes) else json.dumps(v).encode() for k, v in files.items()}


def _detect(files: dict, task="detect", classes=()):
    files = _encoded(files)
    return detect_and_parse(list(files), _reader(files), task=task, classes=list(classes))


class _Data(list):
    """A label's numbers, equal to others within 1e-9 (normalising divides in its own order)."""

    def __eq__(self, other):
        return _close(self, other, 1e-9)

    __hash__ = None


def _labels(parsed, image):
    return [
        (parsed.class_names[lb.cls], lb.kind, _Data(lb.data)) for lb in parsed.images[image].labels
    ]


def _reasons(parsed) -> dict[str, str]:
    return {where: reason for where, reason, _ in parsed.skipped}


def _kinds(parsed) -> dict[str, str]:
    return {where: kind for where, _, kind in parsed.skipped}


def _close(a, b, tol=1e-6):
    return len(a) == len(b) and all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


def _coco_rle(mask: np.ndarray) -> dict:
    """A bool mask → COCO's compressed RLE (pycocotools' rleToString), as Datumaro writes it."""
    flat = mask.astype(np.uint8).flatten(order="F")
    counts, current, run = [], 0, 0
    for v in flat:
        if v != current:
            counts.append(run)
            current, run = v, 0
        run += 1
    counts.append(run)
    out = []
    for i, x in enumerate(counts):
        if i > 2:
            x -= counts[i - 2]
        more = True
        while more:
            c = x & 0x1F
            x >>= 5
            more = x != -1 if c & 0x10 else x != 0
            if more:
                c |= 0x20
            out.append(chr(c + 48))
    return {"counts": "".join(out), "size": [mask.shape[0], mask.shape[1]]}


def _sly_bitmap(mask: np.ndarray) -> str:
    """Supervisely's Bitmap.data_2_base64: a palette PNG, zlib-compressed, in base64."""
    img = PILImage.fromarray(mask.astype(np.uint8))
    img.putpalette([0, 0, 0, 255, 255, 255])
    out = io.BytesIO()
    img.save(out, format="PNG", transparency=0, optimize=0)
    return base64.b64encode(zlib.compress(out.getvalue())).decode()


# --- Datumaro -------------------------------------------------------------------------------------

_DM_CATEGORIES = {
    "label": {
        "labels": [
            {"name": "cat", "parent": "", "attributes": []},
            {"name": "dog", "parent": "", "attributes": []},
        ],
        "attributes": ["occluded"],
    }
}


def _dm(items, categories=_DM_CATEGORIES):
    return {"info": {}, "categories": categories, "items": items}


def _dm_item(item_id, path, anns, size=(48, 64)):
    image = {"path": path}
    if size:
        image["size"] = list(size)
    return {"id": item_id, "annotations": anns, "attr": {"frame": 0}, "image": image}


def _ann(kind, label_id, ann_id=0, group=0, **fields):
    attributes = fields.pop("attributes", {"occluded": False})
    return {
        "id": ann_id,
        "type": kind,
        "attributes": attributes,
        "group": group,
        "label_id": label_id,
        "z_order": 0,
        **fields,
    }


def test_datumaro_cvat_export_detect():
    files = {
        "annotations/train.json": _dm(
            [
                _dm_item(
                    "a",
                    "a.jpg",
                    [
                        _ann("bbox", 0, 1, bbox=[16, 12, 32, 24]),
                        _ann("polygon", 1, 2, points=[0, 0, 32, 0, 32, 24]),
                        _ann("polyline", 1, 3, points=[0, 0, 10, 10]),
                        _ann("label", 0, 4),
                        _ann("bbox", 7, 5, bbox=[0, 0, 1, 1]),
                        _ann("polyline", 0, 6, points=[40, 0, 60, 0, 60, 10, 40, 10, 40, 0]),
                    ],
                )
            ]
        ),
        "annotations/val.json": _dm(
            [_dm_item("b", "b.jpg", [_ann("bbox", 1, 1, bbox=[0, 0, 64, 48])])]
        ),
        "images/train/a.jpg": b"x",
        "images/val/b.jpg": b"x",
        "images/val/unlisted.jpg": b"x",
    }
    parsed = _detect(files)
    assert parsed.format == "datumaro"
    assert parsed.class_names == ["cat", "dog"]
    a, b = parsed.images["images/train/a.jpg"], parsed.images["images/val/b.jpg"]
    assert (a.split, b.split) == ("train", "val")
    assert a.declared_size == (64, 48) and not a.in_pixels
    assert _labels(parsed, "images/train/a.jpg") == [
        ("cat", "box", [0.5, 0.5, 0.5, 0.5]),
        ("dog", "box", [0.25, 0.25, 0.5, 0.5]),  # a polygon is its box in a detect dataset
        ("cat", "box", [50 / 64, 5 / 48, 20 / 64, 10 / 48]),  # a closed polyline is an outline
    ]
    assert _labels(parsed, "images/val/b.jpg") == [("dog", "box", [0.5, 0.5, 1.0, 1.0])]
    reasons = _reasons(parsed)
    assert "open polyline" in reasons["annotations/train.json item a annotation 3"]
    assert "classification dataset only" in reasons["annotations/train.json item a annotation 4"]
    assert "unknown label id 7" in reasons["annotations/train.json item a annotation 5"]
    assert parsed.label_counts == {"annotations/train.json": 3, "annotations/val.json": 1}
    assert any("subsets read: train, val" in n for n in parsed.notes)
    assert any("1 images named in no annotation" in n for n in parsed.notes)


def test_datumaro_segment_masks_and_groups():
    mask = np.zeros((48, 64), bool)
    mask[10:30, 20:40] = True
    items = [
        _dm_item(
            "a",
            "a.jpg",
            [
                # a COCO object as Datumaro reads it: a polygon and its bbox in one group
                _ann("polygon", 0, 1, group=1, points=[8, 8, 24, 8, 24, 24, 8, 24]),
                _ann("bbox", 0, 1, group=1, bbox=[8, 8, 16, 16]),
                _ann("mask", 1, 2, rle=_coco_rle(mask)),
            ],
        )
    ]
    files = {"annotations/default.json": _dm(items), "images/default/a.jpg": b"x"}
    parsed = _detect(files, task="segment")
    labels = _labels(parsed, "images/default/a.jpg")
    assert [(c, k) for c, k, _ in labels] == [("cat", "polygon"), ("dog", "polygon")]
    assert _close(
        labels[0][2], [8 / 64, 8 / 48, 24 / 64, 8 / 48, 24 / 64, 24 / 48, 8 / 64, 24 / 48]
    )
    xs, ys = labels[1][2][0::2], labels[1][2][1::2]
    assert _close([min(xs), min(ys), max(xs), max(ys)], [20 / 64, 10 / 48, 39 / 64, 29 / 48])
    assert any("1 annotations describing an object" in n for n in parsed.notes)
    assert any("masks traced into polygons" in n for n in parsed.notes)
    # the same file for a detect dataset: the group's bbox, and the mask's box
    parsed = _detect(files, task="detect")
    assert _labels(parsed, "images/default/a.jpg") == [
        ("cat", "box", [16 / 64, 16 / 48, 16 / 64, 16 / 48]),
        ("dog", "box", [30 / 64, 20 / 48, 20 / 64, 20 / 48]),
    ]


def test_datumaro_rotated_box_is_an_obb_or_the_box_around_it():
    items = [
        _dm_item(
            "a", "a.jpg", [_ann("bbox", 0, 1, bbox=[22, 14, 20, 20], attributes={"rotation": 45.0})]
        )
    ]
    files = {"annotations/train.json": _dm(items), "images/train/a.jpg": b"x"}
    parsed = _detect(files, task="obb")
    [(cls, kind, data)] = _labels(parsed, "images/train/a.jpg")
    d = 10 * math.sqrt(2)
    corners = [32, 24 - d, 32 + d, 24, 32, 24 + d, 32 - d, 24]  # turned clockwise, as CVAT does
    assert kind == "obb"
    assert _close(data, [v / (64 if i % 2 == 0 else 48) for i, v in enumerate(corners)])
    parsed = _detect(files, task="detect")
    [(cls, kind, data)] = _labels(parsed, "images/train/a.jpg")
    assert kind == "box" and _close(data, [0.5, 0.5, 2 * d / 64, 2 * d / 48])
    assert any("1 rotated boxes read as the upright boxes" in n for n in parsed.notes)


def test_datumaro_cvat_skeletons_and_coco_keypoints_for_pose():
    categories = {
        "label": {
            "labels": [
                {"name": "person", "parent": "", "attributes": []},
                {"name": "nose", "parent": "person", "attributes": []},
                {"name": "tail", "parent": "person", "attributes": []},
                {"name": "head", "parent": "person", "attributes": []},
            ]
        },
        "points": {"items": [{"label_id": 0, "labels": ["nose", "head", "tail"], "joints": []}]},
    }
    skeleton = _ann(
        "skeleton",
        0,
        1,
        elements=[
            _ann("points", 1, 0, points=[10, 10], visibility=[2]),
            _ann("points", 2, 0, points=[30, 20], visibility=[1]),
            _ann("points", 3, 0, points=[0, 0], visibility=[0]),
        ],
    )
    grouped = [
        _ann("points", 0, 2, group=5, points=[20, 20, 40, 30, 0, 0], visibility=[2, 2, 0]),
        _ann("bbox", 0, 2, group=5, bbox=[16, 16, 32, 24]),
    ]
    items = [_dm_item("a", "a.jpg", [skeleton]), _dm_item("b", "b.jpg", grouped)]
    files = {
        "annotations/train.json": _dm(items, categories),
        "images/train/a.jpg": b"x",
        "images/train/b.jpg": b"x",
    }
    parsed = _detect(files, task="pose")
    assert parsed.class_names == ["person"]  # a skeleton's points are no classes
    assert parsed.keypoint_shape == [3, 3]
    [(_, kind, data)] = _labels(parsed, "images/train/a.jpg")
    assert kind == "keypoints"
    # the box around the visible points; nose, head, tail in the points categories' order
    assert _close(
        data,
        [20 / 64, 15 / 48, 20 / 64, 10 / 48, 10 / 64, 10 / 48, 2, 0, 0, 0, 30 / 64, 20 / 48, 1],
    )
    [(_, kind, data)] = _labels(parsed, "images/train/b.jpg")
    assert _close(data[:4], [0.5, 28 / 48, 0.5, 0.5])  # the group's bbox
    # not a pose dataset: the keypoints are refused, with the reason
    parsed = _detect(files, task="detect")
    assert "pose dataset only" in _reasons(parsed)["annotations/train.json item a annotation 1"]


def test_datumaro_images_found_by_item_id_and_without_size():
    items = [
        {"id": "frames/f_001", "annotations": [_ann("bbox", 0, 1, bbox=[0, 0, 10, 10])]},
        _dm_item("gone", "gone.jpg", []),
    ]
    files = {
        "export/annotations/test.json": _dm(items),
        "export/images/test/frames/f_001.png": b"x",
    }
    parsed = _detect(files)
    entry = parsed.images["export/images/test/frames/f_001.png"]
    assert entry.split == "test" and entry.in_pixels and entry.declared_size is None
    assert _labels(parsed, "export/images/test/frames/f_001.png") == [
        ("cat", "box", [5, 5, 10, 10])
    ]
    assert _kinds(parsed)["export/annotations/test.json item gone.jpg"] == "no_image"


def test_datumaro_does_not_take_coco_in_an_annotations_folder():
    coco = {
        "images": [{"id": 1, "file_name": "a.jpg", "width": 64, "height": 48}],
        "annotations": [{"id": 1, "image_id": 1, "category_id": 1, "bbox": [0, 0, 8, 8]}],
        "categories": [{"id": 1, "name": "cat"}],
    }
    files = {"annotations/instances_train.json": coco, "images/a.jpg": b"x"}
    assert claim_datumaro(list(files), _reader(_encoded(files))) == []
    assert _detect(files).format == "coco"


# --- Supervisely ----------------------------------------------------------------------------------

_SLY_META = {
    "classes": [
        {"title": "car", "shape": "rectangle", "color": "#FF0000", "geometry_config": {}},
        {"title": "road", "shape": "polygon", "color": "#00FF00", "geometry_config": {}},
        {"title": "puddle", "shape": "bitmap", "color": "#0000FF", "geometry_config": {}},
        {"title": "sign", "shape": "point", "color": "#FFFF00", "geometry_config": {}},
        {"title": "lane", "shape": "line", "color": "#00FFFF", "geometry_config": {}},
    ],
    "tags": [{"name": "train", "value_type": "none"}, {"name": "night", "value_type": "none"}],
    "projectType": "images",
}


def _sly_ann(objects, tags=(), size=(64, 48)):
    return {
        "description": "",
        "tags": [{"name": t, "value": None} for t in tags],
        "size": {"height": size[1], "width": size[0]},
        "objects": objects,
    }


def _sly_obj(title, geometry, obj_id, **fields):
    return {
        "id": obj_id,
        "classId": 1,
        "description": "",
        "geometryType": geometry,
        "labelerLogin": "me",
        "tags": [],
        "classTitle": title,
        **fields,
    }


def _sly_project():
    mask = np.zeros((10, 12), bool)
    mask[2:8, 3:9] = True
    return {
        "proj/meta.json": _SLY_META,
        "proj/key_id_map.json": {"tags": {}, "objects": {}, "figures": {}, "videos": {}},
        "proj/ds0/ann/a.jpg.json": _sly_ann(
            [
                _sly_obj(
                    "car", "rectangle", 1, points={"exterior": [[10, 8], [41, 31]], "interior": []}
                ),
                _sly_obj(
                    "road",
                    "polygon",
                    2,
                    points={
                        "exterior": [[0, 0], [32, 0], [32, 24], [0, 24]],
                        "interior": [[[4, 4], [8, 4], [8, 8]]],
                    },
                ),
                _sly_obj(
                    "puddle", "bitmap", 3, bitmap={"data": _sly_bitmap(mask), "origin": [20, 10]}
                ),
                _sly_obj("sign", "point", 4, points={"exterior": [[5, 5]], "interior": []}),
                _sly_obj("lane", "line", 5, points={"exterior": [[0, 0], [9, 9]], "interior": []}),
            ],
            tags=["night"],
        ),
        "proj/ds0/img/a.jpg": b"x",
        "proj/ds0/meta/a.jpg.json": {"camera": "front"},
        "proj/val/ann/b.png.json": _sly_ann([]),
        "proj/val/img/b.png": b"x",
    }


def test_supervisely_project_detect():
    parsed = _detect(_sly_project())
    assert parsed.format == "supervisely"
    # classes of shapes Kestrel imports, in meta.json's order
    assert parsed.class_names == ["car", "road", "puddle"]
    a = parsed.images["proj/ds0/img/a.jpg"]
    assert (a.split, parsed.images["proj/val/img/b.png"].split) == ("train", "val")
    assert a.declared_size == (64, 48)
    labels = _labels(parsed, "proj/ds0/img/a.jpg")
    # right and bottom are the last pixels inside the rectangle
    assert labels[0] == ("car", "box", [26 / 64, 20 / 48, 32 / 64, 24 / 48])
    assert labels[1] == ("road", "box", [0.25, 0.25, 0.5, 0.5])
    assert labels[2][:2] == ("puddle", "box") and _close(
        labels[2][2], [(23 + 29) / 2 / 64, (12 + 18) / 2 / 48, 6 / 64, 6 / 48]
    )
    reasons, kinds = _reasons(parsed), _kinds(parsed)
    assert "lone point" in reasons["proj/ds0/ann/a.jpg.json object 4"]
    assert "open polyline" in reasons["proj/ds0/ann/a.jpg.json object 5"]
    assert kinds["proj/key_id_map.json"] == "file"
    assert kinds["proj/ds0/meta/a.jpg.json"] == "file"
    assert parsed.label_counts == {"proj/ds0/ann/a.jpg.json": 3, "proj/val/ann/b.png.json": 0}
    assert any("image tags not imported (night)" in n for n in parsed.notes)
    assert any("1 polygons with holes" in n for n in parsed.notes)


def test_supervisely_segment_keeps_outlines():
    parsed = _detect(_sly_project(), task="segment")
    labels = _labels(parsed, "proj/ds0/img/a.jpg")
    assert [(c, k) for c, k, _ in labels] == [
        ("car", "box"),
        ("road", "polygon"),
        ("puddle", "polygon"),
    ]
    xs, ys = labels[2][2][0::2], labels[2][2][1::2]
    assert _close([min(xs), min(ys), max(xs), max(ys)], [23 / 64, 12 / 48, 28 / 64, 17 / 48])


def test_supervisely_bitmaps_written_by_other_tools_and_too_large():
    def gray_png(mask) -> str:  # as scripts write them: an 8-bit grey PNG, 255 inside
        out = io.BytesIO()
        PILImage.fromarray(mask.astype(np.uint8) * 255, mode="L").save(out, format="PNG")
        return base64.b64encode(zlib.compress(out.getvalue())).decode()

    mask = np.zeros((6, 8), bool)
    mask[1:5, 2:6] = True
    objects = [
        _sly_obj("puddle", "bitmap", 1, bitmap={"data": gray_png(mask), "origin": [10, 20]}),
        _sly_obj("puddle", "bitmap", 2, bitmap={"data": gray_png(np.ones((60, 8), bool))}),
        _sly_obj("puddle", "bitmap", 3, bitmap={"data": "not base64 !", "origin": [0, 0]}),
    ]
    files = {"meta.json": _SLY_META, "ds/ann/a.jpg.json": _sly_ann(objects), "ds/img/a.jpg": b"x"}
    parsed = _detect(files)
    assert _labels(parsed, "ds/img/a.jpg") == [
        ("puddle", "box", [14 / 64, 23 / 48, 4 / 64, 4 / 48]),
    ]
    reasons = _reasons(parsed)
    assert "bitmap of 8×60 is larger than its image" in reasons["ds/ann/a.jpg.json object 2"]
    assert "bitmap" in reasons["ds/ann/a.jpg.json object 3"]


def test_supervisely_graph_keypoints_and_tags():
    meta = {
        "classes": [
            {
                "title": "person",
                "shape": "graph",
                "geometry_config": {
                    "nodes": {
                        "n1": {"label": "head", "loc": [0, 0]},
                        "n2": {"label": "hip", "loc": [0, 0]},
                        "n3": {"label": "foot", "loc": [0, 0]},
                    },
                    "edges": [],
                },
            }
        ],
        "tags": [
            {"name": "cat", "value_type": "none"},
            {"name": "breed", "value_type": "oneof_string", "values": ["tabby", "siamese"]},
        ],
    }
    graph = _sly_obj(
        "person",
        "graph",
        1,
        nodes={
            "n3": {"loc": [20, 40]},
            "n1": {"loc": [10, 8]},
            "n2": {"loc": [16, 20], "disabled": True},
        },
    )
    files = {
        "meta.json": meta,
        "ds/ann/a.jpg.json": _sly_ann([graph], tags=["val"]),
        "ds/img/a.jpg": b"x",
    }
    parsed = _detect(files, task="pose")
    assert parsed.keypoint_shape == [3, 3]
    [(cls, kind, data)] = _labels(parsed, "ds/img/a.jpg")
    assert parsed.images["ds/img/a.jpg"].split == "val"  # an image tag names the split
    assert (cls, kind) == ("person", "keypoints")
    expected = [15, 24, 10, 32, 10, 8, 2, 16, 20, 1, 20, 40, 2]  # template order; disabled: 1
    assert _close(
        data,
        [
            v / 64 if i in (0, 2, 4, 7, 10) else v / 48 if i in (1, 3, 5, 8, 11) else v
            for i, v in enumerate(expected)
        ],
    )
    # a classification dataset: the image's tags are its classes
    ann = _sly_ann([], tags=["cat", "train"])
    ann["tags"].append({"name": "breed", "value": "tabby"})
    files["ds/ann/a.jpg.json"] = ann
    parsed = _detect(files, task="classify")
    assert _labels(parsed, "ds/img/a.jpg") == [("cat", "tag", []), ("tabby", "tag", [])]
    assert parsed.images["ds/img/a.jpg"].split == "train"


# --- VIA ------------------------------------------------------------------------------------------


def _via_entry(filename, regions, size=1234, file_attributes=None):
    return {
        "filename": filename,
        "size": size,
        "regions": regions,
        "file_attributes": file_attributes or {},
    }


def _region(shape, **attributes):
    return {"shape_attributes": shape, "region_attributes": attributes}


def test_via_2_annotation_export():
    export = {
        "a.jpg1234": _via_entry(
            "a.jpg",
            [
                _region({"name": "rect", "x": 10, "y": 20, "width": 30, "height": 40}, label="cat"),
                _region(
                    {"name": "polygon", "all_points_x": [0, 10, 10], "all_points_y": [0, 0, 5]},
                    label="dog",
                ),
                _region({"name": "circle", "cx": 20, "cy": 20, "r": 5}, label="dog"),
                _region({"name": "point", "cx": 3, "cy": 3}, label="dog"),
                _region(
                    {"name": "polyline", "all_points_x": [0, 9], "all_points_y": [0, 9]},
                    label="dog",
                ),
                _region({"name": "rect", "x": 1, "y": 1, "width": 0, "height": 4}, label="cat"),
                _region({"name": "rect", "x": 1, "y": 1, "width": 3, "height": 4}),
                # an outline drawn with the polyline tool, ending (nearly) where it started
                _region(
                    {
                        "name": "polyline",
                        "all_points_x": [0, 40, 40, 0, 1],
                        "all_points_y": [0, 0, 20, 20, 2],
                    },
                    label="cat",
                ),  # fmt: skip
            ],
        ),
        "b.jpg99": _via_entry("b.jpg", []),
        "gone.jpg5": _via_entry("gone.jpg", []),
    }
    files = {"via/via_export_json.json": export, "via/a.jpg": b"x", "via/b.jpg": b"x"}
    parsed = _detect(files)
    assert parsed.format == "via"
    assert parsed.class_names == ["cat", "dog"]
    a = parsed.images["via/a.jpg"]
    assert a.in_pixels and a.declared_size is None
    assert _labels(parsed, "via/a.jpg") == [
        ("cat", "box", [25, 40, 30, 40]),
        ("dog", "box", [5, 2.5, 10, 5]),
        ("dog", "box", [20, 20, 10, 10]),
        ("cat", "box", [20, 10, 40, 20]),
    ]
    reasons = _reasons(parsed)
    assert "lone point" in reasons["via/via_export_json.json a.jpg region 4"]
    assert "open polyline is not imported" in reasons["via/via_export_json.json a.jpg region 5"]
    assert "no width or height" in reasons["via/via_export_json.json a.jpg region 6"]
    assert "no 'label' attribute" in reasons["via/via_export_json.json a.jpg region 7"]
    assert _kinds(parsed)["via/via_export_json.json gone.jpg"] == "no_image"
    assert any(
        "the class is the region attribute 'label' (the only one)" in n for n in parsed.notes
    )
    assert any("1 polylines that end where they start read as polygons" in n for n in parsed.notes)
    # a segment dataset: polygons stay, a circle becomes one, the closed polyline too
    parsed = _detect(files, task="segment")
    labels = _labels(parsed, "via/a.jpg")
    assert [k for _, k, _ in labels] == ["box", "polygon", "polygon", "polygon"]
    assert labels[3][2] == [0, 0, 40, 0, 40, 20, 0, 20, 1, 2]


def test_via_project_with_several_attributes_reads_the_one_named_like_a_class():
    project = {
        "_via_settings": {"ui": {}, "core": {}, "project": {"name": "p"}},
        "_via_img_metadata": {
            "train/a.jpg1": _via_entry(
                "a.jpg",
                [
                    _region(
                        {"name": "rect", "x": 0, "y": 0, "width": 4, "height": 4},
                        Type="car",
                        colour="red",
                    ),
                    _region(
                        {"name": "rect", "x": 0, "y": 0, "width": 4, "height": 4},
                        Type={"bus": True, "car": False},
                        colour="red",
                    ),
                ],
            )
        },
        "_via_attributes": {
            "region": {
                "Type": {"type": "dropdown", "options": {"bus": "", "car": "", "van": ""}},
                "colour": {"type": "text"},
            },
            "file": {},
        },
        "_via_data_format_version": "2.0.10",
        "_via_image_id_list": ["train/a.jpg1"],
    }
    files = {"project.json": project, "train/a.jpg": b"x"}
    parsed = _detect(files)
    assert parsed.format == "via"
    assert parsed.class_names == ["bus", "car", "van"]  # the dropdown's order
    assert [c for c, _, _ in _labels(parsed, "train/a.jpg")] == ["car", "bus"]
    assert parsed.images["train/a.jpg"].split == "train"
    assert any("'Type' ('colour' not read)" in n for n in parsed.notes)


def test_via_1_regions_object_and_files_without_attributes():
    export = {
        "a.jpg10": {
            "fileref": "",
            "size": 10,
            "filename": "a.jpg",
            "base64_img_data": "",
            "file_attributes": {},
            "regions": {
                "0": _region(
                    {"name": "polygon", "all_points_x": [0, 4, 4], "all_points_y": [0, 0, 4]}
                ),
                "1": _region({"name": "ellipse", "cx": 10, "cy": 10, "rx": 4, "ry": 2, "theta": 0}),
            },
        }
    }
    parsed = _detect({"via_region_data.json": export, "a.jpg": b"x"})
    assert parsed.class_names == ["object"]
    assert _labels(parsed, "a.jpg") == [
        ("object", "box", [2, 2, 4, 4]),
        ("object", "box", [10, 10, 8, 4]),
    ]
    assert any("have no attribute: all read as one class, 'object'" in n for n in parsed.notes)
    # the dataset's only class names them
    parsed = _detect({"via_region_data.json": export, "a.jpg": b"x"}, classes=["balloon"])
    assert {c for c, _, _ in _labels(parsed, "a.jpg")} == {"balloon"}


def test_via_attributes_naming_no_class_are_refused():
    export = {
        "a.jpg1": _via_entry(
            "a.jpg",
            [
                _region(
                    {"name": "rect", "x": 0, "y": 0, "width": 4, "height": 4},
                    colour="red",
                    size="L",
                ),
            ],
        )
    }
    parsed = _detect({"v.json": export, "a.jpg": b"x"})
    assert parsed.format == "via"
    assert "no region attribute names its class" in _reasons(parsed)["v.json a.jpg region 1"]
    assert any("name no class" in n for n in parsed.notes)


# --- CreateML -------------------------------------------------------------------------------------


def test_createml_roboflow_export():
    def box(label, x, y, w, h):
        return {"label": label, "coordinates": {"x": x, "y": y, "width": w, "height": h}}

    files = {
        "train/_annotations.createml.json": [
            {
                "image": "a.jpg",
                "annotations": [box("cat", 32, 24, 16, 8), box("dog", 10, 10, 4, 4)],
            },
            {"image": "b.jpg", "annotations": [box("dog", 5, 5, 0, 4), {"label": "cat"}]},
        ],
        "train/a.jpg": b"x",
        "train/b.jpg": b"x",
        "valid/_annotations.createml.json": [
            {"image": "c.jpg", "annotations": []},
            {"image": "missing.jpg", "annotations": []},
        ],
        "valid/c.jpg": b"x",
    }
    parsed = _detect(files)
    assert parsed.format == "createml"
    assert parsed.class_names == ["cat", "dog"]
    assert _labels(parsed, "train/a.jpg") == [
        ("cat", "box", [32, 24, 16, 8]),
        ("dog", "box", [10, 10, 4, 4]),
    ]
    assert parsed.images["train/a.jpg"].in_pixels
    assert {p: e.split for p, e in parsed.images.items()} == {
        "train/a.jpg": "train",
        "train/b.jpg": "train",
        "valid/c.jpg": "val",
    }
    reasons = _reasons(parsed)
    assert "no width or height" in reasons["train/_annotations.createml.json b.jpg annotation 1"]
    assert "no coordinates" in reasons["train/_annotations.createml.json b.jpg annotation 2"]
    assert _kinds(parsed)["valid/_annotations.createml.json missing.jpg"] == "no_image"
    assert parsed.label_counts == {
        "train/_annotations.createml.json": 2,
        "valid/_annotations.createml.json": 0,
    }


# --- what the claims leave to other formats -------------------------------------------------------


@pytest.mark.parametrize(
    "doc",
    [
        # Label Studio JSON: tasks with data and annotations (with result)
        [{"id": 1, "annotations": [{"id": 1, "result": []}], "data": {"image": "/data/a.jpg"}}],
        [{"id": 1, "annotations": [], "data": {"image": "a.jpg"}, "predictions": []}],
        # Label Studio JSON-MIN: image and label keys, no annotations
        [
            {
                "image": "a.jpg",
                "id": 1,
                "label": [{"x": 1, "y": 1, "width": 2, "height": 2, "rectanglelabels": ["cat"]}],
                "annotator": 1,
                "annotation_id": 1,
            }
        ],
        # COCO
        {
            "info": {"year": 2024},
            "images": [{"id": 1, "file_name": "a.jpg"}],
            "annotations": [],
            "categories": [],
        },
        # LabelMe
        {"version": "5.0", "flags": {}, "shapes": [], "imagePath": "x.jpg", "imageData": None},
        # Ultralytics NDJSON's first line, in a .json
        {"type": "dataset", "task": "detect", "class_names": {"0": "cat"}},
    ],
)
def test_claims_leave_other_formats_alone(doc):
    files = {"export.json": json.dumps(doc).encode(), "a.jpg": b"x"}
    read = _reader(files)
    names = list(files)
    for claim in (claim_datumaro, claim_supervisely, claim_via, claim_createml):
        assert claim(names, read) == [], claim.__name__


def test_per_image_json_files_are_not_peeked_at_for_whole_dataset_formats():
    files = {f"d/{i}.jpg": b"x" for i in range(3)}
    files.update({f"d/{i}.json": b"not read" for i in range(3)})
    files.update({f"d/{i}.jpg.json": b"not read" for i in range(3)})
    read_names = []

    def read(name, limit):
        read_names.append(name)
        return files[name]

    assert claim_via(list(files), read) == []
    assert claim_createml(list(files), read) == []
    assert read_names == []


def test_supervisely_claim_needs_meta_json_beside_ann_folders():
    files = {"meta.json": _SLY_META, "ds/ann/a.jpg.json": _sly_ann([]), "ds/img/a.jpg": b"x"}
    encoded = _encoded(files)
    assert claim_supervisely(list(encoded), _reader(encoded)) == [
        "meta.json",
        "ds/ann/a.jpg.json",
    ]
    del encoded["meta.json"]
    assert claim_supervisely(list(encoded), _reader(encoded)) == []


def test_bad_json_is_reported_per_file():
    files = {
        "annotations/train.json": b'{"categories": {"label": {"labels": []}}, "items": [',
        "images/train/a.jpg": b"x",
    }
    parsed = detect_and_parse(list(files), _reader(files), task="detect", classes=[])
    assert parsed.format == "datumaro"
    assert _kinds(parsed)["annotations/train.json"] == "label_file"


# --- end to end -----------------------------------------------------------------------------------


def _rows(dataset) -> dict[str, tuple[str, int]]:
    return {i.filename: (i.split, i.label_count) for i in Image.objects.filter(dataset=dataset)}


def _data(dataset, filename) -> list[tuple[str, str, list[float]]]:
    labels = Label.objects.filter(image__dataset=dataset, image__filename=filename)
    return sorted((lb.dataset_class.name, lb.kind, lb.data) for lb in labels)


@pytest.mark.django_db
def test_createml_and_via_pixels_are_normalised_by_the_image_size(team, tmp_path):
    files = {
        "train/_annotations.createml.json": json.dumps(
            [
                {
                    "image": "a.jpg",
                    "annotations": [
                        {
                            "label": "cat",
                            "coordinates": {"x": 32, "y": 24, "width": 32, "height": 24},
                        },
                        {
                            "label": "cat",
                            "coordinates": {"x": 60, "y": 24, "width": 32, "height": 24},
                        },
                        # whole pixels, as Roboflow rounds them: half a pixel past the edge
                        {
                            "label": "dog",
                            "coordinates": {"x": 52, "y": 24, "width": 25, "height": 24},
                        },
                    ],
                },
            ]
        ).encode(),
        "train/a.jpg": _jpeg(64, 48),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "createml.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["format"] == "createml"
    assert _rows(dataset) == {"a.jpg": ("train", 2)}
    assert _data(dataset, "a.jpg") == [
        ("cat", "box", [0.5, 0.5, 0.5, 0.5]),
        ("dog", "box", _Data([51.75 / 64, 0.5, 24.5 / 64, 0.5])),  # clipped to the edge
    ]
    assert any("outside the 64×48 image" in s["reason"] for s in imp.report["skipped"])

    files = {
        "via.json": json.dumps(
            {
                "a.jpg1": _via_entry(
                    "a.jpg",
                    [
                        _region(
                            {
                                "name": "polygon",
                                "all_points_x": [0, 32, 32],
                                "all_points_y": [0, 0, 24],
                            },
                            type="dog",
                        ),
                    ],
                )
            }
        ).encode(),
        "a.jpg": _jpeg(64, 48),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "via.zip"), task="segment", name="V")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["format"] == "via"
    assert _data(dataset, "a.jpg") == [("dog", "polygon", [0, 0, 0.5, 0, 0.5, 0.5])]


@pytest.mark.django_db
def test_datumaro_and_supervisely_import_end_to_end(team, tmp_path):
    files = {
        "annotations/train.json": json.dumps(
            _dm(
                [
                    _dm_item("a", "a.jpg", [_ann("bbox", 1, 1, bbox=[16, 12, 32, 24])]),
                ]
            )
        ).encode(),
        "annotations/val.json": json.dumps(
            _dm([_dm_item("b", "b.jpg", [], size=(96, 64))])
        ).encode(),
        "images/train/a.jpg": _jpeg(64, 48),
        "images/val/b.jpg": _jpeg(64, 48),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "dm.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["format"] == "datumaro"
    assert [c.name for c in dataset.classes.order_by("index")] == ["cat", "dog"]
    assert _rows(dataset) == {"a.jpg": ("train", 1), "b.jpg": ("val", 0)}
    assert _data(dataset, "a.jpg") == [("dog", "box", [0.5, 0.5, 0.5, 0.5])]

    files = _encoded(_sly_project())
    files["proj/ds0/img/a.jpg"] = _jpeg(64, 48)
    files["proj/val/img/b.png"] = _png(64, 48)
    dataset, imp = _import(team, zip_of(files, tmp_path / "sly.zip"), name="S")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    report = imp.report
    assert report["format"] == "supervisely"
    assert _rows(dataset) == {"a.jpg": ("train", 3), "b.png": ("val", 0)}
    skipped = {s["file"]: s["kind"] for s in report["skipped"]}
    assert skipped["proj/key_id_map.json"] == "file"
    assert skipped["proj/ds0/ann/a.jpg.json object 4"] == "label"


def _png(width, height) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (width, height), (next(_colors) % 256, 40, 90)).save(out, format="PNG")
    return out.getvalue()
