"""Ultralytics NDJSON (the Ultralytics Platform's dataset format): import and export.

The format as the installed ultralytics reads it (ultralytics/data/converter.py,
convert_ndjson_to_yolo): the first line is the dataset (task, class_names {id: name}, and for a
local dataset `path`, under which each image is images/<split>/<file>), then one image a line
with its split, file, optional url and annotations {key: [[class, values...]]}, of which the
first key is read.
"""

import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from datasets.models import Image, ImportStatus, Label, LabelKind, Task
from datasets.services.datasets import dataset_create
from datasets.services.export import export_run
from datasets.services.format_detect import detect_and_parse
from datasets.services.ingest import dataset_import_path
from datasets.services.versions import manifest_build, version_create
from tests.datasets.archives import jpeg_bytes, zip_of
from tests.datasets.test_export import KIND_OF_TASK, SAMPLES, assert_same_content, sample_dataset
from workspaces.services.keys import api_key_create


def _fixture() -> dict[str, bytes]:
    head = {"type": "dataset", "task": "detect", "name": "birds", "path": ".",
            "class_names": {"0": "kestrel", "1": "hawk"}}  # fmt: skip
    rows = [
        {"type": "image", "file": "a.jpg", "split": "train", "width": 64, "height": 48,
         "annotations": {"boxes": [[0, 0.5, 0.5, 0.2, 0.2], [1, 0.3, 0.3, 0.1, 0.1]]}},
        {"type": "image", "file": "b.jpg", "split": "val", "width": 64, "height": 48,
         "annotations": {"boxes": [[1, 0.5, 0.5, 0.4, 0.4], [5, 0.5, 0.5, 0.1, 0.1]]}},
        {"type": "image", "file": "c.jpg", "split": "test", "annotations": {}},
        {"type": "image", "file": "far.jpg", "split": "train",
         "url": "https://example.com/far.jpg", "annotations": {"boxes": [[0, .5, .5, .1, .1]]}},
    ]  # fmt: skip
    return {
        "birds/birds.ndjson": "".join(json.dumps(r) + "\n" for r in [head, *rows]).encode(),
        "birds/images/train/a.jpg": jpeg_bytes(color=(1, 50, 90)),
        "birds/images/val/b.jpg": jpeg_bytes(color=(2, 60, 100)),
        "birds/images/test/c.jpg": jpeg_bytes(color=(3, 70, 110)),
    }


def _parse(files: dict[str, bytes], task="detect"):
    return detect_and_parse(list(files), lambda name, limit: files[name], task=task, classes=[])


def test_ndjson_parsed_with_splits_labels_and_urls_not_fetched():
    parsed = _parse(_fixture())
    assert parsed.format == "ndjson"
    assert parsed.class_names == ["kestrel", "hawk"]
    got = {
        n.rsplit("/", 1)[-1]: (p.split, [(lb.cls, lb.data) for lb in p.labels])
        for n, p in parsed.images.items()
    }
    assert got == {
        "a.jpg": ("train", [(0, [0.5, 0.5, 0.2, 0.2]), (1, [0.3, 0.3, 0.1, 0.1])]),
        "b.jpg": ("val", [(1, [0.5, 0.5, 0.4, 0.4])]),
        "c.jpg": ("test", []),
    }
    kinds = {f: k for f, _, k in parsed.skipped}
    assert kinds == {
        "birds/birds.ndjson:3 boxes 2": "label",
        "birds/birds.ndjson:5 far.jpg": "no_image",
    }
    reasons = {f: r for f, r, _ in parsed.skipped}
    assert "URL is not fetched" in reasons["birds/birds.ndjson:5 far.jpg"]


@pytest.mark.django_db
def test_ndjson_imports_end_to_end(team, tmp_path):
    access = team.access("editor")
    dataset = dataset_create(access=access, name="NDJSON", task="detect")
    imp = dataset_import_path(
        access=access, dataset=dataset, path=zip_of(_fixture(), tmp_path / "n.zip")
    )
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    rows = {i.filename: (i.split, i.label_count) for i in Image.objects.filter(dataset=dataset)}
    assert rows == {"a.jpg": ("train", 2), "b.jpg": ("val", 1), "c.jpg": ("test", 0)}
    kinds = {s["file"]: s["kind"] for s in imp.report["skipped"]}
    assert kinds == {
        "birds/birds.ndjson:3 boxes 2": "label",
        "birds/birds.ndjson:5 far.jpg": "no_image",
    }


# --- export ---------------------------------------------------------------------------------------


