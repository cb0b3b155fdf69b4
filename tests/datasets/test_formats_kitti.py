"""KITTI object labels and Open Images CSV, each built small in its own documented layout and
imported end to end, then the real exports in fixtures/ (Datumaro's test assets): every image
row in its split, every valid label at its exact place, and what was left out listed with a
reason."""

import itertools
from pathlib import Path

import pytest

from datasets.models import Image, ImportStatus, Label
from datasets.services.tool_formats.kitti import claim_kitti
from datasets.services.tool_formats.openimages import claim_openimages
from tests.datasets.archives import jpeg_bytes, zip_folder, zip_of
from tests.datasets.test_ingest import _import

FIXTURES = Path(__file__).parent / "fixtures"
_colors = itertools.count(1)


def _jpeg(width=64, height=48) -> bytes:
    """A JPEG unlike every other one made here (byte-identical images are another matter)."""
    n = next(_colors)
    return jpeg_bytes(width, height, color=((n * 37) % 256, (n * 91) % 256, (n * 13) % 256))


def _rows(dataset) -> dict[str, tuple[str, int]]:
    return {i.filename: (i.split, i.label_count) for i in Image.objects.filter(dataset=dataset)}


def _skipped(imp) -> dict[str, tuple[str, str]]:
    return {s["file"]: (s["kind"], s["reason"]) for s in imp.report["skipped"]}


def _labels(dataset, filename) -> list[tuple[str, str, list[float]]]:
    rows = Label.objects.filter(image__dataset=dataset, image__filename=filename).order_by("pk")
    return [(lb.dataset_class.name, lb.kind, lb.data) for lb in rows]


def _reader(files: dict[str, bytes]):
    return lambda name, limit: files[name]


# --- KITTI ----------------------------------------------------------------------------------------

CAR = b"Car 0.00 0 -1.57 16.00 12.00 48.00 36.00 1.50 1.60 3.90 1.00 1.50 20.00 -1.56\n"
PEDESTRIAN = b"Pedestrian 0.50 1 0.20 0.00 0.00 8.00 24.00 1.70 0.60 0.80 -2.00 1.60 10.00 0.10\n"
DONT_CARE = b"DontCare -1 -1 -10 50.00 10.00 60.00 20.00 -1 -1 -1 -1000 -1000 -1000 -10\n"


def _kitti_files() -> dict[str, bytes]:
    return {
        "kitti/training/image_2/000000.png": _jpeg(),
        "kitti/training/image_2/000001.png": _jpeg(),
        "kitti/training/image_2/000002.png": _jpeg(),
        "kitti/testing/image_2/000100.png": _jpeg(),
        "kitti/training/label_2/000000.txt": CAR
        + PEDESTRIAN
        + DONT_CARE
        + b"Car 0.00 0 -1.57 16.00 12.00 48.00 36.00\n",  # fmt: skip
        # with a score (16 columns); then a box whose right is left of its left; then a box
        # past the 64-pixel-wide image
        "kitti/training/label_2/000001.txt": b"Cyclist 0 0 0 10 10 20 20 1 1 1 1 1 1 1 0.9\n"
        b"Car 0 0 0 30 10 20 20 1 1 1 1 1 1 1\n"
        b"Car 0 0 0 40 10 90 20 1 1 1 1 1 1 1\n",
        "kitti/training/label_2/000002.txt": b"",  # an image without objects
        "kitti/training/label_2/000009.txt": CAR,  # its image was not uploaded
        "kitti/training/calib/000000.txt": b"P0: 7.2e+02 0 6.0e+02 0 0 7.2e+02 1.7e+02 0 0 0 1 0\n",
        "kitti/ImageSets/val.txt": b"000001\n",
    }


