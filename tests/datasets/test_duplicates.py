"""Byte-identical images in one export (issue 19): every copy is an image row with its own
labels and split, the bytes are stored once, and the health check reports the copies (and
train/val leakage when they cross splits)."""

import json
import zipfile

import pytest

from datasets.models import Blob, Image, Label, Severity
from datasets.services.clone import dataset_clone
from datasets.services.datasets import dataset_create
from datasets.services.export import export_coco, export_yolo
from datasets.services.health import health_run
from datasets.services.ingest import dataset_import_path
from datasets.services.versions import manifest_build, manifest_diff, version_create
from tests.datasets.archives import jpeg_bytes, zip_of

SAME = jpeg_bytes(color=(50, 120, 50))


def _yolo_files(val_copy: bool = True) -> dict[str, bytes | str]:
    # The same photo in train (twice, one of them augmented only by its name) and in val, each
    # with labels of its own.
    files = {
        "data.yaml": "names: [cat, dog]\n",
        "images/train/a.jpg": SAME,
        "labels/train/a.txt": "0 0.5 0.5 0.2 0.2\n",
        "images/train/a_flip.jpg": SAME,
        "labels/train/a_flip.txt": "1 0.4 0.4 0.2 0.2\n1 0.6 0.6 0.1 0.1\n",
        "images/train/other.jpg": jpeg_bytes(color=(200, 20, 20)),
        "labels/train/other.txt": "0 0.5 0.5 0.5 0.5\n",
    }
    if val_copy:
        files["images/val/a.jpg"] = SAME
        files["labels/val/a.txt"] = "1 0.3 0.3 0.2 0.2\n"
    return files


def _imported(team, tmp_path, files, name="Dups"):
    access = team.access("editor")
    dataset = dataset_create(access=access, name=name, task="detect")
    archive = zip_of(files, tmp_path / f"{name}.zip")
    imp = dataset_import_path(access=access, dataset=dataset, path=archive)
    assert imp.status == "succeeded", imp.error
    return dataset, imp, archive


def _rows(dataset):
    return sorted(
        (img.filename, img.split, sorted(lb.dataset_class.name for lb in img.labels.all()))
        for img in Image.objects.filter(dataset=dataset).prefetch_related("labels__dataset_class")
    )


@pytest.mark.django_db
def test_every_copy_is_an_image_with_its_own_labels_and_split_and_the_bytes_are_stored_once(
    team, tmp_path
):
    dataset, imp, archive = _imported(team, tmp_path, _yolo_files())
    assert imp.report["images_imported"] == 4 and imp.report["labels_imported"] == 5
    assert imp.report["duplicates"] == 0
    assert not [s for s in imp.report["skipped"] if s["kind"] == "image"]
    assert _rows(dataset) == [
        ("a.jpg", "train", ["cat"]),
        ("a.jpg", "val", ["dog"]),
        ("a_flip.jpg", "train", ["dog", "dog"]),
        ("other.jpg", "train", ["cat"]),
    ]
    images = Image.objects.filter(dataset=dataset)
    assert images.values("blob").distinct().count() == 2
    assert Blob.objects.filter(images__dataset=dataset).distinct().count() == 2

    # The same archive again does not double the dataset: each (name, bytes) is already there.
    again = dataset_import_path(access=team.access("editor"), dataset=dataset, path=archive)
    assert again.report["images_imported"] == 0 and again.report["duplicates"] == 4
    reasons = {(s["file"], s["reason"]) for s in again.report["skipped"] if s["kind"] == "image"}
    assert ("images/val/a.jpg", "already in this dataset") in reasons
    assert Image.objects.filter(dataset=dataset).count() == 4
    assert Label.objects.filter(image__dataset=dataset).count() == 5


@pytest.mark.django_db
def test_health_reports_copies_and_leakage_across_splits(team, tmp_path):
    dataset, _, _ = _imported(team, tmp_path, _yolo_files())
    findings = {f.kind: f for f in health_run(dataset=dataset)}
    leak = findings["exact_leakage"]
    assert leak.severity == Severity.ERROR
    ids = set(
        Image.objects.filter(dataset=dataset, filename__startswith="a").values_list("pk", flat=True)
    )
    assert set(leak.image_ids) == ids and len(ids) == 3
    assert "1 file" in leak.message and "3 images" in leak.message
    assert "exact_copy" not in findings


@pytest.mark.django_db
def test_health_reports_copies_within_one_split_as_a_warning(team, tmp_path):
    dataset, _, _ = _imported(team, tmp_path, _yolo_files(val_copy=False), name="Train only")
    findings = {f.kind: f for f in health_run(dataset=dataset)}
    assert "exact_leakage" not in findings
    copy = findings["exact_copy"]
    assert copy.severity == Severity.WARNING and len(copy.image_ids) == 2
    assert "a.jpg = a_flip.jpg" in copy.message


@pytest.mark.django_db
def test_clone_keeps_each_copy_with_its_own_labels(team, tmp_path):
    dataset, _, _ = _imported(team, tmp_path, _yolo_files())
    clone = dataset_clone(access=team.access("editor"), source=dataset, name="Clone")
    assert _rows(clone) == _rows(dataset)
    assert Label.objects.filter(image__dataset=clone).count() == 5


@pytest.mark.django_db
def test_versions_and_exports_hold_every_copy_under_a_name_of_its_own(team, tmp_path):
    dataset, _, _ = _imported(team, tmp_path, _yolo_files())
    manifest = manifest_build(dataset=dataset)
    assert len(manifest["images"]) == 4
    assert sum(len(img["labels"]) for img in manifest["images"]) == 5
    version_create(access=team.access("editor"), dataset=dataset)

    # Moving one copy to val is a split change of that copy alone.
    moved = Image.objects.get(dataset=dataset, filename="a_flip.jpg")
    moved.split = "val"
    moved.save(update_fields=["split"])
    diff = manifest_diff(before=manifest, after=manifest_build(dataset=dataset))
    assert [(c["filename"], c["before"], c["after"]) for c in diff.split_changed] == [
        ("a_flip.jpg", "train", "val")
    ]
    assert not diff.added and not diff.removed and not diff.labels_per_class

    with zipfile.ZipFile(export_yolo(dataset=dataset)) as zf:
        names = zf.namelist()
        images = [n for n in names if n.startswith("images/")]
        assert len(images) == 4 and len(set(images)) == 4
        labels = {n: zf.read(n).decode() for n in names if n.startswith("labels/")}
        assert len(labels) == 4
        assert sorted(len(text.splitlines()) for text in labels.values()) == [1, 1, 1, 2]
        assert {zf.read(n) for n in images if "/val/" in n} == {SAME}
    with zipfile.ZipFile(export_coco(dataset=dataset)) as zf:
        files = [n for n in zf.namelist() if n.startswith("images/")]
        assert len(files) == len(set(files)) == 4
        docs = [json.loads(zf.read(n)) for n in zf.namelist() if n.endswith(".json")]
        listed = [img["file_name"] for doc in docs for img in doc["images"]]
        assert len(listed) == 4 and sum(len(doc["annotations"]) for doc in docs) == 5