def ultralytics_ndjson_read(zf: zipfile.ZipFile, task: str) -> dict:
    """Read an NDJSON zip the way convert_ndjson_to_yolo does, into a manifest-like dict."""
    lines = [json.loads(ln) for ln in zf.read("dataset.ndjson").decode().splitlines() if ln]
    head, records = lines[0], lines[1:]
    assert head["task"] == task
    names = {int(k): v for k, v in head["class_names"].items()}
    local = head.pop("path", None) if task != Task.CLASSIFY else None
    images = []
    for r in records:
        assert r["split"] in {"train", "val", "test"}
        assert r["file"] == Path(r["file"]).name  # relative, as a local dataset needs
        if local is not None:
            path = (Path(local) / "images" / r["split"] / r["file"]).as_posix()
        else:
            path = f"images/{r['split']}/{r['file']}"
        data = zf.read(path)
        annotations = r.get("annotations", {})
        labels = []
        if task == Task.CLASSIFY:
            if annotations.get("classification"):
                cls = annotations["classification"][0]
                labels.append({"class": cls, "kind": LabelKind.TAG, "data": []})
        else:
            for key in annotations:  # the first key only, as Ultralytics does
                for item in annotations[key]:
                    values = " ".join(map(str, item)).split()
                    labels.append(
                        {
                            "class": int(values[0]),
                            "kind": KIND_OF_TASK[task],
                            "data": [float(v) for v in values[1:]],
                        }
                    )
                break
        images.append(
            {"sha256": hashlib.sha256(data).hexdigest(), "split": r["split"], "labels": labels}
        )
    return {
        "classes": [names[i] for i in range(len(names))],
        "images": images,
        "keypoint_shape": head.get("kpt_shape"),
    }


@pytest.mark.django_db
@pytest.mark.parametrize("task", list(SAMPLES))
def test_ndjson_export_reads_as_ultralytics_reads_it(team, task):
    source = sample_dataset(team, task)
    with zipfile.ZipFile(io.BytesIO(export_run(fmt="ndjson", dataset=source).read())) as zf:
        back = ultralytics_ndjson_read(zf, task)
    expected = manifest_build(dataset=source)
    if task != Task.POSE:
        back["keypoint_shape"] = expected["keypoint_shape"]
    assert_same_content(expected, back)


@pytest.mark.django_db
@pytest.mark.parametrize("task", [Task.DETECT, Task.POSE, Task.CLASSIFY])
def test_ndjson_export_parses_back_with_the_same_images_splits_and_labels(team, task):
    source = sample_dataset(team, task)
    with zipfile.ZipFile(io.BytesIO(export_run(fmt="ndjson", dataset=source).read())) as zf:
        files = {n: zf.read(n) for n in zf.namelist()}
    parsed = _parse(files, task=task)
    assert parsed.format == "ndjson" and parsed.skipped == []
    expected = manifest_build(dataset=source)
    assert parsed.class_names == expected["classes"]
    got = sorted(
        (
            hashlib.sha256(files[n]).hexdigest(),
            p.split,
            sorted((lb.cls, lb.kind, lb.data) for lb in p.labels),
        )
        for n, p in parsed.images.items()
    )
    want = sorted(
        (
            img["sha256"],
            img["split"],
            sorted((lb["class"], lb["kind"], lb["data"]) for lb in img["labels"]),
        )
        for img in expected["images"]
    )
    assert len(got) == len(want)
    for (sha_a, split_a, la), (sha_b, split_b, lb) in zip(got, want, strict=True):
        assert (sha_a, split_a, len(la)) == (sha_b, split_b, len(lb))
        for x, y in zip(la, lb, strict=True):
            assert x[:2] == y[:2] and x[2] == pytest.approx(y[2], abs=1e-6)


@pytest.mark.django_db
@pytest.mark.parametrize("task", list(SAMPLES))
def test_ndjson_export_imports_back_unchanged(team, task, tmp_path):
    source = sample_dataset(team, task)
    path = tmp_path / "export.zip"
    path.write_bytes(export_run(fmt="ndjson", dataset=source).read())
    access = team.access("editor")
    target = dataset_create(access=access, name="Imported back", task=task)
    imported = dataset_import_path(access=access, dataset=target, path=path)
    assert imported.status == ImportStatus.SUCCEEDED, imported.error
    assert imported.report["skipped"] == []
    target.refresh_from_db()
    assert_same_content(manifest_build(dataset=source), manifest_build(dataset=target))
    assert Label.objects.filter(image__dataset=target).count() == sum(
        len(i["labels"]) for i in manifest_build(dataset=source)["images"]
    )


@pytest.mark.django_db
def test_ndjson_is_offered_for_download_and_by_the_api(team):
    source = sample_dataset(team, Task.DETECT, name="Birds")
    version_create(access=team.access("editor"), dataset=source)
    client = Client()
    client.force_login(team.viewer)
    page = client.get(reverse("version_detail", args=["acme", source.pk, 1]))
    assert reverse("version_export", args=["acme", source.pk, 1, "ndjson"]) in page.text
    response = client.get(reverse("dataset_export", args=["acme", source.pk, "ndjson"]))
    assert response["Content-Disposition"] == 'attachment; filename="Birds-ndjson.zip"'
    names = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content))).namelist()
    assert "dataset.ndjson" in names and all(
        n == "dataset.ndjson" or n.startswith(("images/train/", "images/val/")) for n in names
    )
    _, raw = api_key_create(access=team.access("admin"), name="r", scopes=["read"])
    api = Client(headers={"Authorization": f"Bearer {raw}"})
    response = api.get(f"/api/v1/datasets/{source.pk}/export", {"format": "ndjson"})
    assert response.status_code == 200
