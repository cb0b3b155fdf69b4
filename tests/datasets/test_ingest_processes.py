"""A large import checks its images in processes while its own thread reads the labels
(datasets.services.ingest: _Prefetch and the billiard pool); the outcome is the same as on
threads, and nothing it stored ahead is left behind."""

import hashlib

import pytest
from django.core.files.storage import default_storage

from datasets.models import Blob, Image, ImportStatus, Label
from datasets.services import ingest
from datasets.services.datasets import dataset_create
from datasets.services.ingest import dataset_import_path
from tests.datasets.archives import jpeg_bytes, tar_of, zip_of


@pytest.fixture
def pools(monkeypatch):
    """Every import takes the process path (it starts at 500 images), and says so."""
    started = []
    real = ingest._check_pool

    def counted():
        pool = real()
        started.append(pool is not None)
        return pool

    monkeypatch.setattr(ingest, "PROCESS_MIN_IMAGES", 1)
    monkeypatch.setattr(ingest, "BATCH_IMAGES", 3)  # several batches in flight
    monkeypatch.setattr(ingest, "PREFETCH_AHEAD", 2)  # the checking thread waits on the import
    monkeypatch.setattr(ingest, "_check_pool", counted)
    return started


def _import(team, path, task="detect"):
    access = team.access("editor")
    dataset = dataset_create(access=access, name="DS", task=task)
    return dataset, dataset_import_path(access=access, dataset=dataset, path=path)


def _yolo_files(n: int, tint: int = 40) -> dict[str, bytes]:
    files = {"data.yaml": b"train: images/train\nval: images/val\nnames: [a, b]\n"}
    for i in range(n):
        split = "val" if i % 4 == 0 else "train"
        files[f"images/{split}/{i:03d}.jpg"] = jpeg_bytes(color=(i * 9 % 256, tint, 90))
        files[f"labels/{split}/{i:03d}.txt"] = f"{i % 2} 0.5 0.5 0.2 0.3\n".encode()
    return files


@pytest.mark.django_db
def test_a_large_zip_is_checked_in_processes_with_the_same_outcome(team, tmp_path, pools):
    files = _yolo_files(20)
    files["images/train/broken.jpg"] = jpeg_bytes()[:200]  # truncated
    files["images/train/copy.jpg"] = files["images/train/001.jpg"]  # same bytes, own row
    files["labels/train/copy.txt"] = b"0 0.1 0.1 0.1 0.1\n1 0.9 0.9 0.1 0.1\n"
    dataset, imp = _import(team, zip_of(files, tmp_path / "big.zip"))

    assert pools == [True]
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["images_imported"] == 21
    assert imp.report["labels_imported"] == 22
    assert imp.report["splits"] == {"train": 16, "val": 5}
    refused = {s["file"]: s["reason"] for s in imp.report["skipped"]}
    assert "truncated" in refused["images/train/broken.jpg"]
    # Rows come in the archive's order; the copy is a row of its own sharing one blob.
    names = list(
        Image.objects.filter(dataset=dataset).order_by("id").values_list("filename", flat=True)
    )
    assert names[:3] == ["000.jpg", "001.jpg", "002.jpg"] and names[-1] == "copy.jpg"
    copy = Image.objects.get(dataset=dataset, filename="copy.jpg")
    assert copy.blob_id == Image.objects.get(dataset=dataset, filename="001.jpg").blob_id
    assert Label.objects.filter(image=copy).count() == 2
    assert Blob.objects.filter(images__dataset=dataset).distinct().count() == 20
    for blob in Blob.objects.filter(images__dataset=dataset):
        assert default_storage.exists(blob.storage_key)
        # Made by the checking processes from the same decode: no later pass needed.
        assert blob.has_thumbnail and default_storage.exists(blob.thumbnail_key)


@pytest.mark.django_db
def test_images_the_layout_leaves_out_are_not_left_stored(team, tmp_path, pools):
    """A classification archive's image outside any class folder was checked and stored ahead
    while the layout was still being read: once the layout refuses it, its bytes go again."""
    stray, first = jpeg_bytes(color=(250, 1, 2)), jpeg_bytes(color=(251, 3, 4))
    files = {
        "first.jpg": first,  # passed over before the import asks for the next one
        "train/cat/1.jpg": jpeg_bytes(color=(1, 2, 3)),
        "train/dog/2.jpg": jpeg_bytes(color=(4, 5, 6)),
        "val/cat/3.jpg": jpeg_bytes(color=(7, 8, 9)),
        "stray.jpg": stray,
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "cls.zip"), task="classify")

    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["images_imported"] == 3
    assert (
        "not inside a class folder"
        in {s["file"]: s["reason"] for s in imp.report["skipped"]}["stray.jpg"]
    )
    for data in (stray, first):
        sha = hashlib.sha256(data).hexdigest()
        assert not Blob.objects.filter(sha256=sha).exists()
        assert not default_storage.exists(f"blobs/{sha[:2]}/{sha}")
        assert not default_storage.exists(f"thumbs/{sha[:2]}/{sha}.jpg")


@pytest.mark.django_db
def test_a_bomb_found_by_the_checking_thread_fails_the_import_and_stores_nothing(
    team, tmp_path, pools, monkeypatch
):
    from datasets.services.archive import Limits

    files = _yolo_files(12, tint=200)  # bytes no other test stored (storage is shared)
    total = sum(len(v) for v in files.values())
    monkeypatch.setattr(ingest, "_limits_for", lambda *a, **k: Limits(max_total_bytes=total // 2))
    dataset, imp = _import(team, zip_of(files, tmp_path / "bomb.zip"))

    assert imp.status == ImportStatus.FAILED
    assert "inflates past" in imp.error
    assert not Image.objects.filter(dataset=dataset).exists()
    for name, data in files.items():
        if name.endswith(".jpg"):
            sha = hashlib.sha256(data).hexdigest()
            assert not default_storage.exists(f"blobs/{sha[:2]}/{sha}"), name
            assert not default_storage.exists(f"thumbs/{sha[:2]}/{sha}.jpg"), name


@pytest.mark.django_db
def test_a_tar_is_read_on_one_thread(team, tmp_path, pools):
    """A tar is one stream: its images are checked as it is read, never ahead."""
    dataset, imp = _import(team, tar_of(_yolo_files(6), tmp_path / "six.tar.gz"))
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    assert imp.report["images_imported"] == 6 and imp.report["labels_imported"] == 6
