"""Issue 33, "The first hour without a stumble": the import report leads with what was imported
(declared classes without labels are one line of it, not 68 groups of "not imported"), says
plainly when the images were already in the dataset and why their label file was not read, and
exports keep the names the images came with (safe, unique per split, paired with their labels,
masks and depth maps, in the training folder too)."""

import io
import json
import re
import zipfile
from pathlib import Path

import numpy as np
import pytest
import yaml
from django.core.management import call_command
from django.urls import reverse
from PIL import Image as PILImage
from ultralytics.data.utils import img2label_paths

from datasets.models import Image, Label, Task
from datasets.services.datasets import dataset_create
from datasets.services.export import _image_names, export_coco, export_ndjson, export_yolo
from datasets.services.ingest import dataset_import_path
from datasets.services.versions import version_create, version_manifest_load
from tests.datasets.archives import jpeg_bytes, zip_of
from tests.datasets.factories import DatasetFactory, ImageFactory, blob_for, png_bytes
from tests.datasets.pixel_sets import jpeg, painted, png, yaml_bytes
from training.services.materialise import dataset_materialise

pytestmark = pytest.mark.django_db
COCO8 = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "coco8"


def _import(team, path, *, name="First hour", task="detect", dataset=None):
    access = team.access("editor")
    dataset = dataset or dataset_create(access=access, name=name, task=task)
    return dataset, dataset_import_path(access=access, dataset=dataset, path=path)


def _page(client, team, imp) -> str:
    client.force_login(team.viewer)
    url = reverse("import_detail", kwargs={"ws_slug": "acme", "import_pk": imp.pk})
    return client.get(url).content.decode()


# --- 4. the import page leads with what was imported ----------------------------------------


def test_coco8_leads_with_what_was_imported_and_its_empty_classes_are_one_line(team, client):
    _, imp = _import(team, COCO8)
    report = imp.report
    assert (report["images_imported"], report["labels_imported"]) == (8, 30)
    assert "empty_class" not in {g["kind"] for g in report["not_imported"]}
    assert report["classes_without_labels_count"] == 68
    assert report["classes_without_labels"][:2] == ["bicycle", "car"]
    assert report["warning"] == ""

    page = _page(client, team, imp)
    summary = page.index('data-testid="report-summary">Imported 8 images and 30 labels')
    line = page.index(
        "68 declared classes have no label yet: bicycle, car, motorcycle, airplane, bus, "
        "train, truck, boat, traffic light, fire hydrant and 58 more."
    )
    assert summary < line
    assert "Classes with no labels" not in page and "created, but no label" not in page
    if "report-not-imported" in page:  # whatever is truly left out comes after
        assert line < page.index('data-testid="report-not-imported"')


def test_a_version_of_coco8_lists_its_classes_with_labels_and_the_rest_as_one_line(team, client):
    dataset, _ = _import(team, COCO8)
    version = version_create(access=team.access("editor"), dataset=dataset)
    client.force_login(team.viewer)
    url = reverse("version_detail", args=["acme", dataset.pk, version.number])
    page = client.get(url).content.decode()
    table = re.search(r'data-testid="version-classes">(.*?)</table>', page, re.S).group(1)
    rows = re.findall(r"<tr><td>([^<]+)</td><td>(\d+)</td></tr>", table)
    assert len(rows) == 12 and rows[0] == ("person", "10")  # in the classes' order
    assert all(n != "0" for _, n in rows)
    assert (
        'data-testid="version-classes-without-labels">68 declared classes have no label yet: '
        "bicycle, car, motorcycle, airplane, bus, train, truck, boat, traffic light, fire "
        "hydrant and 58 more.</p>"
    ) in page
    assert "<td>bicycle</td>" not in page


def test_the_command_says_the_same_in_the_same_order(team):
    out, err = io.StringIO(), io.StringIO()
    call_command("dataset_import", str(COCO8), workspace="acme", name="C8", stdout=out, stderr=err)
    lines = err.getvalue().splitlines()
    assert lines[:2] == [
        "Imported 8 images and 30 labels (Ultralytics YOLO).",
        "68 declared classes have no label yet: bicycle, car, motorcycle, airplane, bus, train, "
        "truck, boat, traffic light, fire hydrant and 58 more.",
    ]
    assert "Classes with no labels" not in err.getvalue()


