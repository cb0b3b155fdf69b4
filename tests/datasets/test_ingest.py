"""Importing every format we recognise, from real data in ../shared/datasets."""

import json
import shutil

import pytest
from django.core.files.storage import default_storage
from django.core.management import call_command

from datasets.models import Blob, Dataset, Image, ImportStatus, Label
from datasets.services.datasets import dataset_create
from datasets.services.ingest import dataset_import_path
from tests.datasets.archives import SHARED, jpeg_bytes, tar_of, zip_folder, zip_of


def _import(team, path, task="detect", dataset=None, name="DS"):
    access = team.access("editor")
    dataset = dataset or dataset_create(access=access, name=name, task=task)
    return dataset, dataset_import_path(access=access, dataset=dataset, path=path)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("folder", "task", "images", "labels", "kind", "classes"),
    [
        ("coco8", "detect", 8, 30, "box", 80),
        ("coco8-seg", "segment", 8, 30, "polygon", 80),
        ("coco8-pose", "pose", 8, 21, "keypoints", 1),
        ("dota8", "obb", 8, 133, "obb", 15),
        ("imagenet10", "classify", 20, 20, "tag", 10),
    ],
)
def test_shared_datasets_import_as_zip(team, tmp_path, folder, task, images, labels, kind, classes):
    archive = zip_folder(SHARED / folder, tmp_path / f"{folder}.zip", prefix=f"{folder}/")
    dataset, imp = _import(team, archive, task)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    report = imp.report
    assert report["format"] == ("classification-folders" if task == "classify" else "yolo")
    assert report["images_imported"] == images
    assert report["labels_imported"] == labels
    assert report["splits"] == {"train": images // 2, "val": images // 2}
    assert dataset.classes.count() == classes
    assert set(Label.objects.filter(image__dataset=dataset).values_list("kind", flat=True)) == {
        kind
    }
    assert sum(report["labels_per_class"].values()) == labels
    if task == "pose":
        assert Dataset.objects.get(pk=dataset.pk).keypoint_shape == [17, 3]
    for blob in Blob.objects.filter(images__dataset=dataset):
        assert default_storage.exists(blob.storage_key)


@pytest.mark.django_db
def test_coco8_values_survive_exactly(team):
    dataset, imp = _import(team, SHARED / "coco8")
    image = Image.objects.get(dataset=dataset, filename="000000000009.jpg")
    lines = (SHARED / "coco8/labels/train/000000000009.txt").read_text().split("\n")
    expected = sorted(
        (int(p[0]), [float(v) for v in p[1:]]) for p in (line.split() for line in lines) if p
    )
    got = sorted(
        (lb.dataset_class.index, lb.data) for lb in image.labels.select_related("dataset_class")
    )
    assert got == expected
    assert image.label_count == len(expected) and image.split == "val" or image.split == "train"


@pytest.mark.django_db
def test_roboflow_layout_with_relative_paths_and_valid_split(team, tmp_path):
    files = {
        "data.yaml": b"train: ../train/images\nval: ../valid/images\ntest: ../test/images\n"
        b"nc: 2\nnames: ['cat', 'dog']\n",
        "train/images/a.jpg": jpeg_bytes(color=(1, 2, 3)),
        "train/labels/a.txt": b"0 0.5 0.5 0.2 0.2\n1 0.3 0.3 0.1 0.1\n",
        "valid/images/b.jpg": jpeg_bytes(color=(4, 5, 6)),
        "valid/labels/b.txt": b"1 0.5 0.5 0.2 0.2\n",
        "test/images/c.jpg": jpeg_bytes(color=(7, 8, 9)),
        "test/labels/c.txt": b"",
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "roboflow.zip"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["splits"] == {"train": 1, "val": 1, "test": 1}
    assert imp.report["labels_per_class"] == {"cat": 1, "dog": 2}
    assert [c.name for c in dataset.classes.all()] == ["cat", "dog"]
    assert Image.objects.get(dataset=dataset, filename="c.jpg").label_count == 0


@pytest.mark.django_db
def test_coco_json_with_boxes_polygons_and_unknown_ids(team, tmp_path):
    coco = {
        "images": [
            {"id": 1, "file_name": "a.jpg", "width": 64, "height": 48},
            {"id": 2, "file_name": "b.jpg", "width": 64, "height": 48},
        ],
        "categories": [{"id": 7, "name": "kestrel"}, {"id": 9, "name": "hawk"}],
        "annotations": [
            {
                "id": 1,
                "image_id": 1,
                "category_id": 7,
                "bbox": [16, 12, 32, 24],
                "segmentation": [[16, 12, 48, 12, 48, 36, 16, 36]],
            },
            {"id": 2, "image_id": 2, "category_id": 9, "bbox": [0, 0, 64, 48]},
            {"id": 3, "image_id": 99, "category_id": 7, "bbox": [0, 0, 1, 1]},
            {"id": 4, "image_id": 1, "category_id": 42, "bbox": [0, 0, 1, 1]},
        ],
    }
    files = {
        "annotations/instances_train.json": json.dumps(coco).encode(),
        "images/a.jpg": jpeg_bytes(color=(9, 9, 9)),
        "images/b.jpg": jpeg_bytes(color=(99, 9, 9)),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "coco.zip"), task="segment")
    report = imp.report
    assert report["format"] == "coco"
    assert report["images_imported"] == 2 and report["labels_imported"] == 2
    reasons = {s["reason"] for s in report["skipped"]}
    assert "unknown image id 99" in reasons and "unknown category id 42" in reasons
    polygon = Label.objects.get(image__filename="a.jpg", image__dataset=dataset)
    assert polygon.kind == "polygon"
    assert polygon.data == pytest.approx([0.25, 0.25, 0.75, 0.25, 0.75, 0.75, 0.25, 0.75])
    box = Label.objects.get(image__filename="b.jpg", image__dataset=dataset)
    assert box.kind == "box" and box.data == pytest.approx([0.5, 0.5, 1.0, 1.0])


@pytest.mark.django_db
def test_pascal_voc_xml(team, tmp_path):
    xml = (
        b"<annotation><filename>a.jpg</filename><size><width>64</width><height>48</height>"
        b"<depth>3</depth></size><object><name>kestrel</name><bndbox><xmin>17</xmin>"
        b"<ymin>13</ymin><xmax>49</xmax><ymax>37</ymax></bndbox></object></annotation>"
    )
    files = {"JPEGImages/a.jpg": jpeg_bytes(), "Annotations/a.xml": xml}
    dataset, imp = _import(team, zip_of(files, tmp_path / "voc.zip"))
    assert imp.report["format"] == "voc"
    label = Label.objects.get(image__dataset=dataset)
    assert label.dataset_class.name == "kestrel"
    assert label.data == pytest.approx([32 / 64, 24 / 48, 32 / 64, 24 / 48])


@pytest.mark.django_db
def test_plain_images_and_tar_gz(team, tmp_path):
    files = {f"photos/{i}.jpg": jpeg_bytes(color=(40 * i, 0, 0)) for i in range(3)}
    dataset, imp = _import(team, tar_of(files, tmp_path / "photos.tar.gz"))
    assert imp.report["format"] == "images"
    assert imp.report["images_imported"] == 3 and imp.report["labels_imported"] == 0


@pytest.mark.django_db
def test_content_addressed_blobs_are_shared_and_duplicates_reported(team, tmp_path):
    same = jpeg_bytes(color=(50, 50, 50))
    files = {"a.jpg": same, "b.jpg": same, "c.jpg": jpeg_bytes(color=(90, 50, 50))}
    archive = zip_of(files, tmp_path / "dup.zip")
    first, imp = _import(team, archive, name="First")
    # a.jpg and b.jpg are the same bytes: two images, one blob (tests/datasets/test_duplicates.py)
    assert imp.report["images_imported"] == 3 and imp.report["duplicates"] == 0
    assert Blob.objects.filter(images__dataset=first).distinct().count() == 2
    blobs_before = Blob.objects.count()
    second, imp2 = _import(team, archive, name="Second")
    assert imp2.report["images_imported"] == 3
    assert Blob.objects.count() == blobs_before  # bytes stored once, shared
    again = dataset_import_path(access=team.access("editor"), dataset=first, path=archive)
    assert again.report["images_imported"] == 0 and again.report["duplicates"] == 3
    assert {"file": "b.jpg", "reason": "already in this dataset", "kind": "image"} in again.report[
        "skipped"
    ]


@pytest.mark.django_db
def test_exif_orientation_is_applied_once_at_import(team, tmp_path):
    # Orientation 6: the camera was turned; the upright picture is 48 wide and 64 high.
    files = {"turned.jpg": jpeg_bytes(64, 48, exif_orientation=6)}
    dataset, imp = _import(team, zip_of(files, tmp_path / "exif.zip"))
    blob = Blob.objects.get(images__dataset=dataset)
    assert (blob.width, blob.height) == (48, 64)
    from PIL import Image as PILImage

    with default_storage.open(blob.storage_key) as f, PILImage.open(f) as img:
        assert img.size == (48, 64)
        assert img.getexif().get(0x0112, 1) == 1


@pytest.mark.django_db
def test_new_classes_map_by_name_into_an_existing_dataset(team, tmp_path):
    access = team.access("editor")
    dataset = dataset_create(access=access, name="Fixed", class_names=["dog", "cat"])
    files = {
        "data.yaml": b"names: ['cat', 'dog', 'eagle']\n",
        "images/train/a.jpg": jpeg_bytes(),
        "labels/train/a.txt": b"0 0.5 0.5 0.2 0.2\n2 0.5 0.5 0.1 0.1\n",
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "map.zip"), dataset=dataset)
    assert imp.report["labels_per_class"] == {"cat": 1}
    assert Label.objects.get(image__dataset=dataset).dataset_class.index == 1
    assert any("lacks" in s["reason"] for s in imp.report["skipped"])


