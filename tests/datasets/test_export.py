"""YOLO and COCO exports: layout, line formats, safe names, downloads, and round trips.

Datasets are loaded from the real sample data in ../shared/datasets by `yolo_folder_load`, a
small reader of the Ultralytics folder layout kept here for the tests.
"""

import hashlib
import io
import json
import math
import zipfile
from pathlib import Path

import pytest
import yaml
from django.conf import settings
from django.test import Client
from django.urls import reverse

from core.errors import ServiceError
from datasets.models import Dataset, DatasetClass, Image, Label, LabelKind, Task
from datasets.services.datasets import dataset_create
from datasets.services.demo import blob_store
from datasets.services.export import export_coco, export_run, export_yolo
from datasets.services.versions import manifest_build, version_create
from tests.datasets.factories import DatasetClassFactory, DatasetFactory, ImageFactory, png_bytes
from workspaces.services.keys import api_key_create

SHARED = Path(settings.BASE_DIR).parent / "shared" / "datasets"
SAMPLES = {
    Task.DETECT: "coco8",
    Task.SEGMENT: "coco8-seg",
    Task.POSE: "coco8-pose",
    Task.OBB: "dota8",
    Task.CLASSIFY: "imagenet10",
}
KIND_OF_TASK = {
    Task.DETECT: LabelKind.BOX,
    Task.SEGMENT: LabelKind.POLYGON,
    Task.POSE: LabelKind.KEYPOINTS,
    Task.OBB: LabelKind.OBB,
}
SPLITS = ("train", "val", "test")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif")


# --- test helpers: a plain reader of YOLO folders, and a content comparison -------------------


def _images_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


def yolo_folder_load(*, dataset: Dataset, root: Path) -> None:
    """Write rows for a YOLO folder as an import would: classes, blobs, images, labels."""
    images, labels = [], []
    if dataset.task == Task.CLASSIFY:
        names = sorted(
            {p.name for s in SPLITS if (root / s).is_dir() for p in (root / s).iterdir()}
        )
        classes = DatasetClass.objects.bulk_create(
            DatasetClass(dataset=dataset, index=i, name=n) for i, n in enumerate(names)
        )
        for split in SPLITS:
            for i, name in enumerate(names):
                folder = root / split / name
                for path in _images_in(folder) if folder.is_dir() else []:
                    images.append((split, path))
                    labels.append([(i, [])])
    else:
        config = yaml.safe_load(next(root.glob("*.yaml")).read_text())
        names = config["names"]
        names = [names[i] for i in sorted(names)] if isinstance(names, dict) else list(names)
        if config.get("kpt_shape"):
            dataset.keypoint_shape = list(config["kpt_shape"])
            dataset.save(update_fields=["keypoint_shape"])
        classes = DatasetClass.objects.bulk_create(
            DatasetClass(dataset=dataset, index=i, name=n) for i, n in enumerate(names)
        )
        for split in SPLITS:
            folder = root / "images" / split
            for path in _images_in(folder) if folder.is_dir() else []:
                txt = root / "labels" / split / (path.stem + ".txt")
                rows = []
                for line in txt.read_text().splitlines() if txt.exists() else []:
                    if line.strip():
                        values = line.split()
                        rows.append((int(values[0]), [float(v) for v in values[1:]]))
                images.append((split, path))
                labels.append(rows)
    kind = KIND_OF_TASK.get(dataset.task, LabelKind.TAG)
    rows = [
        Image(
            dataset=dataset,
            blob=blob_store(path.read_bytes()),
            filename=path.name,
            split=split,
            label_count=len(shapes),
        )
        for (split, path), shapes in zip(images, labels, strict=True)
    ]
    Image.objects.bulk_create(rows)
    Label.objects.bulk_create(
        Label(image=image, dataset_class=classes[c], kind=kind, data=data)
        for image, shapes in zip(rows, labels, strict=True)
        for c, data in shapes
    )


def sample_dataset(team, task: str, name: str | None = None) -> Dataset:
    dataset = DatasetFactory(workspace=team.workspace, name=name or f"{task} sample", task=task)
    yolo_folder_load(dataset=dataset, root=SHARED / SAMPLES[task])
    return dataset


def _label_key(label: dict, classes: list[str]) -> tuple:
    return (classes[label["class"]], label["kind"], [round(v, 4) for v in label["data"]])