@pytest.mark.django_db
def test_kitti_object_labels(team, tmp_path):
    dataset, imp = _import(team, zip_of(_kitti_files(), tmp_path / "kitti.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    report = imp.report
    assert report["format"] == "kitti"
    assert [c.name for c in dataset.classes.order_by("index")] == ["Car", "Cyclist", "Pedestrian"]
    assert _rows(dataset) == {
        "000000.png": ("train", 2),
        "000001.png": ("val", 1),  # ImageSets/val.txt
        "000002.png": ("train", 0),
        "000100.png": ("test", 0),  # testing/
    }
    # pixels normalised by the real image's size (64 × 48), the file giving none
    assert _labels(dataset, "000000.png") == [
        ("Car", "box", pytest.approx([32 / 64, 24 / 48, 32 / 64, 24 / 48])),
        ("Pedestrian", "box", pytest.approx([4 / 64, 12 / 48, 8 / 64, 24 / 48])),
    ]
    assert _labels(dataset, "000001.png") == [
        ("Cyclist", "box", pytest.approx([15 / 64, 15 / 48, 10 / 64, 10 / 48]))
    ]
    skipped = _skipped(imp)
    assert skipped["kitti/training/label_2/000000.txt:4"][0] == "label"
    assert (
        "not a KITTI object line (8 columns)" in skipped["kitti/training/label_2/000000.txt:4"][1]
    )
    assert skipped["kitti/training/label_2/000001.txt:2"] == (
        "label",
        "box of 'Car': right or bottom not past left or top",
    )
    assert skipped["kitti/training/image_2/000001.png"] == (
        "label",
        "box outside the 64×48 image",
    )
    assert skipped["kitti/training/label_2/000009.txt"][0] == "no_image"
    assert skipped["kitti/training/calib/000000.txt"] == (
        "file",
        "KITTI camera calibration, not labels",
    )
    assert "kitti/ImageSets/val.txt" not in skipped  # read for the splits
    # an image without objects: its empty file is said to hold no label, not refused
    assert skipped["kitti/training/label_2/000002.txt"] == (
        "empty_label_file",
        "read as KITTI: it holds no label",
    )
    notes = report["notes"]
    assert notes[0].startswith("3 KITTI label files read")
    assert any(n.startswith("1 DontCare region not imported") for n in notes)
    assert "1 image put in val by kitti/ImageSets/val.txt" in notes


@pytest.mark.django_db
def test_kitti_boxes_become_oriented_boxes_in_an_obb_dataset(team, tmp_path):
    files = {"image_2/a.jpg": _jpeg(), "label_2/a.txt": CAR}
    dataset, imp = _import(team, zip_of(files, tmp_path / "kitti.zip"), task="obb")
    assert imp.report["format"] == "kitti"
    corners = [16 / 64, 12 / 48, 48 / 64, 12 / 48, 48 / 64, 36 / 48, 16 / 64, 36 / 48]
    assert _labels(dataset, "a.jpg") == [("Car", "obb", pytest.approx(corners))]


@pytest.mark.django_db
def test_kitti_in_a_pose_dataset_refuses_each_object_with_a_reason(team, tmp_path):
    files = {"image_2/a.jpg": _jpeg(), "label_2/a.txt": CAR + PEDESTRIAN}
    dataset, imp = _import(team, zip_of(files, tmp_path / "kitti.zip"), task="pose")
    assert imp.report["format"] == "kitti"
    assert imp.report["labels_imported"] == 0
    skipped = _skipped(imp)
    for place in ("label_2/a.txt:1", "label_2/a.txt:2"):
        assert skipped[place] == (
            "label",
            "KITTI objects have no keypoints, which a pose dataset's labels need",
        )
    assert imp.report["warning"]


@pytest.mark.django_db
def test_kitti_in_any_folder_of_txt_files_paired_by_name(team, tmp_path):
    # Not label_2/: KITTI's columns are what make a folder of .txt files KITTI. Two images
    # share a stem: the one in the folder beside the labels is not guessed, it is refused.
    files = {
        "photos/a.jpg": _jpeg(),
        "photos/b.jpg": _jpeg(),
        "other/b.jpg": _jpeg(),
        "annotations/a.txt": b"traffic light 0 0 0 8 8 16 24 1 1 1 1 1 1 1\n",  # a spaced name
        "annotations/b.txt": CAR,
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "kitti.zip"))
    assert imp.report["format"] == "kitti"
    assert _labels(dataset, "a.jpg") == [
        ("traffic light", "box", pytest.approx([12 / 64, 16 / 48, 8 / 64, 16 / 48]))
    ]
    kind, reason = _skipped(imp)["annotations/b.txt"]
    assert kind == "label_file" and reason.startswith("2 images are named like it")


@pytest.mark.django_db
def test_kitti_real_export(team, tmp_path):
    """Datumaro's KITTI detection test export (fixtures/kitti/README.md)."""
    archive = zip_folder(FIXTURES / "kitti", tmp_path / "kitti.zip")
    dataset, imp = _import(team, archive)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    report = imp.report
    assert report["format"] == "kitti"
    assert report["classes"] == ["Truck", "Van"]
    assert _rows(dataset) == {"000030_10.png": ("train", 2), "000030_11.png": ("train", 3)}
    # "Truck 1.0 0 -1 0 1 2 3 ...": left 0, top 1, right 2, bottom 3 of a 10 × 10 image
    assert _labels(dataset, "000030_10.png") == [
        ("Truck", "box", pytest.approx([0.1, 0.2, 0.2, 0.2])),
        ("Van", "box", pytest.approx([0.05, 0.65, 0.1, 0.3])),
    ]
    assert report["labels_per_class"] == {"Truck": 1, "Van": 4}
    assert [s for s in report["skipped"] if s["kind"] != "file"] == []  # README.md is a file


def test_kitti_claim_is_strict():
    yolo = {"labels/train/a.txt": b"0 0.5 0.5 0.2 0.2\n", "images/train/a.jpg": b""}
    assert claim_kitti(sorted(yolo), _reader(yolo)) == []
    dota = {"labelTxt/a.txt": b"imagesource:GoogleEarth\ngsd:0.1\n1 2 3 4 5 6 7 8 plane 0\n"}
    assert claim_kitti(sorted(dota), _reader(dota)) == []
    calib = {"calib/000000.txt": b"P0: 1 0 0 0 0 1 0 0 0 0 1 0\nR0_rect: 1 0 0 0 1 0 0 0 1\n"}
    assert claim_kitti(sorted(calib), _reader(calib)) == []
    classes = {"classes.txt": b"car\npedestrian\n"}
    assert claim_kitti(sorted(classes), _reader(classes)) == []
    # KITTI tracking: frame and track id first (a number), 17 columns: not the object format
    tracking = {
        "label_02/0000.txt": b"0 -1 DontCare -1 -1 -10 219 188 245 218 -1 -1 -1 -1 -1 -1 -1\n"
    }
    assert claim_kitti(sorted(tracking), _reader(tracking)) == []
    kitti = {"label_2/a.txt": CAR, "label_2/b.txt": b"", "calib/a.txt": b"P0: 1 2 3\n"}
    assert claim_kitti(sorted(kitti), _reader(kitti)) == ["label_2/a.txt", "label_2/b.txt"]


@pytest.mark.django_db
def test_a_yolo_dataset_is_not_taken_for_kitti(team, tmp_path):
    files = {
        "data.yaml": b"names: ['car']\ntrain: images/train\nval: images/train\n",
        "images/train/a.jpg": _jpeg(),
        "labels/train/a.txt": b"0 0.5 0.5 0.2 0.2\n",
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "yolo.zip"))
    assert imp.report["format"] == "yolo"
    assert _labels(dataset, "a.jpg") == [("car", "box", pytest.approx([0.5, 0.5, 0.2, 0.2]))]


