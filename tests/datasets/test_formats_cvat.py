"""CVAT's own XML exports ("CVAT for images 1.1", "CVAT for video 1.1"), imported as they come
out of CVAT: real exports from Datumaro's test assets (tests/datasets/fixtures/cvat/README.md)
and exports built here in CVAT's documented structure. Every shape arrives or is named."""

from pathlib import Path  # noqa: I001

import pytest

from datasets.models import Image, ImportStatus, Label
from tests.datasets.archives import jpeg_bytes, zip_folder, zip_of
from tests.datasets.test_ingest import _import

FIXTURES = Path(__file__).parent / "fixtures" / "cvat"


def _labels(dataset) -> dict[str, list[tuple[str, str, list[float]]]]:
    out: dict[str, list] = {}
    for label in Label.objects.filter(image__dataset=dataset).select_related(
        "image", "dataset_class"
    ):
        data = [round(v, 4) for v in label.data]
        out.setdefault(label.image.filename, []).append(
            (label.dataset_class.name, label.kind, data)
        )
    return out


def _skipped(imp) -> list[tuple[str, str, str]]:
    return [(s["file"], s["reason"], s["kind"]) for s in imp.report["skipped"]]


def _xml(body: str, labels: str = "") -> bytes:
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n<annotations>\n  <version>1.1</version>\n'
        f"  <meta><task><name>t</name><labels>{labels}</labels></task></meta>\n{body}\n"
        "</annotations>\n"
    ).encode()


def _label(name: str, type_: str = "any", parent: str = "") -> str:
    parent_el = f"<parent>{parent}</parent>" if parent else ""
    return f"<label><name>{name}</name><type>{type_}</type><attributes/>{parent_el}</label>"


# --- real exports -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_real_cvat_for_images_task_export(team, tmp_path):
    archive = zip_folder(FIXTURES / "for_images" / "export_task", tmp_path / "task.zip")
    dataset, imp = _import(team, archive)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["format"] == "cvat-images"
    # Declared labels stay classes, label2 too (its only shape is points, refused in detect).
    assert [c.name for c in dataset.classes.order_by("index")] == ["label1", "label2"]
    # <box xtl=0 ytl=2 xbr=4 ybr=4> on an 8×8 image.
    assert _labels(dataset) == {"img0.jpg": [("label1", "box", [0.25, 0.375, 0.5, 0.25])]}
    skipped = _skipped(imp)
    assert ("train.xml image images/img0.jpg polyline 2", "a polyline without a label",
            "label") in skipped  # fmt: skip
    assert ("train.xml image images/img1.jpg polygon 1", "a polygon without a label",
            "label") in skipped  # fmt: skip
    assert any(
        f == "train.xml image images/img1.jpg points 2" and "pose dataset" in r
        for f, r, _ in skipped
    )
    notes = " ".join(imp.report["notes"])
    assert "4 attribute values (a1, a2, a3, a4) not kept" in notes
    assert imp.report["warning"] == ""


@pytest.mark.django_db
def test_real_cvat_project_export_subsets_become_splits(team, tmp_path):
    archive = zip_folder(FIXTURES / "for_images" / "export_project", tmp_path / "project.zip")
    dataset, imp = _import(team, archive, task="segment")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    rows = sorted(Image.objects.filter(dataset=dataset).values_list("split", "label_count"))
    # Six images of one name pair in three subsets (Train, Validation, Test); each keeps its
    # box or its polygon (the polylines and points beside them are refused, each named).
    assert rows == [("test", 1)] * 2 + [("train", 1)] * 2 + [("val", 1)] * 2
    labels = _labels(dataset)
    # <polygon points="1,2;3,4;6,5"> on a 10×10 image.
    assert ("label1", "polygon", [0.1, 0.2, 0.3, 0.4, 0.6, 0.5]) in labels["img1.jpg"]
    reasons = [r for _, r, k in _skipped(imp) if k == "label"]
    assert reasons.count("polyline shapes are not imported: Kestrel has no line labels") == 3


