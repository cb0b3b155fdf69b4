"""COCO segmentations given as run-length masks, and COCO keypoints, imported end to end.

The masks are encoded here, in COCO's documented format (pycocotools' maskApi.c): run lengths
over the mask read column by column, background first; compressed as rleToString writes them
(6 bits a character from '0', each count after the second as the difference from the one two
before it)."""

import json

import cv2
import numpy as np
import pytest

from datasets.models import ImportStatus, Label
from tests.datasets.archives import jpeg_bytes, zip_of
from tests.datasets.test_ingest import _import

W, H = 200, 160


def rle_counts(mask: np.ndarray) -> list[int]:
    """Uncompressed COCO RLE: runs of the column-major mask, starting with background."""
    counts, current, run = [], 0, 0
    for value in mask.flatten(order="F").astype(np.uint8):
        if value != current:
            counts.append(run)
            current, run = value, 0
        run += 1
    counts.append(run)
    return counts


def rle_string(counts: list[int]) -> str:
    """pycocotools' rleToString: LEB128-like, 5 bits of value a character, ASCII 48 up."""
    out = []
    for i, count in enumerate(counts):
        x = count - counts[i - 2] if i > 2 else count
        more = True
        while more:
            c = x & 0x1F
            x >>= 5  # arithmetic, as C's on a long
            more = x != -1 if c & 0x10 else x != 0
            out.append(chr((c | 0x20 if more else c) + 48))
    return "".join(out)


def _bbox(mask: np.ndarray) -> list[int]:
    ys, xs = np.nonzero(mask)
    return [
        int(xs.min()),
        int(ys.min()),
        int(xs.max() - xs.min() + 1),
        int(ys.max() - ys.min() + 1),
    ]


def _masks() -> dict[str, np.ndarray]:
    rect = np.zeros((H, W), dtype=bool)
    rect[30:90, 20:100] = True  # x 20..99, y 30..89
    disc = np.zeros((H, W), dtype=np.uint8)
    cv2.circle(disc, (160, 120), 20, 1, -1)
    ellipse = np.zeros((H, W), dtype=np.uint8)
    cv2.ellipse(ellipse, (60, 125), (40, 20), 0, 0, 360, 1, -1)
    return {"rect": rect, "disc": disc.astype(bool), "ellipse": ellipse.astype(bool)}


def _coco(annotations: list[dict]) -> bytes:
    return json.dumps(
        {
            "images": [{"id": 1, "file_name": "street.jpg", "width": W, "height": H}],
            "categories": [{"id": 1, "name": "car"}, {"id": 2, "name": "crowd"}],
            "annotations": annotations,
        }
    ).encode()


def _rle_annotations(masks) -> list[dict]:
    two_regions = masks["rect"] | masks["disc"]
    return [
        {  # one mask of two regions, uncompressed counts
            "id": 1,
            "image_id": 1,
            "category_id": 1,
            "iscrowd": 0,
            "bbox": _bbox(two_regions),
            "area": int(two_regions.sum()),
            "segmentation": {"size": [H, W], "counts": rle_counts(two_regions)},
        },
        {  # a crowd region, compressed as COCO's own files have them
            "id": 2,
            "image_id": 1,
            "category_id": 2,
            "iscrowd": 1,
            "bbox": _bbox(masks["ellipse"]),
            "area": int(masks["ellipse"].sum()),
            "segmentation": {"size": [H, W], "counts": rle_string(rle_counts(masks["ellipse"]))},
        },
    ]


def _upload(tmp_path, annotations, name="coco.zip"):
    files = {
        "annotations/instances_train.json": _coco(annotations),
        "images/street.jpg": jpeg_bytes(W, H),
    }
    return zip_of(files, tmp_path / name)


def _polygon_pixels(data: list[float]) -> np.ndarray:
    return np.array([[x * W, y * H] for x, y in zip(data[0::2], data[1::2], strict=True)])


def _filled(points: np.ndarray) -> np.ndarray:
    out = np.zeros((H, W), dtype=np.uint8)
    cv2.fillPoly(out, [np.round(points).astype(np.int32)], 1)
    return out.astype(bool)


def test_the_encoder_here_is_the_one_masks_py_decodes():
    from datasets.services.masks import coco_counts_from_string, coco_rle_decode

    mask = _masks()["ellipse"]
    counts = rle_counts(mask)
    assert coco_counts_from_string(rle_string(counts)) == counts
    # pycocotools' own string for a 2 × 2 mask with its top-right pixel set: runs [2, 1, 1]
    assert rle_string([2, 1, 1]) == "211"
    for rle in (counts, rle_string(counts)):
        assert (coco_rle_decode({"size": [H, W], "counts": rle}) == mask).all()