def assert_same_content(expected: dict, actual: dict) -> None:
    """Same classes, same images (by sha256) in the same splits, same labels within 1e-6."""
    assert actual["classes"] == expected["classes"]
    assert actual["keypoint_shape"] == expected["keypoint_shape"]
    want = {img["sha256"]: img for img in expected["images"]}
    got = {img["sha256"]: img for img in actual["images"]}
    assert got.keys() == want.keys()
    for sha, image in want.items():
        assert got[sha]["split"] == image["split"], sha
        a = sorted(image["labels"], key=lambda lb: _label_key(lb, expected["classes"]))
        b = sorted(got[sha]["labels"], key=lambda lb: _label_key(lb, actual["classes"]))
        assert len(a) == len(b), sha
        for la, lb in zip(a, b, strict=True):
            assert expected["classes"][la["class"]] == actual["classes"][lb["class"]]
            assert la["kind"] == lb["kind"]
            assert len(la["data"]) == len(lb["data"])
            assert all(
                math.isclose(x, y, abs_tol=1e-6)
                for x, y in zip(la["data"], lb["data"], strict=True)
            )


def _zip(archive) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(archive.read()))


def _extract(archive, into: Path) -> Path:
    with _zip(archive) as zf:
        zf.extractall(into)
    return into


# --- YOLO -----------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("task", list(SAMPLES))
def test_yolo_export_reads_back_as_the_same_dataset(team, task, tmp_path):
    source = sample_dataset(team, task)
    root = _extract(export_yolo(dataset=source), tmp_path)
    back = DatasetFactory(workspace=team.workspace, name="Back", task=task)
    yolo_folder_load(dataset=back, root=root / "images" if task == Task.CLASSIFY else root)
    expected = manifest_build(dataset=source)
    assert len(expected["images"]) == (20 if task == Task.CLASSIFY else 8)
    assert_same_content(expected, manifest_build(dataset=back))


@pytest.mark.django_db
def test_yolo_layout_data_yaml_and_pose_lines(team):
    source = sample_dataset(team, Task.POSE)
    with _zip(export_yolo(dataset=source)) as zf:
        names = zf.namelist()
        config = yaml.safe_load(zf.read("data.yaml"))
        assert config == {
            "train": "images/train",
            "val": "images/val",
            "names": {0: "person"},
            "kpt_shape": [17, 3],
        }
        images = [n for n in names if n.startswith("images/")]
        assert len(images) == 8
        # The images keep the names they came with (issue 33).
        own = set(source.images.values_list("split", "filename"))
        assert {tuple(n.split("/")[1:]) for n in images} == own
        for name in images:
            split, file = name.split("/")[1:]
            stem = file.rsplit(".", 1)[0]
            assert file.endswith(".jpg")
            assert f"labels/{split}/{stem}.txt" in names
            for line in zf.read(f"labels/{split}/{stem}.txt").decode().splitlines():
                assert len(line.split()) == 1 + 4 + 17 * 3


@pytest.mark.django_db
def test_yolo_lines_per_task_and_shapes_of_other_kinds_converted(team):
    dataset = DatasetFactory(workspace=team.workspace, task=Task.SEGMENT)
    cls = DatasetClassFactory(dataset=dataset, index=0, name="thing")
    image = ImageFactory(dataset=dataset)
    Label.objects.create(
        image=image, dataset_class=cls, kind="polygon", data=[0.1, 0.1, 0.5, 0.1, 0.3, 0.4]
    )
    Label.objects.create(image=image, dataset_class=cls, kind="box", data=[0.5, 0.5, 0.2, 0.4])
    with _zip(export_yolo(dataset=dataset)) as zf:
        (txt,) = [n for n in zf.namelist() if n.startswith("labels/")]
        lines = sorted(zf.read(txt).decode().splitlines())
    # The box became a rectangle, so Ultralytics does not drop the polygons of a mixed file.
    assert lines == ["0 0.1 0.1 0.5 0.1 0.3 0.4", "0 0.4 0.3 0.6 0.3 0.6 0.7 0.4 0.7"]

    dataset.task = Task.DETECT
    dataset.save()
    with _zip(export_yolo(dataset=dataset)) as zf:
        lines = sorted(zf.read(txt).decode().splitlines())
    assert lines == ["0 0.3 0.25 0.4 0.3", "0 0.5 0.5 0.2 0.4"]


@pytest.mark.django_db
def test_classify_export_has_class_folders_and_no_labels(team):
    source = sample_dataset(team, Task.CLASSIFY)
    with _zip(export_yolo(dataset=source)) as zf:
        names = zf.namelist()
    assert not [n for n in names if n.startswith("labels/")] and "data.yaml" not in names
    folders = {tuple(n.split("/")[1:3]) for n in names if n.startswith("images/")}
    classes = list(source.classes.values_list("name", flat=True))
    assert folders == {(s, c) for s in ("train", "val") for c in classes}