@pytest.mark.django_db
def test_management_command_prints_the_report(team, capsys):
    call_command(
        "dataset_import",
        str(SHARED / "coco8"),
        workspace="acme",
        name="From disk",
        task="detect",
    )
    out = json.loads(capsys.readouterr().out)
    assert out["status"] == "succeeded"
    assert out["report"]["images_imported"] == 8


@pytest.mark.django_db(transaction=True)
def test_upload_import_runs_in_the_real_celery_worker(celery_worker_process, team, tmp_path):
    """An uploaded archive, stored as chunks, imported by a real worker over Redis."""
    import time

    from django.core.files.base import ContentFile

    from datasets.models import Import, UploadChunk
    from datasets.tasks import import_run_task

    dataset = dataset_create(access=team.access("editor"), name="Worker DS")
    data = zip_folder(SHARED / "coco8", tmp_path / "coco8.zip").read_bytes()
    imp = Import.objects.create(
        dataset=dataset,
        filename="coco8.zip",
        files=[{"name": "coco8.zip", "size": len(data)}],
        total_size=len(data),
        status=ImportStatus.QUEUED,
    )
    half = len(data) // 2
    for index, part in enumerate([data[:half], data[half:]]):
        chunk = UploadChunk.objects.create(
            upload=imp, file_index=0, chunk_index=index, size=len(part)
        )
        # At exactly its key: on SQLite ids start again after a test, and a key an earlier
        # test left in the shared media folder would make save() pick another name.
        default_storage.delete(chunk.storage_key)
        default_storage.save(chunk.storage_key, ContentFile(part))
    import_run_task.apply_async(args=[imp.pk], queue=celery_worker_process)
    deadline = time.monotonic() + 90
    while not Import.objects.get(pk=imp.pk).is_final:
        assert time.monotonic() < deadline, "the worker did not finish the import in 90 s"
        time.sleep(0.3)
    imp.refresh_from_db()
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["images_imported"] == 8
    assert Image.objects.filter(dataset=dataset).count() == 8
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.django_db
def test_an_import_whose_worker_died_is_requeued_then_given_up(team, settings):
    from datetime import timedelta

    from django.core.files.base import ContentFile
    from django.utils import timezone

    from core.leases import leases_reap
    from datasets.models import Import, UploadChunk
    from datasets.services.ingest import IMPORT_JOB

    dataset = dataset_create(access=team.access("editor"), name="Stale")
    past, future = timezone.now() - timedelta(minutes=5), timezone.now() + timedelta(minutes=1)
    imp, fresh = (
        Import.objects.create(
            dataset=dataset,
            filename=name,
            total_size=1,
            status=ImportStatus.RUNNING,
            attempts=1,
            lease_owner="a worker",
            lease_until=until,
        )
        for name, until in (("x.zip", past), ("y.zip", future))
    )
    chunk = UploadChunk.objects.create(upload=imp, file_index=0, chunk_index=0, size=1)
    default_storage.save(chunk.storage_key, ContentFile(b"x"))
    assert leases_reap(IMPORT_JOB) == 1
    imp.refresh_from_db()
    fresh.refresh_from_db()
    assert imp.status == ImportStatus.QUEUED and imp.lease_owner == ""
    assert fresh.status == ImportStatus.RUNNING
    Import.objects.filter(pk=imp.pk).update(
        status=ImportStatus.RUNNING,
        attempts=settings.LONG_JOB_MAX_ATTEMPTS,
        lease_owner="a worker",
        lease_until=past,
    )
    leases_reap(IMPORT_JOB)
    imp.refresh_from_db()
    assert imp.status == ImportStatus.FAILED and "interrupted 3 times" in imp.error
    assert "Nothing was imported" in imp.error