@pytest.mark.django_db
def test_real_cvat_for_video_export_frames_with_shapes(team, tmp_path):
    archive = zip_of(
        {
            "annotations.xml": (FIXTURES / "for_video" / "annotations.xml").read_bytes(),
            **{
                f"images/{p.name}": p.read_bytes()
                for p in (FIXTURES / "for_video" / "images").iterdir()
            },
        },
        tmp_path / "video.zip",
    )
    dataset, imp = _import(team, archive)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["format"] == "cvat-video"
    # Track 0 (II) is inside at frame 10 only: xtl 3 ytl 4 xbr 10 ybr 5 on 25×20; track 2's
    # polyline at frame 13 is refused; frame 16 has no shape left (every track outside).
    assert _labels(dataset) == {"frame_000010.png": [("II", "box", [0.26, 0.225, 0.28, 0.05])]}
    assert set(Image.objects.filter(dataset=dataset).values_list("filename", flat=True)) == {
        "frame_000010.png",
        "frame_000013.png",
    }
    skipped = _skipped(imp)
    assert ("images/frame_000016.png", "a video frame with no shapes: not imported",
            "image") in skipped  # fmt: skip
    assert any(f == "annotations.xml track 2 frame 13" and "polyline" in r for f, r, _ in skipped)


@pytest.mark.django_db
def test_cvat_video_without_its_frames_names_each_missing_frame(team, tmp_path):
    xml = _xml(
        '<track id="0" label="car"><box frame="3" outside="0" occluded="0" keyframe="1" '
        'xtl="1" ytl="1" xbr="5" ybr="5" z_order="0"/></track>'
        "<meta><task><original_size><width>25</width><height>20</height></original_size>"
        "</task></meta>",
        _label("car", "rectangle"),
    )
    dataset, imp = _import(
        team, zip_of({"annotations.xml": xml, "other.jpg": jpeg_bytes(25, 20)}, tmp_path / "v.zip")
    )
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert any(
        f == "annotations.xml frame 3"
        and "frame_000003 is not in the upload" in r
        and k == "no_image"
        for f, r, k in _skipped(imp)
    )
    assert imp.report["labels_imported"] == 0
    assert imp.report["warning"]  # labels were found and none imported: said first


# --- every shape, built in CVAT's structure ----------------------------------------------------


def _shapes_export(tmp_path, body: str, labels: str, w=100, h=80):
    xml = _xml(
        f'<image id="0" name="a.jpg" width="{w}" height="{h}" subset="Validation">{body}</image>',
        labels,
    )
    return zip_of({"annotations.xml": xml, "images/a.jpg": jpeg_bytes(w, h)}, tmp_path / "c.zip")


ROTATED_BOX = (
    '<box label="car" source="manual" occluded="0" xtl="20" ytl="20" xbr="60" ybr="40" '
    'rotation="90.0" z_order="0"/>'
)


@pytest.mark.django_db
def test_rotated_box_is_an_oriented_box_in_an_obb_dataset(team, tmp_path):
    dataset, imp = _import(
        team, _shapes_export(tmp_path, ROTATED_BOX, _label("car", "rectangle")), task="obb"
    )
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    # Turned 90° clockwise about (40, 30): corners (50,10) (50,50) (30,50) (30,10) of 100×80.
    assert _labels(dataset) == {
        "a.jpg": [("car", "obb", [0.5, 0.125, 0.5, 0.625, 0.3, 0.625, 0.3, 0.125])]
    }
    assert Image.objects.get(dataset=dataset).split == "val"


@pytest.mark.django_db
def test_rotated_box_is_its_upright_box_in_detect_and_the_report_says_so(team, tmp_path):
    dataset, imp = _import(team, _shapes_export(tmp_path, ROTATED_BOX, _label("car")))
    assert _labels(dataset) == {"a.jpg": [("car", "box", [0.4, 0.375, 0.2, 0.5])]}
    assert any("1 rotated boxes imported as the upright boxes" in n for n in imp.report["notes"])