@pytest.mark.django_db
def test_rle_masks_become_polygons_in_a_segment_dataset(team, tmp_path):
    masks = _masks()
    dataset, imp = _import(team, _upload(tmp_path, _rle_annotations(masks)), task="segment")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    report = imp.report
    assert report["format"] == "coco"
    assert report["labels_imported"] == 3  # one label per region: two, then one
    assert report["labels_per_class"] == {"car": 2, "crowd": 1}
    assert any(
        n.startswith("2 RLE masks, 1 of them crowd regions (iscrowd 1) became 3 polygons")
        for n in report["notes"]
    )
    labels = Label.objects.filter(image__dataset=dataset).select_related("dataset_class")
    assert {lb.kind for lb in labels} == {"polygon"}
    by_region = {}
    for label in labels:
        points = _polygon_pixels(label.data)
        cx, cy = points.mean(axis=0)
        region = "rect" if cx < 110 and cy < 100 else "disc" if cx > 130 else "ellipse"
        by_region[region] = (label.dataset_class.name, points)
    assert {k: v[0] for k, v in by_region.items()} == {
        "rect": "car",
        "disc": "car",
        "ellipse": "crowd",
    }
    # The rectangle's outline is its four corner pixels, exactly.
    corners = {(round(x), round(y)) for x, y in by_region["rect"][1]}
    assert corners == {(20, 30), (99, 30), (99, 89), (20, 89)}
    for region, (_, points) in by_region.items():
        mask = masks[region]
        filled = _filled(points)
        iou = (filled & mask).sum() / (filled | mask).sum()
        assert iou > 0.97, region
        # its area: the outline runs through the edge pixels' corners, half a pixel inside
        x, y = points[:, 0], points[:, 1]
        area = 0.5 * abs(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1)))
        assert area == pytest.approx(mask.sum(), rel=0.05), region


@pytest.mark.django_db
def test_rle_masks_are_their_boxes_in_a_detect_dataset(team, tmp_path):
    masks = _masks()
    annotations = _rle_annotations(masks)
    del annotations[1]["bbox"]  # without a bbox, the box is the mask's
    dataset, imp = _import(team, _upload(tmp_path, annotations), task="detect")
    assert imp.report["labels_imported"] == 2
    boxes = {
        lb.dataset_class.name: lb.data
        for lb in Label.objects.filter(image__dataset=dataset).select_related("dataset_class")
    }
    # rect ∪ disc: x 20..180, y 30..140 (inclusive pixels); the ellipse x 20..100, y 105..145
    assert boxes["car"] == pytest.approx([100.5 / W, 85.5 / H, 161 / W, 111 / H])
    assert boxes["crowd"] == pytest.approx([60.5 / W, 125.5 / H, 81 / W, 41 / H])


