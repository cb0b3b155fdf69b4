"""The import's rows written with COPY on PostgreSQL (bulk_create elsewhere): every value
escaped, every column given its default, and nothing kept when the import's transaction rolls
back."""

import hashlib

import pytest
from django.db import connection, transaction

from datasets.models import Blob, DatasetClass, Image, Label, LabelStatus
from datasets.services.datasets import dataset_create
from datasets.services.ingest import _RowWriter, dataset_import_path, display_name
from tests.datasets.archives import jpeg_bytes, zip_of

HOSTILE = [
    "tab\there.jpg",
    "new\nline\r.jpg",
    "back\\slash.jpg",
    "\\N",  # COPY's text format reads an unescaped \N as NULL
    "\\.",  # and \. alone as the end of the data
    "quotes ' \" `.jpg",
    "ünïcødé 🦅 漢字.jpg",
    "comma, semi; pipe | nul\x00.jpg",
    "\\t\\n literal.jpg",
]


def _blob(n: int) -> Blob:
    sha = hashlib.sha256(str(n).encode()).hexdigest()
    return Blob.objects.create(sha256=sha, size=1, content_type="image/jpeg", width=4, height=3)


@pytest.mark.django_db
def test_hostile_names_and_label_data_round_trip(team):
    dataset = dataset_create(access=team.access("editor"), name="Hostile", task="detect")
    cat = DatasetClass.objects.create(dataset=dataset, index=0, name="cat")
    writer = _RowWriter(dataset)
    assert writer.copy == (connection.vendor == "postgresql")
    blob = _blob(1)
    names = [n.replace("\x00", "") for n in HOSTILE]  # PostgreSQL text holds no NUL
    images = [(blob.pk, name, "train", 1, LabelStatus.LABELLED) for name in names]
    labels = [(i, cat, "box", [0.5, 0.25 + i / 100, 0.1, 1e-7]) for i in range(len(names))]
    with transaction.atomic():
        writer.write(images, labels)
        writer.write([(blob.pk, "second batch.jpg", "val", 0, LabelStatus.UNLABELLED)], [])
    rows = list(Image.objects.filter(dataset=dataset).order_by("id"))
    assert [r.filename for r in rows] == [*names, "second batch.jpg"]
    assert [r.split for r in rows] == ["train"] * len(names) + ["val"]
    assert all(r.blob_id == blob.pk for r in rows)  # copies of one file: rows of their own
    first = rows[0]
    assert (first.label_count, first.status, first.revision, first.review_comment) == (
        1,
        LabelStatus.LABELLED,
        0,
        "",
    )
    assert first.created_at is not None and first.uncertainty is None
    got = {lb.image.filename: lb.data for lb in Label.objects.filter(image__dataset=dataset)}
    assert got == {name: [0.5, 0.25 + i / 100, 0.1, 1e-7] for i, name in enumerate(names)}
    assert all(lb.dataset_class_id == cat.pk for lb in Label.objects.filter(image__dataset=dataset))


@pytest.mark.django_db(transaction=True)
def test_rows_written_go_when_the_transaction_rolls_back(team):
    dataset = dataset_create(access=team.access("editor"), name="Rolled back", task="detect")
    cat = DatasetClass.objects.create(dataset=dataset, index=0, name="cat")
    blob = _blob(2)
    with pytest.raises(RuntimeError), transaction.atomic():
        _RowWriter(dataset).write(
            [(blob.pk, "a.jpg", "train", 1, LabelStatus.LABELLED)], [(0, cat, "box", [0.5] * 4)]
        )
        assert Image.objects.filter(dataset=dataset).count() == 1
        raise RuntimeError("the import failed after its rows were copied")
    assert not Image.objects.filter(dataset=dataset).exists()
    assert not Label.objects.filter(dataset_class=cat).exists()


@pytest.mark.django_db
def test_an_archive_with_hostile_names_imports_each_image_with_its_labels(team, tmp_path):
    names = ["back\\slash", "quotes ' \"", "ünïcødé 🦅", "\\N", "tab\tname"]
    files = {"data.yaml": "names: [cat, dog]\n"}
    for i, name in enumerate(names):
        files[f"images/train/{name}.jpg"] = jpeg_bytes(color=(30 * i, 10, 10))
        files[f"labels/train/{name}.txt"] = f"{i % 2} 0.5 0.5 0.25 0.125\n"
    access = team.access("editor")
    dataset = dataset_create(access=access, name="Names", task="detect")
    imp = dataset_import_path(
        access=access, dataset=dataset, path=zip_of(files, tmp_path / "n.zip")
    )
    assert imp.status == "succeeded", imp.error
    stored = {
        img.filename: [(lb.dataset_class.name, lb.data) for lb in img.labels.all()]
        for img in Image.objects.filter(dataset=dataset).prefetch_related("labels__dataset_class")
    }
    assert imp.report["images_imported"] == len(stored), imp.report["skipped"]
    # A backslash in a zip's names is a Windows path separator: the file's own name is after it.
    wanted = {
        display_name(f"{name}.jpg".replace("\\", "/")): [
            (["cat", "dog"][i % 2], [0.5, 0.5, 0.25, 0.125])
        ]
        for i, name in enumerate(names)
    }
    assert stored == wanted
    assert {"quotes ' \".jpg", "ünïcødé 🦅.jpg", "tabname.jpg", "N.jpg"} <= set(stored)