# --- Open Images ----------------------------------------------------------------------------------

BOX_HEADER = (
    b"ImageID,Source,LabelName,Confidence,XMin,XMax,YMin,YMax,IsOccluded,IsTruncated,IsGroupOf,"
    b"IsDepiction,IsInside\n"
)


@pytest.mark.django_db
def test_open_images_boxes(team, tmp_path):
    files = {
        "oidv7-class-descriptions-boxable.csv": b"LabelName,DisplayName\n/m/01yrx,Cat\n"
        b"/m/0bt9lr,Dog\n/m/0k4j,Car\n",
        "validation-annotations-bbox.csv": BOX_HEADER
        + b"000a1249af2bc5f0,xclick,/m/0bt9lr,1,0.25,0.75,0.1,0.5,0,0,0,0,0\n"
        b"000a1249af2bc5f0,xclick,/m/01yrx,1,0,0.5,0.5,1,1,0,0,0,0\n"
        b"000b3f0bd1d21b8e,activemil,/m/01yrx,1,0.1,0.3,0.2,0.4,0,0,1,0,0\n"
        b"000b3f0bd1d21b8e,xclick,/m/01yrx,1,0.6,0.4,0.2,0.4,0,0,0,0,0\n"  # XMax before XMin
        b"000b3f0bd1d21b8e,xclick,/m/01yrx,1,0.6,1.4,0.2,0.4,0,0,0,0,0\n"  # past the image
        b"0fffffffffffffff,xclick,/m/0k4j,1,0.1,0.2,0.1,0.2,0,0,0,0,0\n"  # image not uploaded
        b"0fffffffffffffff,xclick,/m/0k4j,1,0.3,0.4,0.1,0.2,0,0,0,0,0\n"
        b"000b3f0bd1d21b8e,xclick,/m/0ggggg,1,0.1,0.2,0.1,0.2,0,0,0,0,0\n",  # an id not described
        "validation/000a1249af2bc5f0.jpg": _jpeg(),
        "validation/000b3f0bd1d21b8e.jpg": _jpeg(),
        "train/00c0ffee00c0ffee.jpg": _jpeg(),
        "notes.csv": b"when,who,what\n2024,me,downloaded\n",  # no Open Images header
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "oi.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    report = imp.report
    assert report["format"] == "openimages"
    # only the classes used, sorted by name; an id no file describes keeps the id as its name
    assert report["classes"] == ["/m/0ggggg", "Cat", "Dog"]
    assert _rows(dataset) == {
        "000a1249af2bc5f0.jpg": ("val", 2),
        "000b3f0bd1d21b8e.jpg": ("val", 2),
        "00c0ffee00c0ffee.jpg": ("train", 0),
    }
    assert _labels(dataset, "000a1249af2bc5f0.jpg") == [
        ("Dog", "box", pytest.approx([0.5, 0.3, 0.5, 0.4])),
        ("Cat", "box", pytest.approx([0.25, 0.75, 0.5, 0.5])),
    ]
    skipped = _skipped(imp)
    assert skipped["validation-annotations-bbox.csv:5"] == (
        "label",
        "label box whose XMax is not past its XMin, or YMax past YMin",
    )
    assert skipped["validation-annotations-bbox.csv:6"][1].startswith("label box outside 0..1")
    assert skipped["validation-annotations-bbox.csv:7"] == (
        "no_image",
        "image 0fffffffffffffff is not in the upload (2 rows)",
    )
    kind, reason = skipped["notes.csv"]
    assert kind == "label_file" and "Open Images CSV" in reason and "'when,who,what'" in reason
    notes = report["notes"]
    assert notes[0].startswith("1 Open Images CSV read (validation-annotations-bbox.csv)")
    assert "class names from oidv7-class-descriptions-boxable.csv" in notes[0]
    assert any(n.startswith("1 label id in no class descriptions file") for n in notes)
    assert any(n.startswith("1 box around a group of objects") for n in notes)


@pytest.mark.django_db
def test_open_images_as_fiftyone_downloads_it(team, tmp_path):
    # fiftyone's zoo layout: <split>/labels/detections.csv, <split>/metadata/classes.csv,
    # <split>/data/<ImageID>.jpg; the split is the folder's.
    files = {
        "validation/labels/detections.csv": BOX_HEADER
        + b"0001eeaf4aed83f9,xclick,/m/0cmf2,1,0.022673,0.964201,0.071038,0.800546,0,0,0,0,0\n",
        "validation/metadata/classes.csv": b"/m/0cmf2,Airplane\n/m/0k4j,Car\n",
        "validation/metadata/hierarchy.json": b'{"LabelName": "/m/0bl9f", "Subcategory": []}',
        "oidv6-classes-trainable.txt": b"/m/0cmf2\n/m/0k4j\n",
        "validation/data/0001eeaf4aed83f9.jpg": _jpeg(),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "oi.zip"))
    assert imp.report["format"] == "openimages"
    assert _rows(dataset) == {"0001eeaf4aed83f9.jpg": ("val", 1)}
    box = [0.493437, 0.435792, 0.941528, 0.729508]
    assert _labels(dataset, "0001eeaf4aed83f9.jpg") == [("Airplane", "box", pytest.approx(box))]
    skipped = _skipped(imp)
    assert skipped["validation/metadata/hierarchy.json"][0] == "file"
    assert skipped["oidv6-classes-trainable.txt"][0] == "file"