@pytest.mark.django_db
def test_a_dropped_folder_keeps_its_layout_and_splits(team):
    """Many files uploaded at once (a folder dropped in the browser) import like an archive."""
    from django.core.files.base import ContentFile

    from datasets.models import Import, UploadChunk
    from datasets.services.ingest import import_run

    dataset = dataset_create(access=team.access("editor"), name="Dropped", task="detect")
    folder = SHARED / "coco8"
    paths = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "LICENSE")
    files = [
        {"name": "coco8/" + p.relative_to(folder).as_posix(), "size": p.stat().st_size}
        for p in paths
    ]
    imp = Import.objects.create(
        dataset=dataset,
        filename=f"{len(files)} files",
        files=files,
        total_size=sum(f["size"] for f in files),
        status=ImportStatus.QUEUED,
    )
    for index, path in enumerate(paths):
        chunk = UploadChunk.objects.create(
            upload=imp, file_index=index, chunk_index=0, size=path.stat().st_size
        )
        default_storage.save(chunk.storage_key, ContentFile(path.read_bytes()))
    import_run(import_id=imp.pk)
    imp.refresh_from_db()
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["splits"] == {"train": 4, "val": 4}
    assert imp.report["labels_imported"] == 30
    assert not UploadChunk.objects.filter(upload=imp).exists()  # chunks removed once final


@pytest.mark.django_db
def test_one_image_from_disk_reads_only_that_file(team, tmp_path):
    """Its folder is not listed: a link or thousands of other files beside it do not matter."""
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(jpeg_bytes(color=(30, 60, 90)))
    (tmp_path / "elsewhere").symlink_to("/etc")
    dataset, imp = _import(team, photo)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["images_imported"] == 1 and imp.report["skipped_count"] == 0
