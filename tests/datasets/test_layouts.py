"""Layouts other tools export, each built small in its own shape and imported end to end: every
image row and every valid label arrives in its split, and what was left out is listed by kind."""

import itertools
import json

import pytest

from datasets.models import Image, ImportStatus, Label
from tests.datasets.archives import jpeg_bytes, zip_of
from tests.datasets.test_ingest import _import

_colors = itertools.count(1)


def _jpeg(width=64, height=48) -> bytes:
    """A JPEG unlike every other one made here (byte-identical images are another matter)."""
    n = next(_colors)
    return jpeg_bytes(width, height, color=((n * 37) % 256, (n * 91) % 256, (n * 13) % 256))


def _rows(dataset) -> dict[str, tuple[str, int]]:
    return {i.filename: (i.split, i.label_count) for i in Image.objects.filter(dataset=dataset)}


def _skipped(imp) -> dict[str, str]:
    return {s["file"]: s["kind"] for s in imp.report["skipped"]}


# --- CVAT YOLO 1.1 ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_cvat_yolo_1_1_export(team, tmp_path):
    files = {
        "obj.names": b"kestrel\nhawk\n",
        "obj.data": b"classes = 2\ntrain = data/train.txt\nvalid = data/valid.txt\n"
        b"names = data/obj.names\nbackup = backup/\n",
        "train.txt": b"data/obj_train_data/a.jpg\ndata/obj_train_data/b.jpg\n"
        b"data/obj_train_data/missing.jpg\n",
        "valid.txt": b"data/obj_valid_data/c.jpg\n",
        "obj_train_data/a.jpg": _jpeg(),
        "obj_train_data/a.txt": b"0 0.5 0.5 0.2 0.2\n1 0.3 0.3 0.1 0.1\n",
        "obj_train_data/b.jpg": _jpeg(),
        "obj_train_data/b.txt": b"1 0.5 0.5 0.4 0.4\n7 0.5 0.5 0.1 0.1\n",
        "obj_train_data/orphan.txt": b"0 0.5 0.5 0.1 0.1\n",
        "obj_valid_data/c.jpg": _jpeg(),
        "obj_valid_data/c.txt": b"0 0.2 0.2 0.1 0.1\n",
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "cvat.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    report = imp.report
    assert report["format"] == "cvat-yolo"
    assert [c.name for c in dataset.classes.order_by("index")] == ["kestrel", "hawk"]
    assert _rows(dataset) == {"a.jpg": ("train", 2), "b.jpg": ("train", 1), "c.jpg": ("val", 1)}
    assert report["labels_per_class"] == {"kestrel": 2, "hawk": 2}
    skipped = _skipped(imp)
    assert skipped["obj_train_data/b.txt:2"] == "label"
    assert skipped["obj_train_data/orphan.txt"] == "no_image"
    assert skipped["data/obj_train_data/missing.jpg"] == "no_image"
    assert any("CVAT YOLO 1.1" in n for n in report["notes"])
    assert any("class names read from obj.names" in n for n in report["notes"])


# --- Roboflow exports whose label folders do not mirror the image folders -----------------------


@pytest.mark.django_db
def test_roboflow_labels_paired_by_stem_in_the_nearest_labels_tree(team, tmp_path):
    files = {
        "export/data.yaml": b"train: ../data/images/train\nval: ../data/images/val\n"
        b"names: ['cat', 'dog']\n",
        "export/data/images/train/x.jpg": _jpeg(),
        "export/data/images/train/y.jpg": _jpeg(),
        "export/data/images/train/dup.jpg": _jpeg(),
        "export/data/images/val/z.jpg": _jpeg(),
        "export/data/labels/train-labels/x.txt": b"0 0.5 0.5 0.2 0.2\n",
        "export/data/labels/train-labels/y.txt": b"1 0.5 0.5 0.2 0.2\n1 0.1 0.1 0.1 0.1\n",
        "export/data/labels/val-labels/z.txt": b"0 0.5 0.5 0.3 0.3\n",
        # one stem, two label files, neither in a folder naming the image's split: not guessed
        "export/data/labels/a/dup.txt": b"0 0.5 0.5 0.3 0.3\n",
        "export/data/labels/b/dup.txt": b"1 0.5 0.5 0.3 0.3\n",
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "roboflow.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert _rows(dataset) == {
        "x.jpg": ("train", 1),
        "y.jpg": ("train", 2),
        "dup.jpg": ("train", 0),
        "z.jpg": ("val", 1),
    }
    skipped = _skipped(imp)
    assert skipped["export/data/labels/a/dup.txt"] == "label_file"
    assert skipped["export/data/labels/b/dup.txt"] == "label_file"
    notes = imp.report["notes"]
    assert any(
        "2 label files paired by image name in export/data/labels/train-labels/" in n for n in notes
    ), notes
    assert any("../data/images/train read as export/data/images/train" in n for n in notes)


@pytest.mark.django_db
def test_roboflow_data_yaml_paths_outside_the_archive_read_from_its_root(team, tmp_path):
    files = {
        "myset/data.yaml": b"train: ../train/images\nval: ../valid/images\n"
        b"test: ../test/images\nnames: ['cat']\n",
        "myset/train/images/a.jpg": _jpeg(),
        "myset/train/labels/a.txt": b"0 0.5 0.5 0.2 0.2\n",
        "myset/valid/images/b.jpg": _jpeg(),
        "myset/valid/labels/b.txt": b"0 0.5 0.5 0.2 0.2\n",
        "myset/test/images/c.jpg": _jpeg(),
        "myset/test/labels/c.txt": b"0 0.5 0.5 0.2 0.2\n",
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "rf.zip"))
    assert _rows(dataset) == {"a.jpg": ("train", 1), "b.jpg": ("val", 1), "c.jpg": ("test", 1)}
    assert imp.report["skipped"] == []
    assert any("../valid/images read as myset/valid/images" in n for n in imp.report["notes"])