@pytest.mark.django_db
def test_archive_names_are_the_uploaded_files_own_name_never_a_path(team):
    dataset = DatasetFactory(workspace=team.workspace)
    cls = DatasetClassFactory(dataset=dataset, index=0, name="a/../../b")
    image = ImageFactory(dataset=dataset, filename="../../etc/passwd.png")
    Label.objects.create(image=image, dataset_class=cls, kind="box", data=[0.5, 0.5, 0.1, 0.1])
    for archive in (export_yolo(dataset=dataset), export_coco(dataset=dataset)):
        with _zip(archive) as zf:
            for name in zf.namelist():
                assert "etc" not in name and ".." not in name and not name.startswith("/")
            images = [n for n in zf.namelist() if n.startswith("images/")]
            assert images == ["images/train/passwd.png"]


# --- COCO -----------------------------------------------------------------------------------------


def coco_read(root: Path, task: str) -> dict:
    """A manifest-like dict read back from a COCO export, in normalised coordinates."""
    images, classes = [], None
    for split in SPLITS:
        path = root / "annotations" / f"instances_{split}.json"
        if not path.exists():
            continue
        doc = json.loads(path.read_text())
        cats = sorted(doc["categories"], key=lambda c: c["id"])
        classes = [c["name"] for c in cats]
        assert [c["id"] for c in cats] == list(range(1, len(cats) + 1))
        by_image: dict[int, list] = {}
        for ann in doc["annotations"]:
            assert ann["iscrowd"] == 0 and ann["area"] > 0
            by_image.setdefault(ann["image_id"], []).append(ann)
        for img in doc["images"]:
            w, h = img["width"], img["height"]
            data = (root / "images" / split / img["file_name"]).read_bytes()
            labels = []
            for ann in by_image.get(img["id"], []):
                x, y, bw, bh = ann["bbox"]
                box = [(x + bw / 2) / w, (y + bh / 2) / h, bw / w, bh / h]
                if task == Task.POSE:
                    kp = ann["keypoints"]
                    points = [
                        v
                        for i in range(0, len(kp), 3)
                        for v in (kp[i] / w, kp[i + 1] / h, kp[i + 2])
                    ]
                    labels.append(
                        {"class": ann["category_id"] - 1, "kind": "keypoints", "data": box + points}
                    )
                elif task in (Task.SEGMENT, Task.OBB):
                    (poly,) = ann["segmentation"]
                    norm = [v / (w if i % 2 == 0 else h) for i, v in enumerate(poly)]
                    labels.append(
                        {"class": ann["category_id"] - 1, "kind": KIND_OF_TASK[task], "data": norm}
                    )
                else:
                    labels.append({"class": ann["category_id"] - 1, "kind": "box", "data": box})
            images.append(
                {"sha256": hashlib.sha256(data).hexdigest(), "split": split, "labels": labels}
            )
    return {"classes": classes, "images": images}


@pytest.mark.django_db
@pytest.mark.parametrize("task", [Task.DETECT, Task.SEGMENT, Task.POSE, Task.OBB])
def test_coco_export_holds_the_same_shapes_in_pixels(team, task, tmp_path):
    source = sample_dataset(team, task)
    root = _extract(export_coco(dataset=source), tmp_path)
    back = coco_read(root, task)
    expected = manifest_build(dataset=source)
    back["keypoint_shape"] = expected["keypoint_shape"]
    assert_same_content(expected, back)


@pytest.mark.django_db
def test_coco_document_fields(team):
    source = sample_dataset(team, Task.SEGMENT)
    with _zip(export_coco(dataset=source)) as zf:
        assert sorted(n for n in zf.namelist() if n.startswith("annotations/")) == [
            "annotations/instances_train.json",
            "annotations/instances_val.json",
        ]
        doc = json.loads(zf.read("annotations/instances_train.json"))
    assert doc["categories"][0] == {"id": 1, "name": "person", "supercategory": ""}
    assert len(doc["categories"]) == 80
    sizes = {}
    for image in doc["images"]:
        assert set(image) == {"id", "file_name", "width", "height"} and image["width"] > 0
        sizes[image["id"]] = (image["width"], image["height"])
    assert doc["annotations"]
    for ann in doc["annotations"]:
        assert set(ann) == {
            "id",
            "image_id",
            "category_id",
            "bbox",
            "area",
            "segmentation",
            "iscrowd",
        }
        width, height = sizes[ann["image_id"]]
        x, y, w, h = ann["bbox"]
        assert -1e-6 <= x and x + w <= width + 1e-6 and -1e-6 <= y and y + h <= height + 1e-6
        assert 0 < ann["area"] <= w * h + 1e-6
        assert len(ann["segmentation"][0]) >= 6