def test_a_report_kept_from_before_shows_its_empty_classes_as_the_line(team, client, tmp_path):
    _, imp = _import(team, zip_of({"a.jpg": jpeg_bytes()}, tmp_path / "a.zip"))
    imp.report = {
        **imp.report,
        "not_imported": [
            {
                "kind": "empty_class",
                "title": "Classes with no labels",
                "count": 2,
                "reasons": [],
                "files": [{"file": "cat", "reason": "x"}, {"file": "dog", "reason": "x"}],
            }
        ],
    }
    imp.save(update_fields=["report"])
    page = _page(client, team, imp)
    assert "2 declared classes have no label yet: cat, dog." in page
    assert 'data-testid="report-not-imported"' not in page


# --- 5. images already in the dataset --------------------------------------------------------


def _one_cat() -> dict:
    """A YOLO archive of one image with one cat."""
    return {
        "data.yaml": b"names: ['cat']\n",
        "images/train/a.jpg": jpeg_bytes(),
        "labels/train/a.txt": b"0 0.5 0.5 0.2 0.2\n",
    }


def test_a_duplicate_and_its_label_file_say_so_plainly(team, client, tmp_path):
    first = _one_cat()
    dataset, _ = _import(team, zip_of(first, tmp_path / "1.zip"))
    # The same image again, its .txt beside it (a layout Kestrel does not read labels from).
    again = {"a.jpg": jpeg_bytes(), "a.txt": b"0 0.5 0.5 0.2 0.2\n"}
    _, imp = _import(team, zip_of(again, tmp_path / "2.zip"), dataset=dataset)
    warning = imp.report["warning"]
    assert warning.startswith(
        "1 image already in the dataset; its label file was not read because no format "
        "Kestrel reads matched the upload: its first line is '0 0.5 0.5 0.2 0.2'"
    ), warning
    assert "Nothing was imported: none of the images" not in warning
    page = _page(client, team, imp)
    assert "Nothing new imported" in page and "Imported, with a warning" not in page
    assert f'data-testid="import-warning"><p>{warning}' in page.replace("&#x27;", "'")
    assert 'data-testid="not-imported-duplicate"' in page

    # The whole archive again: its label, read this time, is not imported a second time.
    _, imp = _import(team, zip_of(first, tmp_path / "3.zip"), dataset=dataset)
    assert imp.report["warning"] == (
        "1 image already in the dataset, so neither it nor its 1 label in the upload were "
        "imported again."
    )
    assert Label.objects.filter(image__dataset=dataset).count() == 1


def _status(page: str) -> str:
    """The import's status card: its heading, what was imported, what was not."""
    return page[page.index('id="import-status"') : page.index("<h2>Uploaded files</h2>")]


def test_the_report_says_each_thing_once(team, client, tmp_path):
    first = _one_cat()
    dataset, imp = _import(team, zip_of(first, tmp_path / "1.zip"))
    status = _status(_page(client, team, imp))
    # The state once: a heading, no badge beside it saying "Imported" again.
    assert re.findall(r">\s*Imported\s*<", status) == [">Imported<"], status
    assert "badge" not in status

    again = {"a.jpg": jpeg_bytes(), "a.txt": b"0 0.5 0.5 0.2 0.2\n"}
    _, imp = _import(team, zip_of(again, tmp_path / "2.zip"), dataset=dataset)
    status = _status(_page(client, team, imp)).replace("&#x27;", "'")
    reason = imp.report["not_imported"][0]["reasons"][0]["reason"]
    assert reason.startswith("not read: no format Kestrel reads matched the upload")
    # Under "Not imported" the label file's reason is said once, its file under it.
    section = status[status.index('data-testid="report-not-imported"') :]
    assert section.count("no format Kestrel reads matched") == 1, section
    assert re.search(
        r'<li data-testid="not-imported-reason">'
        + re.escape(reason)
        + r'\s*<ul class="skipped"><li><bdi class="filename">a.txt</bdi></li></ul></li>',
        section,
    ), section
    # The duplicate is counted once, as the sentence the page leads with says: 1 image already
    # in the dataset, 1 label file not read; no "Duplicates 1" beside "Files skipped 2".
    counts = re.findall(
        r'<strong>([^<]+)</strong>: <span data-testid="not-imported-count">(\d+)</span>', status
    )
    assert counts == [
        ("Label files not read", "1"),
        ("Images already in this dataset (not imported again)", "1"),
    ]
    assert "Duplicates" not in status and "Files skipped" not in status
    assert '<ul class="skipped"><li><bdi class="filename">a.jpg</bdi></li></ul>' in section
    assert "already in this dataset</li>" not in section  # the group's title says why


