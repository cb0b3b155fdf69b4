"""Dataset statistics: the numbers, the sample of boxes, and the page."""

import json
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from datasets.models import Image, Label
from datasets.services.stats import dataset_stats, shape_size_px
from tests.datasets.factories import (
    DatasetClassFactory,
    DatasetFactory,
    ImageFactory,
    blob_for,
    png_bytes,
)

pytestmark = pytest.mark.django_db

_colour = iter(range(1, 10**6))


def image(dataset, *, split="train", size=(64, 48)) -> Image:
    n = next(_colour)
    data = png_bytes(*size, color=(n % 256, (n // 256) % 256, 99))
    return ImageFactory(dataset=dataset, blob=blob_for(data), split=split)


def label(img, cls, data, kind="box") -> Label:
    made = Label.objects.create(image=img, dataset_class=cls, kind=kind, data=data)
    Image.objects.filter(pk=img.pk).update(label_count=img.labels.count())
    return made


@pytest.fixture
def small(team):
    """3 train images 640×480, 1 val 320×240, 1 test 640×480; 5 labels in 2 classes."""
    dataset = DatasetFactory(workspace=team.workspace, name="Stats DS")
    cars = DatasetClassFactory(dataset=dataset, index=0, name="car")
    bikes = DatasetClassFactory(dataset=dataset, index=1, name="bike")
    DatasetClassFactory(dataset=dataset, index=2, name="bus")
    train = [image(dataset, size=(640, 480)) for _ in range(3)]
    val = image(dataset, split="val", size=(320, 240))
    image(dataset, split="test", size=(640, 480))
    label(train[0], cars, [0.5, 0.5, 0.01, 0.01])  # 6.4 × 4.8 px → side 5.5: "0–8 px"
    label(train[0], cars, [0.5, 0.5, 0.1, 0.1])  # 64 × 48 → 55.4: "32–64 px"
    label(train[1], cars, [0.5, 0.5, 0.5, 0.5])  # 320 × 240 → 277: "256–512 px"
    label(val, bikes, [0.2, 0.2, 0.4, 0.2, 0.4, 0.6, 0.2, 0.6], kind="polygon")  # 64 × 96
    label(val, bikes, [], kind="tag")  # no size
    return dataset


def test_numbers(small):
    stats = dataset_stats(dataset=small)
    assert stats["image_total"] == 5 and stats["label_total"] == 5
    assert [(s["split"], s["images"], s["labels"]) for s in stats["splits"]] == [
        ("train", 3, 3),
        ("val", 1, 2),
        ("test", 1, 0),
    ]
    assert [(c["name"], c["labels"], c["images"]) for c in stats["classes"]] == [
        ("car", 3, 2),
        ("bike", 2, 1),
        ("bus", 0, 0),
    ]
    assert stats["image_sizes"] == [
        {"width": 640, "height": 480, "images": 4},
        {"width": 320, "height": 240, "images": 1},
    ]
    assert stats["image_size_range"] == {
        "min_width": 320,
        "max_width": 640,
        "min_height": 240,
        "max_height": 480,
    }
    per_image = {b["bin"]: b["images"] for b in stats["labels_per_image"]}
    assert per_image["0"] == 2 and per_image["1"] == 1 and per_image["2"] == 2

    boxes = stats["boxes"]
    assert boxes["total"] == 4 and boxes["sampled"] == 4  # the tag is not a shape
    histogram = {b["bin"]: b["boxes"] for b in boxes["histogram"]}
    assert histogram["0–8 px"] == 1
    assert histogram["32–64 px"] == 1
    assert histogram["64–96 px"] == 1  # the polygon: √(64 × 96) = 78
    assert histogram["256–512 px"] == 1
    assert sum(histogram.values()) == 4
    assert boxes["coco"] == {"small": 1, "medium": 2, "large": 1}
    assert sorted(map(tuple, boxes["scatter"])) == [
        (6.4, 4.8),
        (64.0, 48.0),
        (64.0, 96.0),
        (320.0, 240.0),
    ]


def test_shape_sizes():
    assert shape_size_px("box", [0.5, 0.5, 0.5, 0.25], 200, 100) == (100, 25)
    assert shape_size_px("keypoints", [0.5, 0.5, 0.5, 0.25, 0.1, 0.1, 2], 200, 100) == (100, 25)
    w, h = shape_size_px("obb", [0, 0, 0.3, 0, 0.3, 0.4, 0, 0.4], 100, 100)
    assert (round(w, 6), round(h, 6)) == (30, 40)
    assert shape_size_px("tag", [], 10, 10) is None
    assert shape_size_px("box", ["x"], 10, 10) is None


def test_boxes_are_sampled_across_the_dataset(small):
    cls = small.classes.first()
    img = small.images.first()
    Label.objects.bulk_create(
        Label(image=img, dataset_class=cls, kind="box", data=[0.5, 0.5, 0.2, 0.2])
        for _ in range(120)
    )
    stats = dataset_stats(dataset=small, max_boxes=50)
    assert stats["boxes"]["total"] == 124
    assert 0 < stats["boxes"]["sampled"] <= 50
    assert stats["boxes"]["sampled"] >= 40  # every 3rd of 124 ≈ 41, not just the first few


def test_an_empty_dataset(team):
    stats = dataset_stats(dataset=DatasetFactory(workspace=team.workspace))
    assert stats["image_total"] == 0 and stats["boxes"]["sampled"] == 0
    assert stats["boxes"]["median_width"] is None


def _url(dataset) -> str:
    return reverse("dataset_stats", kwargs={"ws_slug": "acme", "pk": dataset.pk})


def test_page_shows_tables_and_chart_data(small, team, stranger, client):
    client.force_login(team.viewer)
    response = client.get(_url(small))
    assert response.status_code == 200
    page = response.content.decode()
    # tables work without JavaScript
    assert "<td>car</td><td>3</td><td>2</td>" in page
    assert "<td>640 × 480</td><td>4</td>" in page
    # the charts' data is JSON in a non-executable script tag; no inline code anywhere
    match = re.search(r'<script id="stats-data" type="application/json">(.*?)</script>', page)
    data = json.loads(match.group(1))
    assert data["splits"][0] == {"name": "Train", "images": 3}
    assert data["classes"][0] == {"name": "car", "labels": 3}
    assert [s for s in re.findall(r"<script[^>]*>", page) if "src=" not in s] == [
        '<script id="stats-data" type="application/json">'
    ]
    assert "style=" not in page and "onclick" not in page
    assert "vendor/chartjs/chart.umd.min.js" in page and "js/stats.js" in page

    client.force_login(stranger)
    assert client.get(_url(small)).status_code == 404


def test_class_names_cannot_break_out_of_the_json(team, client):
    dataset = DatasetFactory(workspace=team.workspace)
    cls = DatasetClassFactory(dataset=dataset, index=0, name="</script><script>alert(1)")
    label(image(dataset), cls, [0.5, 0.5, 0.1, 0.1])
    client.force_login(team.viewer)
    page = client.get(_url(dataset)).content.decode()
    assert "</script><script>alert(1)" not in page


def test_page_queries_do_not_grow_with_the_dataset(small, team, client):
    client.force_login(team.viewer)

    def count() -> int:
        with CaptureQueriesContext(connection) as ctx:
            assert client.get(_url(small)).status_code == 200
        return len(ctx.captured_queries)

    few = count()
    classes = [DatasetClassFactory(dataset=small, index=10 + i) for i in range(5)]
    for i in range(10):
        img = image(small, split=("train", "val", "test")[i % 3], size=(100 + i, 80))
        for cls in classes:
            label(img, cls, [0.5, 0.5, 0.3, 0.3])
    assert count() == few
    assert few <= 12