def _rle(mask_rows: list[str]) -> str:
    """CVAT's mask RLE: runs over the mask's box, row by row, background first."""
    flat = "".join(mask_rows)
    counts, current, run = [], "0", 0
    for ch in flat:
        if ch == current:
            run += 1
        else:
            counts.append(run)
            current, run = ch, 1
    counts.append(run)
    return ", ".join(str(c) for c in counts)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("task", "expected"),
    [
        # A 4×3 block at left 12 + 2, top 10 + 1 of a 100×80 image: pixels x 14..17, y 11..13.
        ("detect", [("blob", "box", [0.16, 0.1562, 0.04, 0.0375])]),
        # Traced through the pixel centres (OpenCV's contour).
        (
            "segment",
            [("blob", "polygon", [0.14, 0.1375, 0.14, 0.1625, 0.17, 0.1625, 0.17, 0.1375])],
        ),
    ],
)
def test_mask_rle_is_traced(team, tmp_path, task, expected):
    rows = ["000000", "001111", "001111", "001111", "000000"]
    mask = (
        f'<mask label="blob" source="manual" occluded="0" rle="{_rle(rows)}" left="12" top="10" '
        'width="6" height="5" z_order="0"/>'
    )
    dataset, imp = _import(team, _shapes_export(tmp_path, mask, _label("blob", "mask")), task=task)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert _labels(dataset) == {"a.jpg": expected}


@pytest.mark.django_db
def test_polygon_polyline_ellipse_cuboid_in_segment(team, tmp_path):
    body = (
        '<polygon label="roof" occluded="0" points="10,8;50,8;50,40" z_order="2"/>'
        '<polyline label="roof" points="1,1;5,5;9,1" z_order="0"/>'
        '<cuboid label="roof" xtl1="1" ytl1="1" xbl1="1" ybl1="5" xtr1="5" ytr1="1" xbr1="5" '
        'ybr1="5" xtl2="2" ytl2="2" xbl2="2" ybl2="6" xtr2="6" ytr2="2" xbr2="6" ybr2="6"/>'
        '<box label="door" occluded="1" xtl="0" ytl="0" xbr="10" ybr="8" z_order="1"/>'
    )
    dataset, imp = _import(
        team, _shapes_export(tmp_path, body, _label("roof") + _label("door") + _label("sky")),
        task="segment",
    )  # fmt: skip
    assert [c.name for c in dataset.classes.order_by("index")] == ["roof", "door", "sky"]
    # Kept in CVAT's z_order: the door (1) under the roof (2).
    assert _labels(dataset) == {
        "a.jpg": [
            ("door", "box", [0.05, 0.05, 0.1, 0.1]),
            ("roof", "polygon", [0.1, 0.1, 0.5, 0.1, 0.5, 0.5]),
        ]
    }
    reasons = {f: r for f, r, _ in _skipped(imp)}
    assert reasons["annotations.xml image images/a.jpg polyline 2"] == (
        "polyline shapes are not imported: Kestrel has no line labels"
    )
    assert (
        "cuboid shapes are not imported" in reasons["annotations.xml image images/a.jpg cuboid 3"]
    )
    assert any("1 shapes marked occluded" in n for n in imp.report["notes"])


SKELETON_LABELS = (
    _label("person", "skeleton")
    + _label("nose", "points", "person")
    + _label("left_eye", "points", "person")
    + _label("right_eye", "points", "person")
)
SKELETON = (
    '<skeleton label="person" source="manual" z_order="0">'
    '<points label="left_eye" occluded="1" outside="0" points="40,30"/>'
    '<points label="nose" occluded="0" outside="0" points="50,20"/>'
    '<points label="right_eye" occluded="0" outside="1" points="60,30"/>'
    "</skeleton>"
)


