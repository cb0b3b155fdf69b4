"""Exports for labelling tools: CVAT for images 1.1 (XML) and Label Studio JSON.

Small datasets built with the factories, one per task, with shapes at known pixels; the export
is parsed and one shape of each kind is checked to the hundredth of a pixel (CVAT) or exactly
(Label Studio's percentages). Then the downloads (pages and API, owner / member / stranger)
and the round trips through the importers of both formats.
"""

import io
import json
import math
import zipfile

import pytest
from defusedxml import ElementTree
from django.test import Client
from django.urls import reverse

from core.errors import ServiceError
from datasets.models import Dataset, Label, LabelKind, Task
from datasets.services.datasets import dataset_create
from datasets.services.demo import blob_store
from datasets.services.export import FORMATS, export_run
from datasets.services.versions import manifest_build, version_create
from tests.datasets.factories import DatasetClassFactory, DatasetFactory, ImageFactory, png_bytes
from tests.datasets.test_export import SAMPLES, sample_dataset
from tests.datasets.test_ingest import _import
from workspaces.selectors import workspace_access_for_user
from workspaces.services.keys import api_key_create

TOOLS = ("cvat", "label-studio")
_colour = iter(range(1, 10**6))


def _image(dataset: Dataset, width: int = 64, height: int = 48, split: str = "train"):
    # A colour of its own: every image distinct bytes, so a distinct blob.
    n = next(_colour)
    data = png_bytes(width, height, (n % 251, (n // 251) % 251, 77))
    return ImageFactory(dataset=dataset, blob=blob_store(data), split=split)


def _dataset(team, task: str, classes=("cat", "dog"), **fields) -> Dataset:
    dataset = DatasetFactory(workspace=team.workspace, name=f"Tiny {task}", task=task, **fields)
    for i, name in enumerate(classes):
        DatasetClassFactory(dataset=dataset, index=i, name=name)
    return dataset


def _label(image, index: int, kind: str, data: list[float]) -> Label:
    cls = image.dataset.classes.get(index=index)
    return Label.objects.create(image=image, dataset_class=cls, kind=kind, data=data)


def _zip(archive) -> zipfile.ZipFile:
    return zipfile.ZipFile(io.BytesIO(archive.read()))


def _cvat(dataset: Dataset):
    with _zip(export_run(fmt="cvat", dataset=dataset)) as zf:
        return ElementTree.fromstring(zf.read("annotations.xml")), zf.namelist()


def _label_studio(dataset: Dataset):
    with _zip(export_run(fmt="label-studio", dataset=dataset)) as zf:
        return json.loads(zf.read("tasks.json")), zf.namelist()


def _results(tasks: list[dict]) -> list[dict]:
    return [r for t in tasks for a in t["annotations"] for r in a["result"]]


# --- CVAT for images 1.1 --------------------------------------------------------------------------


@pytest.mark.django_db
def test_cvat_boxes_in_pixels_with_subsets_tasks_and_labels(team):
    dataset = _dataset(team, Task.DETECT)
    train = _image(dataset)  # 64 × 48
    val = _image(dataset, 100, 50, split="val")
    _label(train, 1, LabelKind.BOX, [0.5, 0.5, 0.25, 0.5])
    # A polygon in a detect dataset goes as its box, as the YOLO export writes it.
    _label(val, 0, LabelKind.POLYGON, [0.1, 0.1, 0.5, 0.1, 0.3, 0.4])
    empty = _image(dataset, split="val")  # no labels: still listed, as CVAT lists every frame

    root, names = _cvat(dataset)
    assert root.tag == "annotations" and root.findtext("version") == "1.1"
    project = root.find("meta/project")
    assert project.findtext("name") == "Tiny detect"
    assert project.findtext("subsets") == "Train\nValidation"
    tasks = project.findall("tasks/task")
    assert [(t.findtext("id"), t.findtext("subset"), t.findtext("size")) for t in tasks] == [
        ("1", "Train", "1"),
        ("2", "Validation", "2"),
    ]
    labels = project.findall("labels/label")
    assert [(lb.findtext("name"), lb.findtext("type")) for lb in labels] == [
        ("cat", "rectangle"),
        ("dog", "rectangle"),
    ]
    assert all(lb.find("attributes") is not None for lb in labels)

    images = root.findall("image")
    assert [(i.get("id"), i.get("subset"), i.get("task_id")) for i in images] == [
        ("0", "Train", "1"),
        ("1", "Validation", "2"),
        ("2", "Validation", "2"),
    ]
    first = images[0]
    assert first.get("name") == train.filename
    assert (first.get("width"), first.get("height")) == ("64", "48")
    (box,) = first.findall("box")
    assert box.attrib == {
        "label": "dog",
        "source": "manual",
        "occluded": "0",
        "xtl": "24.00",
        "ytl": "12.00",
        "xbr": "40.00",
        "ybr": "36.00",
        "z_order": "0",
    }
    by_name = {i.get("name"): i for i in images}
    (box,) = by_name[val.filename].findall("box")  # the polygon's box
    assert [box.get(k) for k in ("label", "xtl", "ytl", "xbr", "ybr")] == [
        "cat",
        "10.00",
        "5.00",
        "50.00",
        "20.00",
    ]
    assert list(by_name[empty.filename]) == []
    assert sorted(n for n in names if n.startswith("images/")) == sorted(
        f"images/{i.get('subset')}/{i.get('name')}" for i in images
    )


@pytest.mark.django_db
def test_cvat_polygons_in_a_segment_dataset(team):
    dataset = _dataset(team, Task.SEGMENT)
    image = _image(dataset)
    _label(image, 0, LabelKind.POLYGON, [0.1, 0.1, 0.5, 0.1, 0.3, 0.4])
    _label(image, 1, LabelKind.BOX, [0.5, 0.5, 0.25, 0.5])  # becomes its rectangle
    root, _ = _cvat(dataset)
    assert {lb.findtext("type") for lb in root.findall("meta/project/labels/label")} == {"polygon"}
    polygons = {p.get("label"): p for p in root.findall("image/polygon")}
    assert polygons["cat"].attrib == {
        "label": "cat",
        "source": "manual",
        "occluded": "0",
        "points": "6.40,4.80;32.00,4.80;19.20,19.20",
        "z_order": "0",
    }
    assert polygons["dog"].get("points") == "24.00,12.00;40.00,12.00;40.00,36.00;24.00,36.00"


def _rotated_corners(cx, cy, w, h, degrees, width, height) -> list[float]:
    """Corners (normalised) of a w × h box turned clockwise about its centre: top-left first,
    then clockwise on screen, as DOTA and Ultralytics list them."""
    c, s = math.cos(math.radians(degrees)), math.sin(math.radians(degrees))
    out = []
    for dx, dy in ((-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2)):
        out += [(cx + dx * c - dy * s) / width, (cy + dx * s + dy * c) / height]
    return out


@pytest.mark.django_db
def test_cvat_oriented_box_has_its_clockwise_rotation_about_the_centre(team):
    dataset = _dataset(team, Task.OBB)
    image = _image(dataset, 200, 100)
    _label(image, 0, LabelKind.OBB, _rotated_corners(100, 50, 60, 20, 30, 200, 100))
    _label(image, 1, LabelKind.BOX, [0.25, 0.25, 0.1, 0.2])  # axis-aligned: no rotation
    root, _ = _cvat(dataset)
    boxes = {b.get("label"): b for b in root.findall("image/box")}
    assert boxes["cat"].attrib == {
        "label": "cat",
        "source": "manual",
        "occluded": "0",
        "xtl": "70.00",
        "ytl": "40.00",
        "xbr": "130.00",
        "ybr": "60.00",
        "rotation": "30.00",
        "z_order": "0",
    }
    assert "rotation" not in boxes["dog"].attrib
    assert [boxes["dog"].get(k) for k in ("xtl", "ytl", "xbr", "ybr")] == [
        "40.00",
        "15.00",
        "60.00",
        "35.00",
    ]


@pytest.mark.django_db
def test_cvat_keypoints_are_a_skeleton_with_outside_and_occluded_points(team):
    dataset = _dataset(team, Task.POSE, classes=("person",), keypoint_shape=[3, 3])
    image = _image(dataset)
    data = [0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 2, 0.5, 0.5, 1, 0, 0, 0]
    _label(image, 0, LabelKind.KEYPOINTS, data)
    root, _ = _cvat(dataset)
    labels = root.findall("meta/project/labels/label")
    assert [(lb.findtext("name"), lb.findtext("type"), lb.findtext("parent")) for lb in labels] == [
        ("person", "skeleton", None),
        ("1", "points", "person"),
        ("2", "points", "person"),
        ("3", "points", "person"),
    ]
    svg = ElementTree.fromstring(f"<svg>{labels[0].findtext('svg')}</svg>")
    assert [c.get("data-label-name") for c in svg] == ["1", "2", "3"]

    (skeleton,) = root.findall("image/skeleton")
    assert skeleton.attrib == {"label": "person", "source": "manual", "z_order": "0"}
    points = [p.attrib for p in skeleton.findall("points")]
    assert points == [
        {
            "label": "1",
            "source": "manual",
            "outside": "0",
            "occluded": "0",
            "points": "16.00,12.00",
        },
        {
            "label": "2",
            "source": "manual",
            "outside": "0",
            "occluded": "1",
            "points": "32.00,24.00",
        },
        {"label": "3", "source": "manual", "outside": "1", "occluded": "0", "points": "0.00,0.00"},
    ]


@pytest.mark.django_db
def test_cvat_image_classes_are_tags(team):
    dataset = _dataset(team, Task.CLASSIFY)
    image = _image(dataset)
    _label(image, 1, LabelKind.TAG, [])
    _image(dataset)  # no class
    root, _ = _cvat(dataset)
    assert {lb.findtext("type") for lb in root.findall("meta/project/labels/label")} == {"tag"}
    first, second = root.findall("image")
    assert [t.attrib for t in first.findall("tag")] == [{"label": "dog", "source": "manual"}]
    assert list(second) == []


@pytest.mark.django_db
def test_cvat_names_are_escaped_and_the_file_is_written_as_cvat_writes_it(team):
    dataset = _dataset(team, Task.DETECT, classes=('a "b" <c> & d',))
    _label(_image(dataset), 0, LabelKind.BOX, [0.5, 0.5, 0.5, 0.5])
    with _zip(export_run(fmt="cvat", dataset=dataset)) as zf:
        text = zf.read("annotations.xml").decode()
    assert text.startswith('<?xml version="1.0" encoding="utf-8"?>\n<annotations>\n  <version>')
    assert text.endswith("\n</annotations>\n")
    assert "</box>" in text and "/>" not in text  # opened and closed, never self-closed
    root = ElementTree.fromstring(text.encode())
    assert root.find("image/box").get("label") == 'a "b" <c> & d'
    assert root.findtext("meta/project/labels/label/name") == 'a "b" <c> & d'


# --- Label Studio JSON ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_label_studio_rectangles_in_percent_with_tasks_and_images(team):
    dataset = _dataset(team, Task.DETECT)
    image = _image(dataset)
    _label(image, 1, LabelKind.BOX, [0.5, 0.5, 0.25, 0.5])
    empty = _image(dataset, split="val")
    tasks, names = _label_studio(dataset)
    assert len(tasks) == 2
    by_file = {t["file_upload"]: t for t in tasks}
    task = by_file[image.filename]
    assert task["data"] == {"image": f"/data/upload/1/{image.filename}"}
    assert by_file[empty.filename]["annotations"] == []
    (annotation,) = task["annotations"]
    (region,) = annotation["result"]
    assert region == {
        "original_width": 64,
        "original_height": 48,
        "image_rotation": 0,
        "value": {
            "x": 37.5,
            "y": 25.0,
            "width": 25.0,
            "height": 50.0,
            "rotation": 0,
            "rectanglelabels": ["dog"],
        },
        "id": region["id"],
        "from_name": "label",
        "to_name": "image",
        "type": "rectanglelabels",
        "origin": "manual",
    }
    assert sorted(n for n in names if n != "tasks.json") == sorted(
        [
            f"images/train/{image.filename}",
            f"images/val/{empty.filename}",
        ]
    )
    assert len({t["id"] for t in tasks}) == 2


@pytest.mark.django_db
def test_label_studio_polygons_in_percent(team):
    dataset = _dataset(team, Task.SEGMENT)
    _label(_image(dataset), 0, LabelKind.POLYGON, [0.1, 0.1, 0.5, 0.1, 0.3, 0.4])
    tasks, _ = _label_studio(dataset)
    (region,) = _results(tasks)
    assert region["type"] == "polygonlabels" and region["from_name"] == "label"
    assert region["value"]["polygonlabels"] == ["cat"] and region["value"]["closed"] is True
    flat = [v for point in region["value"]["points"] for v in point]
    assert flat == pytest.approx([10, 10, 50, 10, 30, 40], abs=1e-9)


@pytest.mark.django_db
def test_label_studio_oriented_box_turns_about_its_top_left_corner(team):
    dataset = _dataset(team, Task.OBB)
    corners = _rotated_corners(100, 50, 60, 20, 30, 200, 100)
    _label(_image(dataset, 200, 100), 0, LabelKind.OBB, corners)
    tasks, _ = _label_studio(dataset)
    (region,) = _results(tasks)
    value = region["value"]
    assert value["rectanglelabels"] == ["cat"] and region["type"] == "rectanglelabels"
    assert value["rotation"] == pytest.approx(30)
    # x, y: the first corner, in percent of the 200 × 100 image; width and height in percent.
    assert value["x"] == pytest.approx(corners[0] * 100) and value["x"] == pytest.approx(
        39.5096, 1e-4
    )
    assert value["y"] == pytest.approx(corners[1] * 100)
    assert (value["width"], value["height"]) == pytest.approx((30, 20))
    # Label Studio's own reading of it (label_studio_sdk convert_annotation_to_yolo_obb)
    x, y = value["x"] * 2, value["y"]
    w, h = value["width"] * 2, value["height"]
    c, s = math.cos(math.radians(value["rotation"])), math.sin(math.radians(value["rotation"]))
    back = [x, y, x + w * c, y + w * s, x + w * c - h * s, y + w * s + h * c, x - h * s, y + h * c]
    assert [v / (200 if i % 2 == 0 else 100) for i, v in enumerate(back)] == pytest.approx(corners)


@pytest.mark.django_db
def test_label_studio_keypoints_one_region_each_under_their_rectangle(team):
    dataset = _dataset(team, Task.POSE, classes=("person",), keypoint_shape=[3, 3])
    data = [0.5, 0.5, 0.5, 0.5, 0.25, 0.25, 2, 0.5, 0.5, 1, 0, 0, 0]
    _label(_image(dataset), 0, LabelKind.KEYPOINTS, data)
    tasks, _ = _label_studio(dataset)
    rect, *points = _results(tasks)
    assert rect["type"] == "rectanglelabels" and rect["value"]["rectanglelabels"] == ["person"]
    assert [rect["value"][k] for k in ("x", "y", "width", "height")] == [25, 25, 50, 50]
    assert len(points) == 2  # the absent third keypoint has no region
    for point in points:
        assert point["type"] == "keypointlabels" and point["from_name"] == "keypoint"
        assert point["parentID"] == rect["id"] and point["to_name"] == "image"
        assert (point["original_width"], point["original_height"]) == (64, 48)
    assert [(p["value"]["keypointlabels"], p["value"]["x"], p["value"]["y"]) for p in points] == [
        (["kp0"], 25, 25),
        (["kp1"], 50, 50),
    ]
    assert "hidden" not in points[0]["value"] and points[1]["value"]["hidden"] is True


@pytest.mark.django_db
def test_label_studio_image_classes_are_choices(team):
    dataset = _dataset(team, Task.CLASSIFY)
    _label(_image(dataset), 1, LabelKind.TAG, [])
    tasks, _ = _label_studio(dataset)
    (region,) = _results(tasks)
    assert region == {
        "value": {"choices": ["dog"]},
        "id": region["id"],
        "from_name": "choice",
        "to_name": "image",
        "type": "choices",
        "origin": "manual",
    }


# --- the sample datasets, every task ----------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("task", list(SAMPLES))
def test_every_label_of_a_sample_dataset_is_in_both_exports(team, task):
    source = sample_dataset(team, task)
    manifest = manifest_build(dataset=source)
    labels = sum(len(img["labels"]) for img in manifest["images"])
    root, cvat_names = _cvat(source)
    shapes = {
        Task.DETECT: "image/box",
        Task.SEGMENT: "image/polygon",
        Task.OBB: "image/box",
        Task.POSE: "image/skeleton",
        Task.CLASSIFY: "image/tag",
    }[task]
    assert len(root.findall(shapes)) == labels
    assert len(root.findall("image")) == len(manifest["images"])
    assert sum(n.startswith("images/") for n in cvat_names) == len(manifest["images"])
    tasks, ls_names = _label_studio(source)
    regions = [r for r in _results(tasks) if r["type"] != "keypointlabels"]
    assert len(regions) == labels and len(tasks) == len(manifest["images"])
    assert sum(n.startswith("images/") for n in ls_names) == len(manifest["images"])
    if task == Task.POSE:
        (skeleton_label, *points) = root.findall("meta/project/labels/label")
        assert skeleton_label.findtext("type") == "skeleton" and len(points) == 17
        assert all(len(s.findall("points")) == 17 for s in root.findall("image/skeleton"))


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", TOOLS)
def test_a_version_exports_as_saved_after_the_dataset_changed(team, fmt):
    source = sample_dataset(team, Task.DETECT)
    version = version_create(access=team.access("editor"), dataset=source, note="v1")

    def contents(archive):
        with _zip(archive) as zf:
            return {n: zf.read(n) for n in zf.namelist()}

    before = contents(export_run(fmt=fmt, version=version))
    assert before == contents(export_run(fmt=fmt, dataset=source))
    Label.objects.filter(image__dataset=source).delete()
    source.classes.filter(index=0).update(name="human")
    assert contents(export_run(fmt=fmt, dataset=source)) != before
    assert contents(export_run(fmt=fmt, version=version)) == before


def test_the_tools_are_export_formats():
    assert set(TOOLS) <= set(FORMATS)
    with pytest.raises(ServiceError, match="cvat and label-studio"):
        export_run(fmt="voc", dataset=None)


# --- downloads: pages and API, owner / member / stranger ------------------------------------


@pytest.mark.django_db
def test_tools_are_offered_on_the_pages_and_downloaded_by_members(team):
    source = _dataset(team, Task.DETECT)
    source.name = "Birds"
    source.save()
    _label(_image(source), 0, LabelKind.BOX, [0.5, 0.5, 0.5, 0.5])
    version_create(access=team.access("editor"), dataset=source)
    for role in ("owner", "viewer"):
        client = Client()
        client.force_login(team.user(role))
        pages = [
            client.get(reverse("dataset_detail", args=["acme", source.pk])).text,
            client.get(reverse("version_list", args=["acme", source.pk])).text,
            client.get(reverse("version_detail", args=["acme", source.pk, 1])).text,
        ]
        for fmt, member in (("cvat", "annotations.xml"), ("label-studio", "tasks.json")):
            assert reverse("dataset_export", args=["acme", source.pk, fmt]) in pages[0]
            version_url = reverse("version_export", args=["acme", source.pk, 1, fmt])
            assert version_url in pages[1] and version_url in pages[2]
            for url, name in (
                (reverse("dataset_export", args=["acme", source.pk, fmt]), f"Birds-{fmt}.zip"),
                (version_url, f"Birds-v1-{fmt}.zip"),
            ):
                response = client.get(url)
                assert response.status_code == 200, (role, url)
                assert response["Content-Disposition"] == f'attachment; filename="{name}"'
                body = b"".join(response.streaming_content)
                assert member in zipfile.ZipFile(io.BytesIO(body)).namelist()


@pytest.mark.django_db
def test_tools_by_the_api_with_a_read_key(team):
    source = sample_dataset(team, Task.DETECT)
    version_create(access=team.access("editor"), dataset=source)
    _, raw = api_key_create(access=team.access("admin"), name="r", scopes=["read"])
    api = Client(headers={"Authorization": f"Bearer {raw}"})
    url = f"/api/v1/datasets/{source.pk}/export"
    for fmt, member in (("cvat", "annotations.xml"), ("label-studio", "tasks.json")):
        for params in ({"format": fmt}, {"format": fmt, "version": 1}):
            response = api.get(url, params)
            assert response.status_code == 200
            body = b"".join(response.streaming_content)
            assert member in zipfile.ZipFile(io.BytesIO(body)).namelist()
    response = api.get(url, {"format": "cvat-video"})
    assert response.status_code == 400 and "label-studio" in response.json()["detail"]


@pytest.mark.django_db
def test_a_stranger_cannot_export_to_a_tool(team, stranger):
    source = DatasetFactory(workspace=team.workspace)
    version_create(access=team.access("editor"), dataset=source)
    client = Client()
    client.force_login(stranger)
    for fmt in TOOLS:
        for url in (
            reverse("dataset_export", args=["acme", source.pk, fmt]),
            reverse("version_export", args=["acme", source.pk, 1, fmt]),
        ):
            assert client.get(url).status_code == 404
        assert (
            client.get(f"/api/v1/datasets/{source.pk}/export", {"format": fmt}).status_code == 404
        )
    # Their own key, for their own workspace, reaches no dataset of ours either.
    own = workspace_access_for_user(user=stranger, slug="elsewhere")
    _, raw = api_key_create(access=own, name="theirs", scopes=["read"])
    api = Client(headers={"Authorization": f"Bearer {raw}"})
    for fmt in TOOLS:
        response = api.get(f"/api/v1/datasets/{source.pk}/export", {"format": fmt})
        assert response.status_code == 404


# --- round trips: Kestrel → tool export → Kestrel --------------------------------------------


def _round_trip_dataset(team, task: str) -> Dataset:
    """Two images in two splits with shapes of the task's kind at known places."""
    fields = {"keypoint_shape": [3, 3]} if task == Task.POSE else {}
    dataset = _dataset(team, task, **fields)
    a = _image(dataset, 64, 48)
    b = _image(dataset, 200, 100, split="val")
    if task == Task.DETECT:
        _label(a, 0, LabelKind.BOX, [0.5, 0.5, 0.25, 0.5])
        _label(b, 1, LabelKind.BOX, [0.3, 0.4, 0.2, 0.3])
        _label(b, 1, LabelKind.BOX, [0.7, 0.6, 0.1, 0.2])
    elif task == Task.SEGMENT:
        _label(a, 0, LabelKind.POLYGON, [0.1, 0.1, 0.5, 0.1, 0.3, 0.4])
        _label(b, 1, LabelKind.POLYGON, [0.2, 0.2, 0.6, 0.25, 0.55, 0.8, 0.25, 0.7])
    elif task == Task.OBB:
        _label(a, 0, LabelKind.OBB, _rotated_corners(32, 24, 20, 10, 0, 64, 48))
        _label(b, 1, LabelKind.OBB, _rotated_corners(100, 50, 60, 20, 30, 200, 100))
        _label(b, 0, LabelKind.OBB, _rotated_corners(150, 40, 30, 16, 300, 200, 100))
    elif task == Task.POSE:
        # Each box is the one around its keypoints that are there: a CVAT skeleton has no box,
        # the importer draws that one. The first object has an occluded and an absent point.
        a_points = [0.25, 0.25, 2, 0.75, 0.75, 1, 0, 0, 0]
        b_points = [0.3, 0.3, 2, 0.5, 0.7, 2, 0.4, 0.5, 2]
        _label(a, 0, LabelKind.KEYPOINTS, [0.5, 0.5, 0.5, 0.5, *a_points])
        _label(b, 1, LabelKind.KEYPOINTS, [0.4, 0.5, 0.2, 0.4, *b_points])
    else:
        _label(a, 0, LabelKind.TAG, [])
        _label(b, 1, LabelKind.TAG, [])
    return dataset


def _shapes(dataset: Dataset) -> dict:
    """sha256 → (split, labels as (class name, kind, data) sorted)."""
    manifest = manifest_build(dataset=dataset)
    classes = manifest["classes"]
    return {
        img["sha256"]: (
            img["split"],
            sorted((classes[lb["class"]], lb["kind"], lb["data"]) for lb in img["labels"]),
        )
        for img in manifest["images"]
    }


def _assert_same_shapes(source: Dataset, target: Dataset, *, occluded_seen=False) -> None:
    """Same images in the same splits, each with the same labels (class names, kinds, numbers
    within 1e-3). `occluded_seen`: an occluded keypoint may come back visible."""
    want, got = _shapes(source), _shapes(target)
    assert got.keys() == want.keys()
    for sha, (split, labels) in want.items():
        assert got[sha][0] == split, sha
        shapes = [(c, k, len(d)) for c, k, d in labels]
        assert [(c, k, len(d)) for c, k, d in got[sha][1]] == shapes, sha
        for (_, kind, a), (_, _, b) in zip(labels, got[sha][1], strict=True):
            if kind == LabelKind.KEYPOINTS and occluded_seen:
                a = [2 if i >= 4 and (i - 4) % 3 == 2 and v == 1 else v for i, v in enumerate(a)]
                b = [2 if i >= 4 and (i - 4) % 3 == 2 and v == 1 else v for i, v in enumerate(b)]
            assert b == pytest.approx(a, abs=1e-3), sha


def _export_and_import(team, tmp_path, source: Dataset, fmt: str):
    path = tmp_path / f"{fmt}.zip"
    path.write_bytes(export_run(fmt=fmt, dataset=source).read())
    target = dataset_create(access=team.access("editor"), name="Back", task=source.task)
    target, imp = _import(team, path, task=source.task, dataset=target)
    assert imp.status == "succeeded", imp.error
    assert imp.report["format"] == ("cvat-images" if fmt == "cvat" else "label-studio")
    assert imp.report["skipped"] == []
    target.refresh_from_db()
    return target


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", TOOLS)
@pytest.mark.parametrize("task", list(SAMPLES))
def test_an_export_imports_back_as_the_same_labels(team, tmp_path, fmt, task):
    source = _round_trip_dataset(team, task)
    target = _export_and_import(team, tmp_path, source, fmt)
    if task == Task.POSE:
        assert target.keypoint_shape == [3, 3]
    # Label Studio has no occluded keypoint: the export marks one `hidden`, and the import
    # reads it back as occluded (as label_studio_sdk's COCO import does).
    _assert_same_shapes(source, target)
    names = [c.name for c in target.classes.order_by("index")]
    if fmt == "cvat":  # its meta lists the labels in order; Label Studio's JSON lists none
        assert names == ["cat", "dog"]
    assert sorted(names) == ["cat", "dog"]


@pytest.mark.django_db
@pytest.mark.parametrize("fmt", TOOLS)
@pytest.mark.parametrize("task", [Task.DETECT, Task.SEGMENT, Task.CLASSIFY])
def test_a_sample_dataset_imports_back_unchanged(team, tmp_path, fmt, task):
    source = sample_dataset(team, task)
    target = _export_and_import(team, tmp_path, source, fmt)
    _assert_same_shapes(source, target)


@pytest.mark.django_db
def test_coco8_pose_through_cvat_keeps_every_keypoint_and_boxes_the_ones_there(team, tmp_path):
    """A CVAT skeleton has no box: each comes back as the box around its keypoints that are
    there; the keypoints themselves, and their visibility, come back as they were."""
    source = sample_dataset(team, Task.POSE)
    target = _export_and_import(team, tmp_path, source, "cvat")
    assert target.keypoint_shape == [17, 3]
    want, got = _shapes(source), _shapes(target)
    assert got.keys() == want.keys()
    for sha, (split, labels) in want.items():
        assert got[sha][0] == split
        before = sorted(d[4:] for _, _, d in labels)
        after = sorted(got[sha][1], key=lambda label: label[2][4:])
        assert len(after) == len(before)
        for points, (name, kind, data) in zip(before, after, strict=True):
            assert (name, kind) == ("person", LabelKind.KEYPOINTS)
            assert data[4:] == pytest.approx(points, abs=1e-3)
            triples = zip(points[0::3], points[1::3], points[2::3], strict=True)
            there = [(x, y) for x, y, v in triples if v]
            xs, ys = [x for x, _ in there], [y for _, y in there]
            box = [(min(xs) + max(xs)) / 2, (min(ys) + max(ys)) / 2]
            assert data[:2] == pytest.approx(box, abs=1e-3)
            assert data[2:4] == pytest.approx([max(xs) - min(xs), max(ys) - min(ys)], abs=1e-3)


@pytest.mark.django_db
def test_coco8_pose_through_label_studio_keeps_every_keypoint_in_its_place(team, tmp_path):
    source = sample_dataset(team, Task.POSE)
    target = _export_and_import(team, tmp_path, source, "label-studio")
    assert target.keypoint_shape == [17, 3]
    _assert_same_shapes(source, target)