def test_a_reason_beyond_the_commonest_keeps_its_file_and_its_reason(team, client, tmp_path):
    _, imp = _import(team, zip_of({"a.jpg": jpeg_bytes()}, tmp_path / "a.zip"))
    reasons = [f"unknown category id {n}" for n in range(10)]
    imp.report = {
        **imp.report,
        "not_imported": [
            {
                "kind": "label",
                "title": "Labels refused",
                "count": 11,
                "reasons": [
                    {"reason": r, "count": 2 if r.endswith("0") else 1} for r in reasons[:8]
                ],
                "files": [{"file": f"c.json:{n}", "reason": r} for n, r in enumerate(reasons)]
                + [{"file": "c.json:10", "reason": reasons[0]}],
            }
        ],
    }
    imp.save(update_fields=["report"])
    section = _page(client, team, imp)
    section = section[section.index('data-testid="report-not-imported"') :]
    assert re.search(
        r"2 × unknown category id 0\s*<ul class=\"skipped\"><li><bdi class=\"filename\">c.json:0"
        r'</bdi></li><li><bdi class="filename">c.json:10</bdi></li></ul>',
        section,
    ), section
    assert section.count("unknown category id 0") == 1
    assert "Other reasons:" in section
    assert '<bdi class="filename">c.json:9</bdi> — unknown category id 9' in section


# --- 6. exports keep the images' names --------------------------------------------------------


def _zip(archive) -> zipfile.ZipFile:
    return zipfile.ZipFile(archive)


def test_yolo_coco_and_ndjson_keep_the_names_the_images_came_with(team, tmp_path):
    # Stems that clash in a split: by case and across extensions (labels are <stem>.txt), and
    # two copies of one file; the same name in another split is no clash.
    files = {
        "data.yaml": b"names: ['a', 'b', 'c', 'd', 'e']\n",
        "images/train/000000000049.jpg": jpeg_bytes(color=(1, 2, 3)),
        "labels/train/000000000049.txt": b"0 0.5 0.5 0.1 0.1\n",
        "images/train/Photo.JPG": jpeg_bytes(color=(90, 2, 3)),
        "labels/train/Photo.txt": b"1 0.5 0.5 0.2 0.2\n",
        "images/train/photo.png": png_bytes(color=(180, 2, 3)),
        "labels/train/photo.txt": b"2 0.5 0.5 0.3 0.3\n",
        "images/train/x/copy.jpg": jpeg_bytes(color=(4, 200, 3)),
        "labels/train/x/copy.txt": b"3 0.5 0.5 0.4 0.4\n",
        "images/train/y/copy.jpg": jpeg_bytes(color=(4, 200, 3)),
        "labels/train/y/copy.txt": b"4 0.5 0.5 0.5 0.5\n",
        "images/val/000000000049.jpg": jpeg_bytes(color=(7, 7, 250)),
        "labels/val/000000000049.txt": b"4 0.5 0.5 0.6 0.6\n",
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "names.zip"))
    assert imp.report["images_imported"] == 6
    with _zip(export_yolo(dataset=dataset)) as zf:
        names = zf.namelist()
        images = sorted(n for n in names if n.startswith("images/"))
        labels = {n: zf.read(n).decode() for n in names if n.startswith("labels/")}
    assert "images/train/000000000049.jpg" in images and "images/val/000000000049.jpg" in images
    train = [n.split("/")[-1] for n in images if n.startswith("images/train/")]
    stems = [n.rsplit(".", 1)[0].casefold() for n in train]
    assert len(set(stems)) == len(stems) == 5, train
    assert sorted(train, key=str.casefold)[:2] == ["000000000049.jpg", "copy-2.jpg"]
    assert {"Photo.JPG", "photo.png"} & set(train) and "copy.jpg" in train
    # Each image still has its own label: the class says which file it came from.
    assert labels["labels/val/000000000049.txt"].startswith("4 0.5 0.5 0.6")
    assert labels["labels/train/000000000049.txt"].startswith("0 ")
    by_class = {text.split()[0]: path for path, text in labels.items() if "train" in path}
    photo_jpg, photo_png = by_class["1"], by_class["2"]
    assert photo_jpg.rsplit("/", 1)[-1].rsplit(".", 1)[0].casefold().startswith("photo")
    assert f"images/train/{Path(photo_jpg).stem}.JPG" in images
    assert f"images/train/{Path(photo_png).stem}.png" in images
    assert {Path(by_class["3"]).stem, Path(by_class["4"]).stem} == {"copy", "copy-2"}

    with _zip(export_coco(dataset=dataset)) as zf:
        coco = json.loads(zf.read("annotations/instances_train.json"))
        assert sorted(i["file_name"] for i in coco["images"]) == sorted(train)
    with _zip(export_ndjson(dataset=dataset)) as zf:
        records = [json.loads(line) for line in zf.read("dataset.ndjson").decode().splitlines()]
        files_named = sorted(r["file"] for r in records[1:] if r["split"] == "train")
        assert files_named == sorted(train)