@pytest.mark.django_db
def test_skeleton_is_keypoints_in_the_declared_order(team, tmp_path):
    dataset, imp = _import(team, _shapes_export(tmp_path, SKELETON, SKELETON_LABELS), task="pose")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    dataset.refresh_from_db()
    assert dataset.keypoint_shape == [3, 3]
    assert [c.name for c in dataset.classes.order_by("index")] == ["person"]
    # nose visible (2), left_eye occluded (1), right_eye outside (0 at 0, 0); the box is the one
    # around the points that are there.
    assert _labels(dataset) == {
        "a.jpg": [
            ("person", "keypoints",
             [0.45, 0.3125, 0.1, 0.125, 0.5, 0.25, 2.0, 0.4, 0.375, 1.0, 0.0, 0.0, 0.0])
        ]
    }  # fmt: skip


@pytest.mark.django_db
def test_skeleton_in_a_detect_dataset_is_refused_by_name(team, tmp_path):
    dataset, imp = _import(team, _shapes_export(tmp_path, SKELETON, SKELETON_LABELS))
    assert imp.report["labels_imported"] == 0
    assert any(
        "keypoints are imported into a pose dataset" in r
        for _, r, k in _skipped(imp)
        if k == "label"
    )
    assert imp.report["warning"].startswith("Images were imported, but none of the")


@pytest.mark.django_db
def test_tags_are_image_classes(team, tmp_path):
    body = '<tag label="night" source="manual"/>'
    dataset, imp = _import(
        team, _shapes_export(tmp_path, body, _label("day", "tag") + _label("night", "tag")),
        task="classify",
    )  # fmt: skip
    assert [c.name for c in dataset.classes.order_by("index")] == ["day", "night"]
    assert _labels(dataset) == {"a.jpg": [("night", "tag", [])]}


# --- almost CVAT: never silent --------------------------------------------------------------------


@pytest.mark.django_db
def test_cvat_root_without_images_or_tracks_is_reported(team, tmp_path):
    xml = _xml("", _label("car"))
    files = {"annotations.xml": xml, "images/a.jpg": jpeg_bytes()}
    dataset, imp = _import(team, zip_of(files, tmp_path / "x.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert ("annotations.xml", "taken for CVAT XML, but it has no <image> and no <track>",
            "label_file") in _skipped(imp)  # fmt: skip
    assert imp.report["warning"]


@pytest.mark.django_db
def test_image_named_in_the_xml_but_not_uploaded(team, tmp_path):
    xml = _xml(
        '<image id="0" name="gone.jpg" width="10" height="10"><box label="car" xtl="1" ytl="1" '
        'xbr="5" ybr="5"/></image><image id="1" name="a.jpg" width="64" height="48"/>'
    )
    files = {"annotations.xml": xml, "images/a.jpg": jpeg_bytes()}
    dataset, imp = _import(team, zip_of(files, tmp_path / "x.zip"))
    assert ("annotations.xml image gone.jpg", "not in the upload (1 shapes on it not imported)",
            "no_image") in _skipped(imp)  # fmt: skip


@pytest.mark.django_db
def test_an_entity_bomb_is_refused_not_expanded(team, tmp_path):
    lol = "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 9))
    xml = (
        f'<?xml version="1.0"?><!DOCTYPE annotations [<!ENTITY l0 "lol">{lol}]>'
        '<annotations><version>1.1</version><image id="0" name="a.jpg" width="64" height="48">'
        '<tag label="&l8;"/></image></annotations>'
    ).encode()
    files = {"annotations.xml": xml, "images/a.jpg": jpeg_bytes()}
    dataset, imp = _import(team, zip_of(files, tmp_path / "x.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    kind, reason = next((k, r) for f, r, k in _skipped(imp) if f == "annotations.xml")
    assert kind == "label_file" and reason.startswith("unreadable XML (EntitiesForbidden")
    assert imp.report["labels_imported"] == 0