@pytest.mark.django_db
def test_open_images_boxes_in_an_obb_dataset(team, tmp_path):
    files = {
        "test-annotations-bbox.csv": BOX_HEADER
        + b"abc,xclick,/m/0k4j,1,0.25,0.75,0.1,0.5,0,0,0,0,0\n",
        "class-descriptions-boxable.csv": b"/m/0k4j,Car\n",
        "abc.jpg": _jpeg(),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "oi.zip"), task="obb")
    assert _rows(dataset) == {"abc.jpg": ("test", 1)}
    corners = [0.25, 0.1, 0.75, 0.1, 0.75, 0.5, 0.25, 0.5]
    assert _labels(dataset, "abc.jpg") == [("Car", "obb", pytest.approx(corners))]


@pytest.mark.django_db
def test_open_images_image_labels_in_a_classify_dataset(team, tmp_path):
    files = {
        # V4 to V6: the class list has no header
        "class-descriptions-boxable.csv": b"/m/01yrx,Cat\n/m/0bt9lr,Dog\n/m/0k4j,Car\n",
        "train-annotations-human-imagelabels-boxable.csv": b"ImageID,Source,LabelName,Confidence\n"
        b"aaa,verification,/m/01yrx,1\n"
        b"aaa,verification,/m/01yrx,1\n"  # the same label twice: one tag
        b"aaa,verification,/m/0k4j,0\n"  # verified absent: not a class
        b"bbb,crowdsource-verification,/m/0bt9lr,1\n"
        b"bbb,verification,/m/0k4j,1\n"
        b"bbb,machine,/m/01yrx,0.7\n"  # a machine-generated guess
        b"bbb,machine,/m/0k4j,0.4\n",
        "train-annotations-bbox.csv": BOX_HEADER
        + b"aaa,xclick,/m/01yrx,1,0.1,0.2,0.1,0.2,0,0,0,0,0\n",
        "images/aaa.jpg": _jpeg(),
        "images/bbb.jpg": _jpeg(),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "oi.zip"), task="classify")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    report = imp.report
    assert report["format"] == "openimages"
    assert report["classes"] == ["Car", "Cat", "Dog"]
    assert _rows(dataset) == {"aaa.jpg": ("train", 1), "bbb.jpg": ("train", 2)}
    assert _labels(dataset, "aaa.jpg") == [("Cat", "tag", [])]
    assert sorted(_labels(dataset, "bbb.jpg")) == [("Car", "tag", []), ("Dog", "tag", [])]
    skipped = _skipped(imp)
    assert skipped["train-annotations-human-imagelabels-boxable.csv:7"][0] == "label"
    assert skipped["train-annotations-human-imagelabels-boxable.csv:7"][1].startswith(
        "2 image labels from here on with a Confidence between 0 and 1 not imported"
    )
    assert skipped["train-annotations-bbox.csv"] == (
        "label_file",
        "1 box not imported: a classify dataset takes image-level labels (…-human-imagelabels.csv)",
    )
    notes = report["notes"]
    assert any(n.startswith("1 negative image label (Confidence 0") for n in notes)
    assert any(n.startswith("1 image with more than one image-level class") for n in notes)