def test_names_are_safe_as_file_names_with_the_stored_types_extension(team):
    dataset = DatasetFactory(workspace=team.workspace)
    given = [
        "../../etc/passwd.png",
        "C:\\Users\\me\\scan.png",
        "bell\x07\u202eevil.png",
        "...png",
        "a..b.png",
        "con.png",
        "photo.jpg",  # PNG bytes uploaded under a JPEG name
        "notes.txt",
        "é" * 200 + ".png",
    ]
    for i, filename in enumerate(given):
        ImageFactory(dataset=dataset, filename=filename, blob=blob_for(png_bytes(color=(i, 9, 9))))
    images = [
        {"sha256": i.blob.sha256, "filename": i.filename, "split": "train"}
        for i in Image.objects.filter(dataset=dataset).order_by("id").select_related("blob")
    ]
    names = _image_names(images)
    assert names[:3] == ["passwd.png", "scan.png", "bell__evil.png"]
    assert names[3] == images[3]["sha256"][:16] + ".png"  # nothing of the name was left
    assert names[4:8] == ["a.b.png", "con_.png", "photo.png", "notes.txt.png"]
    assert len(names[8].encode()) <= 160 and names[8].endswith(".png")
    for name in names:
        assert "/" not in name and "\\" not in name and ".." not in name
        assert not re.search(r"[\x00-\x1f\x7f]", name) and not name.startswith(".")


def test_the_training_folder_pairs_masks_and_depth_maps_with_renamed_images(team, tmp_path):
    access = team.access("editor")
    h, w = 24, 32
    for task, folder in ((Task.SEMANTIC, "masks"), (Task.DEPTH, "depth")):
        dataset = dataset_create(access=access, name=f"Pairs {task}", task=task)
        truth = {}
        # "scene.jpg" and "Scene.jpg" in one split, imported apart: one stem on a disk that
        # ignores case, so one of them is renamed, and its map must follow it.
        for i, name in enumerate(["scene", "Scene"]):
            if task == Task.SEMANTIC:
                mask = painted(h, w, [0, 1], seed=i)
                doc = {"names": {0: "ground", 1: "thing"}, "masks_dir": "masks"}
            else:
                mask = np.full((h, w), 1000 * (i + 1), np.uint16)
                doc = {"names": {0: "depth"}}
            files = {
                "data.yaml": yaml_bytes({"train": "images/train", **doc}),
                f"images/train/{name}.jpg": jpeg(w, h, 40 + i),
                f"{folder}/train/{name}.png": png(mask),
            }
            _, imp = _import(team, zip_of(files, tmp_path / f"{task}{i}.zip"), dataset=dataset)
            assert imp.report["maps_imported"] == 1, imp.report
            truth[Image.objects.get(dataset=dataset, filename=f"{name}.jpg").blob.sha256] = mask
        version = version_create(access=access, dataset=dataset)
        data = Path(dataset_materialise(version, workdir=tmp_path / "work"))
        assert yaml.safe_load(data.read_text())["train"] == "images/train"
        paths = sorted(str(p) for p in (data.parent / "images" / "train").iterdir())
        assert sorted(Path(p).name for p in paths) in (
            ["Scene-2.jpg", "scene.jpg"],
            ["Scene.jpg", "scene-2.jpg"],
        )
        by_name = dict(
            zip(
                _image_names(version_manifest_load(version)["images"]),
                version_manifest_load(version)["images"],
                strict=True,
            )
        )
        # Where Ultralytics looks for each image's map (SemanticDataset, DepthDataset).
        for path, target in zip(paths, img2label_paths(paths, folder, ".png"), strict=True):
            got = np.asarray(PILImage.open(target))
            assert np.array_equal(got, truth[by_name[Path(path).name]["sha256"]]), target