# --- split names and Pascal VOC image sets ------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("folder", "split"),
    [
        ("valid", "val"),
        ("validate", "val"),
        ("validation", "val"),
        ("val", "val"),
        ("test", "test"),
        ("testing", "test"),
        ("training", "train"),
    ],
)
def test_split_folder_names(team, tmp_path, folder, split):
    files = {
        f"images/{folder}/a.jpg": _jpeg(),
        f"labels/{folder}/a.txt": b"0 0.5 0.5 0.2 0.2\n",
        "images/train/b.jpg": _jpeg(),
        "labels/train/b.txt": b"0 0.5 0.5 0.2 0.2\n",
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "s.zip"))
    assert _rows(dataset) == {"a.jpg": (split, 1), "b.jpg": ("train", 1)}


def _voc(name: str, w=64, h=48, boxes=()) -> bytes:
    objects = "".join(
        f"<object><name>{c}</name><bndbox><xmin>{a}</xmin><ymin>{b}</ymin>"
        f"<xmax>{x}</xmax><ymax>{y}</ymax></bndbox></object>"
        for c, (a, b, x, y) in boxes
    )
    return (
        f"<annotation><filename>{name}</filename><size><width>{w}</width>"
        f"<height>{h}</height><depth>3</depth></size>{objects}</annotation>"
    ).encode()