@pytest.mark.django_db
def test_coco_refuses_a_classification_dataset(team):
    source = DatasetFactory(workspace=team.workspace, task=Task.CLASSIFY)
    with pytest.raises(ServiceError, match="YOLO"):
        export_coco(dataset=source)


# --- round trips through the ingest ------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fmt", "task"),
    [("yolo", t) for t in SAMPLES] + [("coco", t) for t in SAMPLES if t != Task.CLASSIFY],
)
def test_export_imports_back_unchanged(team, fmt, task, tmp_path):
    from datasets.services.ingest import dataset_import_path

    source = sample_dataset(team, task)
    path = tmp_path / f"export-{fmt}.zip"
    path.write_bytes(export_run(fmt=fmt, dataset=source).read())
    access = team.access("editor")
    target = dataset_create(access=access, name="Imported back", task=task)
    imported = dataset_import_path(access=access, dataset=target, path=path)
    assert imported.status == "succeeded", imported.error
    target.refresh_from_db()
    assert_same_content(manifest_build(dataset=source), manifest_build(dataset=target))


# --- versions export exactly what was saved ---------------------------------------------------


def _contents(archive) -> dict[str, bytes]:
    with _zip(archive) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", ["yolo", "coco", "ndjson"])
def test_a_version_exports_as_saved_after_the_dataset_changed(team, fmt):
    source = sample_dataset(team, Task.DETECT)
    version = version_create(access=team.access("editor"), dataset=source, note="v1")
    before = _contents(export_run(fmt=fmt, version=version))
    assert before == _contents(export_run(fmt=fmt, dataset=source))

    first = source.images.order_by("id").first()
    Label.objects.filter(image__dataset=source).exclude(image=first).delete()
    source.images.exclude(pk=first.pk).update(split="val")
    ImageFactory(dataset=source)
    source.classes.filter(index=0).update(name="human")

    assert _contents(export_run(fmt=fmt, dataset=source)) != before
    assert _contents(export_run(fmt=fmt, version=version)) == before


# --- downloads ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_download_from_the_dataset_and_from_a_version(team):
    source = sample_dataset(team, Task.DETECT, name="Birds / 2024: best!")
    version_create(access=team.access("editor"), dataset=source)
    client = Client()
    client.force_login(team.viewer)
    url = reverse("dataset_export", args=["acme", source.pk, "coco"])
    response = client.get(url)
    assert response.status_code == 200
    assert response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"] == 'attachment; filename="Birds-2024-best-coco.zip"'
    body = b"".join(response.streaming_content)
    assert "annotations/instances_val.json" in zipfile.ZipFile(io.BytesIO(body)).namelist()

    response = client.get(reverse("version_export", args=["acme", source.pk, 1, "yolo"]))
    assert 'filename="Birds-2024-best-v1-yolo.zip"' in response["Content-Disposition"]
    assert client.get(reverse("dataset_export", args=["acme", source.pk, "xml"])).status_code == 404


@pytest.mark.django_db
def test_api_export_with_a_read_key(team):
    source = sample_dataset(team, Task.DETECT)
    version_create(access=team.access("editor"), dataset=source)
    _, raw = api_key_create(access=team.access("admin"), name="r", scopes=["read"])
    api = Client(headers={"Authorization": f"Bearer {raw}"})
    url = f"/api/v1/datasets/{source.pk}/export"
    response = api.get(url, {"format": "yolo"})
    assert response.status_code == 200
    names = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))).namelist()
    assert "data.yaml" in names
    response = api.get(url, {"format": "voc"})
    assert response.status_code == 400 and "yolo" in response.json()["detail"]
    assert api.get(url, {"format": "coco", "version": 1}).status_code == 200
    assert api.get(url, {"format": "coco", "version": 9}).status_code == 404


@pytest.mark.django_db
def test_a_stranger_cannot_export(team, stranger):
    source = DatasetFactory(workspace=team.workspace)
    client = Client()
    client.force_login(stranger)
    assert (
        client.get(reverse("dataset_export", args=["acme", source.pk, "yolo"])).status_code == 404
    )
    assert client.get(f"/api/v1/datasets/{source.pk}/export").status_code == 404


@pytest.mark.django_db
def test_export_of_png_keeps_its_extension(team):
    dataset = DatasetFactory(workspace=team.workspace)
    ImageFactory(dataset=dataset, blob=blob_store(png_bytes(10, 10, (1, 2, 3))))
    with _zip(export_yolo(dataset=dataset)) as zf:
        assert [n for n in zf.namelist() if n.startswith("images/")][0].endswith(".png")
        assert yaml.safe_load(zf.read("data.yaml"))["val"] == "images/train"