@pytest.mark.django_db
@pytest.mark.parametrize("task", ["detect", "classify"])
def test_open_images_real_export(team, tmp_path, task):
    """Datumaro's Open Images V6 test export (fixtures/openimages/README.md): boxes for detect,
    image-level labels for classify; the other files each named with the reason."""
    archive = zip_folder(FIXTURES / "openimages", tmp_path / "oi.zip")
    dataset, imp = _import(team, archive, task=task)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    report = imp.report
    assert report["format"] == "openimages"
    skipped = _skipped(imp)
    assert skipped["masks/train/b_m0_01234567.png"][0] == "image"  # a mask, not a photo
    assert skipped["annotations/train-annotations-object-segmentation.csv"][0] == "label_file"
    assert skipped["annotations/image_ids_and_rotation.csv"][0] == "file"
    assert skipped["annotations/bbox_labels_600_hierarchy.json"][0] == "file"
    if task == "detect":
        assert report["classes"] == ["Generic label #0", "Generic label #3"]
        assert _rows(dataset) == {
            "a.jpg": ("train", 0),
            "b.jpg": ("train", 1),
            "c.jpg": ("test", 1),
            "d.png": ("val", 0),
        }
        # b,xclick,/m/0,1,0.2,1,0.3,0.5 and c,xclick,/m/3,0.7,0.7,0.8,0,0.5
        assert _labels(dataset, "b.jpg") == [
            ("Generic label #0", "box", pytest.approx([0.6, 0.4, 0.8, 0.2]))
        ]
        assert _labels(dataset, "c.jpg") == [
            ("Generic label #3", "box", pytest.approx([0.75, 0.25, 0.1, 0.5]))
        ]
        for name in ("oidv6-train", "test"):
            kind, reason = skipped[f"annotations/{name}-annotations-human-imagelabels.csv"]
            assert kind == "label_file" and "read into a classify dataset" in reason
    else:
        assert report["classes"] == ["Generic label #0", "Generic label #1", "Generic label #3"]
        assert _rows(dataset) == {
            "a.jpg": ("train", 1),
            "b.jpg": ("train", 0),  # its one label is negative
            "c.jpg": ("test", 2),
            "d.png": ("val", 0),
        }
        assert _labels(dataset, "a.jpg") == [("Generic label #0", "tag", [])]


def test_open_images_claim_is_strict():
    other = {
        "labels.csv": b"filename,width,height,class,xmin,ymin,xmax,ymax\na.jpg,1,1,cat,0,0,1,1\n",
        "via.csv": b"filename,file_size,file_attributes,region_count,region_id,"
        b"region_shape_attributes,region_attributes\n",
        "class-descriptions-boxable.csv": b"/m/01yrx,Cat\n",  # names alone are no annotations
    }
    assert claim_openimages(sorted(other), _reader(other)) == []
    files = {**other, "x-annotations-bbox.csv": BOX_HEADER}
    assert claim_openimages(sorted(files), _reader(files)) == [
        "class-descriptions-boxable.csv",
        "x-annotations-bbox.csv",
    ]