@pytest.mark.django_db
def test_voc_image_sets_decide_the_splits_and_zero_area_boxes_are_refused(team, tmp_path):
    root = "VOC2012/"
    files = {
        f"{root}ImageSets/Main/train.txt": b"img1\nimg2\n",
        f"{root}ImageSets/Main/val.txt": b"img3\n",
        f"{root}ImageSets/Main/trainval.txt": b"img1\nimg2\nimg3\n",
        f"{root}ImageSets/Main/test.txt": b"img4\n",
        f"{root}ImageSets/Main/cat_train.txt": b"img1  1\nimg2 -1\n",
    }
    boxes = {
        "img1": [("cat", (10, 10, 30, 30))],
        "img2": [("cat", (5, 5, 20, 20)), ("dog", (10, 10, 10, 30))],  # zero width
        "img3": [("dog", (1, 1, 40, 40)), ("dog", (3, 8, 20, 8))],  # zero height
        "img4": [("cat", (2, 2, 60, 40))],
        "img5": [("cat", (2, 2, 20, 20))],  # in no list: keeps its folder's split
    }
    for stem, objs in boxes.items():
        files[f"{root}JPEGImages/{stem}.jpg"] = _jpeg()
        files[f"{root}Annotations/{stem}.xml"] = _voc(f"{stem}.jpg", boxes=objs)
    dataset, imp = _import(team, zip_of(files, tmp_path / "voc.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["format"] == "voc"
    assert _rows(dataset) == {
        "img1.jpg": ("train", 1),
        "img2.jpg": ("train", 1),
        "img3.jpg": ("val", 1),
        "img4.jpg": ("test", 1),
        "img5.jpg": ("train", 1),
    }
    refused = [s for s in imp.report["skipped"] if s["kind"] == "label"]
    assert len(refused) == 2
    assert all("zero-area box" in s["reason"] for s in refused)
    assert _skipped(imp)[f"{root}ImageSets/Main/cat_train.txt"] == "file"
    assert any("keep the split of their folder" in n for n in imp.report["notes"])


# --- COCO supercategories -----------------------------------------------------------------------


@pytest.mark.django_db
def test_coco_categories_only_naming_a_supercategory_are_not_classes(team, tmp_path):
    coco = {
        "images": [{"id": 1, "file_name": "a.jpg", "width": 64, "height": 48}],
        "categories": [
            {"id": 1, "name": "animal", "supercategory": "none"},
            {"id": 2, "name": "cat", "supercategory": "animal"},
            {"id": 3, "name": "dog", "supercategory": "animal"},
            {"id": 4, "name": "bird", "supercategory": "animal"},  # unused, but a real class
        ],
        "annotations": [
            {"id": 1, "image_id": 1, "category_id": 2, "bbox": [1, 1, 10, 10]},
            {"id": 2, "image_id": 1, "category_id": 3, "bbox": [20, 20, 10, 10]},
        ],
    }
    files = {"train/_annotations.coco.json": json.dumps(coco).encode(), "train/a.jpg": _jpeg()}
    dataset, imp = _import(team, zip_of(files, tmp_path / "coco.zip"))
    assert [c.name for c in dataset.classes.order_by("index")] == ["cat", "dog", "bird"]
    assert _rows(dataset) == {"a.jpg": ("train", 2)}
    assert any("supercategory (animal)" in n for n in imp.report["notes"])


# --- Label Studio's YOLO export -----------------------------------------------------------------


@pytest.mark.django_db
def test_label_studio_yolo_export(team, tmp_path):
    notes = {
        "categories": [{"id": 0, "name": "kestrel"}, {"id": 1, "name": "hawk"}],
        "info": {"year": 2026, "version": "1.0", "contributor": "Label Studio"},
    }
    files = {
        "project-1/classes.txt": b"kestrel\nhawk\n",
        "project-1/notes.json": json.dumps(notes).encode(),
        "project-1/images/1a2b-a.jpg": _jpeg(),
        "project-1/images/3c4d-b.jpg": _jpeg(),
        "project-1/labels/1a2b-a.txt": b"1 0.5 0.5 0.2 0.2\n",
        "project-1/labels/3c4d-b.txt": b"0 0.5 0.5 0.2 0.2\n0 0.2 0.2 0.1 0.1\n",
        "project-1/labels/gone.txt": b"0 0.5 0.5 0.2 0.2\n",
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "ls.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert [c.name for c in dataset.classes.order_by("index")] == ["kestrel", "hawk"]
    assert _rows(dataset) == {"1a2b-a.jpg": ("train", 1), "3c4d-b.jpg": ("train", 2)}
    assert imp.report["labels_per_class"] == {"kestrel": 2, "hawk": 1}
    assert _skipped(imp) == {"project-1/labels/gone.txt": "no_image"}
    assert any("class names read from project-1/classes.txt" in n for n in imp.report["notes"])


# --- LabelMe ------------------------------------------------------------------------------------


def _labelme(image_path: str, shapes: list[dict], w=64, h=48) -> bytes:
    return json.dumps(
        {
            "version": "5.4.1",
            "flags": {},
            "shapes": shapes,
            "imagePath": image_path,
            "imageData": None,
            "imageHeight": h,
            "imageWidth": w,
        }
    ).encode()


@pytest.mark.django_db
@pytest.mark.parametrize(("task", "kind"), [("segment", "polygon"), ("detect", "box")])
def test_labelme_json_per_image(team, tmp_path, task, kind):
    rect = {"label": "cat", "points": [[8, 6], [40, 30]], "shape_type": "rectangle"}
    poly = {"label": "dog", "points": [[10, 10], [50, 10], [30, 40]], "shape_type": "polygon"}
    circle = {"label": "dog", "points": [[10, 10], [20, 20]], "shape_type": "circle"}
    outside = {"label": "cat", "points": [[8, 6], [400, 30]], "shape_type": "rectangle"}
    files = {
        "train/a.jpg": _jpeg(),
        "train/a.json": _labelme("a.jpg", [rect, poly]),
        "val/b.jpg": _jpeg(),
        "val/b.json": _labelme("..\\val\\b.jpg", [circle, outside, rect]),
        "val/c.jpg": _jpeg(),  # not labelled: imported without labels
        "val/d.json": _labelme("d.jpg", [rect]),  # its image was not uploaded
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "labelme.zip"), task=task)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["format"] == "labelme"
    assert _rows(dataset) == {"a.jpg": ("train", 2), "b.jpg": ("val", 1), "c.jpg": ("val", 0)}
    a = Label.objects.filter(image__dataset=dataset, image__filename="a.jpg")
    cat = a.get(dataset_class__name="cat")
    assert cat.kind == "box"
    assert cat.data == pytest.approx([24 / 64, 18 / 48, 32 / 64, 24 / 48])
    assert a.get(dataset_class__name="dog").kind == kind
    skipped = _skipped(imp)
    assert skipped["val/b.json shape 1"] == "label"
    assert skipped["val/b.json shape 2"] == "label"
    assert skipped["val/d.json"] == "no_image"


# --- classification folders with a class list ---------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("layout", "class_list"),
    [
        ("{split}/{cls}/{name}", ("classes.txt", b"zebra\napple\nmango\n")),
        ("{cls}/{name}", ("classes.txt", b"zebra\napple\nmango\n")),
        ("{split}/{cls}/{name}", ("data.yaml", b"names: {0: zebra, 1: apple, 2: mango}\n")),
        ("{cls}/{name}", ("data.yaml", b"names: [zebra, apple, mango]\n")),
    ],
)
def test_classification_folders_with_a_class_list(team, tmp_path, layout, class_list):
    files = {f"set/{class_list[0]}": class_list[1]}
    wanted = {}
    for split, cls, name in [
        ("train", "apple", "a.jpg"),
        ("train", "zebra", "b.jpg"),
        ("val", "apple", "c.jpg"),
        ("val", "kiwi", "d.jpg"),  # not in the list: comes after it, said in a note
    ]:
        files["set/" + layout.format(split=split, cls=cls, name=name)] = _jpeg()
        wanted[name] = (split if "{split}" in layout else "train", 1)
    dataset, imp = _import(team, zip_of(files, tmp_path / "cls.zip"), task="classify")
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert [c.name for c in dataset.classes.order_by("index")] == [
        "zebra",
        "apple",
        "mango",
        "kiwi",
    ]
    assert _rows(dataset) == wanted
    tags = dict(
        Label.objects.filter(image__dataset=dataset).values_list(
            "image__filename", "dataset_class__name"
        )
    )
    assert tags == {"a.jpg": "apple", "b.jpg": "zebra", "c.jpg": "apple", "d.jpg": "kiwi"}
    assert any("kiwi" in n for n in imp.report["notes"])
    assert imp.report["skipped"] == []


@pytest.mark.django_db
def test_cvat_obj_names_is_read_not_listed_as_unsupported(team, tmp_path):
    files = {
        "obj.names": b"kestrel\n",
        "obj.data": b"classes = 1\nnames = data/obj.names\n",
        "train.txt": b"data/obj_train_data/a.jpg\n",
        "obj_train_data/a.jpg": _jpeg(),
        "obj_train_data/a.txt": b"0 0.5 0.5 0.2 0.2\n",
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "cvat.zip"))
    assert imp.report["labels_imported"] == 1
    assert imp.report["skipped"] == []


@pytest.mark.django_db
def test_a_label_of_another_split_is_not_paired_by_stem(team, tmp_path):
    files = {
        "images/train/a.jpg": _jpeg(),
        "labels/train/a.txt": b"0 0.5 0.5 0.2 0.2\n",
        "images/val/x.jpg": _jpeg(),  # no label of its own
        "labels/train/x.txt": b"0 0.5 0.5 0.2 0.2\n",  # train's, though no train image is x
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "s.zip"))
    assert _rows(dataset) == {"a.jpg": ("train", 1), "x.jpg": ("val", 0)}
    assert _skipped(imp) == {"labels/train/x.txt": "no_image"}
    assert imp.report["notes"] == []