@pytest.mark.django_db
def test_a_broken_rle_is_refused_with_its_reason(team, tmp_path):
    mask = _masks()["rect"]
    good = {"size": [H, W], "counts": rle_counts(mask)}
    annotations = [
        {  # drawn for another image size
            "id": 1,
            "image_id": 1,
            "category_id": 1,
            "bbox": _bbox(mask),
            "segmentation": {"size": [H // 2, W // 2], "counts": rle_counts(mask[::2, ::2])},
        },
        {  # runs that do not add up to the image
            "id": 2,
            "image_id": 1,
            "category_id": 1,
            "bbox": _bbox(mask),
            "segmentation": {**good, "counts": good["counts"][:-1]},
        },
        {  # a compressed string with a character outside its alphabet
            "id": 3,
            "image_id": 1,
            "category_id": 1,
            "bbox": _bbox(mask),
            "segmentation": {**good, "counts": "0" + "~" * 3},
        },
        {  # an empty mask
            "id": 4,
            "image_id": 1,
            "category_id": 1,
            "bbox": _bbox(mask),
            "segmentation": {"size": [H, W], "counts": [H * W]},
        },
        {"id": 5, "image_id": 1, "category_id": 1, "bbox": _bbox(mask), "segmentation": good},
    ]
    dataset, imp = _import(team, _upload(tmp_path, annotations), task="segment")
    assert imp.report["labels_imported"] == 1
    reasons = {s["file"]: s["reason"] for s in imp.report["skipped"] if s["kind"] == "label"}
    place = "annotations/instances_train.json annotation"
    assert reasons[f"{place} 1"] == "label RLE mask of size [80, 100], not the image's [160, 200]"
    assert reasons[f"{place} 2"].startswith("label run lengths add up to")
    assert reasons[f"{place} 3"] == "label compressed RLE has a character outside its alphabet"
    assert reasons[f"{place} 4"] == "label RLE mask with no region of 4 pixels or more"
    assert Label.objects.get(image__dataset=dataset).kind == "polygon"


# --- COCO keypoints -------------------------------------------------------------------------------

KEYPOINT_NAMES = [
    "nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
    "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip",
    "left_knee", "right_knee", "left_ankle", "right_ankle",
]  # fmt: skip
SKELETON = [
    [16, 14], [14, 12], [17, 15], [15, 13], [12, 13], [6, 12], [7, 13], [6, 7], [6, 8], [7, 9],
    [8, 10], [9, 11], [2, 3], [1, 2], [1, 3], [2, 4], [3, 5], [4, 6], [5, 7],
]  # fmt: skip


@pytest.mark.django_db
def test_coco_person_keypoints_import_exactly(team, tmp_path):
    # person_keypoints_*.json: 17 named keypoints, x y v each (v 0 not labelled, 1 labelled
    # but hidden, 2 visible); num_keypoints counts those with v > 0.
    few = [0] * 51
    few[0:3] = [20, 10, 2]  # nose
    few[3:6] = [22, 8, 1]  # left eye, hidden
    few[15:18] = [16, 18, 2]  # left shoulder
    every = [v for i in range(17) for v in (2 + 3 * i, 1 + 2 * i, 2)]
    coco = {
        "info": {"description": "COCO 2017 Dataset"},
        "images": [
            {"id": 1, "file_name": "a.jpg", "width": 64, "height": 48},
            {"id": 2, "file_name": "b.jpg", "width": 64, "height": 48},
        ],
        "categories": [
            {
                "supercategory": "person",
                "id": 1,
                "name": "person",
                "keypoints": KEYPOINT_NAMES,
                "skeleton": SKELETON,
            }
        ],
        "annotations": [
            {
                "id": 10,
                "image_id": 1,
                "category_id": 1,
                "iscrowd": 0,
                "num_keypoints": 3,
                "keypoints": few,
                "bbox": [8, 4, 32, 40],
                "area": 1280,
                "segmentation": [[8, 4, 40, 4, 40, 44, 8, 44]],
            },
            {
                "id": 11,
                "image_id": 2,
                "category_id": 1,
                "iscrowd": 0,
                "num_keypoints": 17,
                "keypoints": every,
                "bbox": [0, 0, 64, 48],
                "area": 3072,
                "segmentation": [[0, 0, 64, 0, 64, 48, 0, 48]],
            },
        ],
    }
    files = {
        "annotations/person_keypoints_val2017.json": json.dumps(coco).encode(),
        "val2017/a.jpg": jpeg_bytes(color=(1, 2, 3)),
        "val2017/b.jpg": jpeg_bytes(color=(3, 2, 1)),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "pose.zip"), task="pose")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    report = imp.report
    assert report["format"] == "coco"
    assert report["classes"] == ["person"]
    assert report["labels_imported"] == 2 and report["skipped"] == []
    dataset.refresh_from_db()
    assert dataset.keypoint_shape == [17, 3]
    a = Label.objects.get(image__dataset=dataset, image__filename="a.jpg")
    assert a.kind == "keypoints"
    expected = [0.0] * 51
    expected[0:3] = [20 / 64, 10 / 48, 2]
    expected[3:6] = [22 / 64, 8 / 48, 1]
    expected[15:18] = [16 / 64, 18 / 48, 2]
    assert a.data == pytest.approx([24 / 64, 24 / 48, 32 / 64, 40 / 48, *expected])
    b = Label.objects.get(image__dataset=dataset, image__filename="b.jpg")
    normalised = [
        v / 64 if i % 3 == 0 else v / 48 if i % 3 == 1 else v for i, v in enumerate(every)
    ]
    assert b.data == pytest.approx([0.5, 0.5, 1.0, 1.0, *normalised])
    assert b.data[4 + 3 * 16 : 4 + 3 * 17] == pytest.approx([50 / 64, 33 / 48, 2])
