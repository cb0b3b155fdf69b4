"""Semantic segmentation and depth datasets, apart from import: the task where a dataset is made
and edited (with the depth scale), the gallery's mask overlays and filters, statistics, health
and version checks, exports, the polygon → semantic conversion, clone and blob collection."""

import io
import json
import zipfile

import numpy as np
import pytest
from django.core.files.storage import default_storage
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from PIL import Image as PILImage

from core.errors import ServiceError
from datasets.models import (
    IGNORE_INDEX,
    Blob,
    Dataset,
    Image,
    LabelKind,
    PixelMap,
    Split,
    Task,
)
from datasets.services.clone import dataset_clone
from datasets.services.datasets import blobs_collect_garbage, dataset_create
from datasets.services.export import export_coco, export_ndjson, export_yolo
from datasets.services.health import health_run
from datasets.services.health_checks import Kind
from datasets.services.pixel_maps import overlay_key, pixel_map_save
from datasets.services.semantic_convert import (
    semantic_convert_run,
    semantic_dataset_from_segment,
)
from datasets.services.stats import dataset_stats
from datasets.services.version_checks import version_check
from datasets.services.versions import version_create
from tests.datasets.factories import (
    DatasetClassFactory,
    DatasetFactory,
    ImageFactory,
    LabelFactory,
)

pytestmark = pytest.mark.django_db

W, H = 64, 48  # the factories' images


def semantic(workspace, *, name="Roads", classes=("road", "car")) -> Dataset:
    dataset = DatasetFactory(workspace=workspace, name=name, task=Task.SEMANTIC)
    for i, class_name in enumerate(classes):
        DatasetClassFactory(dataset=dataset, index=i, name=class_name)
    return dataset


def depth(workspace, *, name="Rooms", scale=1000.0) -> Dataset:
    return DatasetFactory(workspace=workspace, name=name, task=Task.DEPTH, depth_scale=scale)


def mask(*regions, shape=(H, W), fill=IGNORE_INDEX) -> np.ndarray:
    """A mask of `fill` with (class, rows slice, cols slice) regions."""
    out = np.full(shape, fill, dtype=np.uint8)
    for value, rows, cols in regions:
        out[rows, cols] = value
    return out


def with_map(dataset, array, **fields) -> Image:
    image = ImageFactory(dataset=dataset, **fields)
    pixel_map_save(image=image, array=array, dataset=dataset)
    return image


def url(name, dataset, **kw) -> str:
    return reverse(name, kwargs={"ws_slug": dataset.workspace.slug, "pk": dataset.pk, **kw})


# --- the task and the depth scale -----------------------------------------------------------


def test_new_dataset_page_offers_the_pixel_tasks_and_takes_a_depth_scale(team, client):
    client.force_login(team.editor)
    page = client.get(reverse("dataset_create", kwargs={"ws_slug": "acme"})).content.decode()
    assert 'value="semantic"' in page and "Semantic segmentation" in page
    assert 'value="depth"' in page and 'name="depth_scale"' in page

    target = reverse("dataset_create", kwargs={"ws_slug": "acme"})
    response = client.post(target, {"name": "Seg", "task": "semantic", "depth_scale": "junk"})
    assert response.status_code == 302  # another task's scale is not read
    seg = Dataset.objects.get(name="Seg")
    assert seg.task == Task.SEMANTIC and seg.depth_scale is None

    client.post(target, {"name": "Mm", "task": "depth", "depth_scale": ""})
    assert Dataset.objects.get(name="Mm").depth_scale == 1000
    client.post(target, {"name": "Metres", "task": "depth", "depth_scale": "1"})
    assert Dataset.objects.get(name="Metres").depth_scale == 1


@pytest.mark.parametrize("bad", ["0", "-5", "nan", "inf", "abc"])
def test_a_depth_scale_that_is_not_a_positive_number_is_refused_with_the_reason(team, client, bad):
    client.force_login(team.editor)
    target = reverse("dataset_create", kwargs={"ws_slug": "acme"})
    response = client.post(target, {"name": "D", "task": "depth", "depth_scale": bad})
    assert response.status_code == 200
    assert "The depth scale must be a positive number" in response.content.decode()
    assert not Dataset.objects.filter(name="D").exists()
    with pytest.raises(ServiceError, match="positive number"):
        dataset_create(access=team.access("editor"), name="D", task="depth", depth_scale=bad)


def test_the_api_creates_pixel_datasets_and_refuses_a_bad_depth_scale(team):
    from workspaces.services.keys import api_key_create

    _, raw = api_key_create(access=team.access("admin"), name="k", scopes=["read", "write"])
    api = Client(headers={"Authorization": f"Bearer {raw}"})

    def post(**body):
        return api.post("/api/v1/datasets", body, content_type="application/json")

    created = post(name="Depth", task="depth", depth_scale=256)
    assert created.status_code == 201, created.content
    assert created.json()["task"] == "depth" and created.json()["depth_scale"] == 256
    assert post(name="Sem", task="semantic", classes=["a"]).json()["depth_scale"] is None
    refused = post(name="Bad", task="depth", depth_scale=-1)
    assert refused.status_code == 400 and "positive number" in refused.json()["detail"]
    assert not Dataset.objects.filter(name="Bad").exists()


def test_settings_change_the_depth_scale_and_rescale_the_stored_metres(team, client):
    dataset = depth(team.workspace)
    image = with_map(dataset, np.full((H, W), 2000, dtype=np.uint16))
    assert image.pixel_map.stats["median"] == 2.0  # 2000 mm
    client.force_login(team.editor)
    page = client.get(url("dataset_edit", dataset)).content.decode()
    assert 'name="depth_scale"' in page and 'value="1000' in page
    response = client.post(url("dataset_edit", dataset), {"name": dataset.name, "depth_scale": "0"})
    assert response.status_code == 200 and "positive number" in response.content.decode()
    client.post(url("dataset_edit", dataset), {"name": dataset.name, "depth_scale": "500"})
    dataset.refresh_from_db()
    assert dataset.depth_scale == 500
    assert PixelMap.objects.get(image=image).stats["median"] == 4.0  # the same 2000, in ½ mm
    # Another task's settings have no depth scale.
    other = semantic(team.workspace)
    assert 'name="depth_scale"' not in client.get(url("dataset_edit", other)).content.decode()


# --- the gallery --------------------------------------------------------------------------------


def test_gallery_tiles_carry_the_mask_overlay_and_its_view_serves_the_stored_png(team, client):
    dataset = semantic(team.workspace)
    drawn = with_map(dataset, mask((0, slice(0, 24), slice(None)), (1, slice(24, 48), slice(0, 8))))
    bare = ImageFactory(dataset=dataset)
    client.force_login(team.viewer)
    page = client.get(url("dataset_gallery", dataset)).content.decode()
    overlay = url("dataset_image_overlay", dataset, image_pk=drawn.pk)
    sha = drawn.pixel_map.blob.sha256
    assert f'class="mask-overlay" src="{overlay}?m={sha[:16]}"' in page
    assert page.count('data-testid="tile-mask"') == 1
    assert 'data-testid="tile-no-mask"' in page  # the bare image says it has none
    assert "2 classes" in page

    response = client.get(overlay)
    assert response.status_code == 200 and response["Content-Type"] == "image/png"
    body = b"".join(response.streaming_content) if response.streaming else response.content
    with default_storage.open(overlay_key(sha), "rb") as f:
        assert body == f.read()
    rgba = np.asarray(PILImage.open(io.BytesIO(body)))
    assert rgba.shape == (H, W, 4) and rgba[0, 0, 3] > 0 and rgba[30, 30, 3] == 0  # ignore: clear
    assert client.get(overlay, HTTP_IF_NONE_MATCH=response["ETag"]).status_code == 304
    assert client.get(url("dataset_image_overlay", dataset, image_pk=bare.pk)).status_code == 404
    detail = client.get(url("dataset_image_detail", dataset, image_pk=drawn.pk)).content.decode()
    assert 'data-testid="mask-overlay"' in detail


def test_a_new_mask_is_a_new_overlay_url(team, client):
    dataset = semantic(team.workspace)
    image = with_map(dataset, mask((0, slice(None), slice(None))))
    client.force_login(team.viewer)
    before = client.get(url("dataset_gallery", dataset)).content.decode()
    pixel_map_save(image=Image.objects.get(pk=image.pk), array=mask((1, slice(None), slice(None))))
    after = client.get(url("dataset_gallery", dataset)).content.decode()
    src = 'class="mask-overlay" src="'
    assert before.split(src)[1].split('"')[0] != after.split(src)[1].split('"')[0]


@pytest.mark.parametrize("role", ["owner", "viewer"])
def test_the_overlay_is_served_to_members(team, role):
    dataset = semantic(team.workspace)
    image = with_map(dataset, mask((0, slice(None), slice(None))))
    client = Client()
    client.force_login(team.user(role))
    assert client.get(url("dataset_image_overlay", dataset, image_pk=image.pk)).status_code == 200


def test_a_stranger_gets_404_for_the_overlay_and_a_foreign_image(team, stranger):
    dataset = semantic(team.workspace)
    image = with_map(dataset, mask((0, slice(None), slice(None))))
    client = Client()
    client.force_login(stranger)
    assert client.get(url("dataset_image_overlay", dataset, image_pk=image.pk)).status_code == 404
    # A member asking for another dataset's image through this one: 404 too.
    other = semantic(team.workspace, name="Other")
    client.force_login(team.owner)
    assert client.get(url("dataset_image_overlay", other, image_pk=image.pk)).status_code == 404


def _tiles(client, dataset, **params) -> set[int]:
    page = client.get(url("dataset_gallery", dataset), params).content.decode()
    return {int(v) for v in __import__("re").findall(r'data-image="(\d+)"', page)}


def test_gallery_filters_by_mask_and_by_the_classes_a_mask_holds(team, client):
    dataset = semantic(team.workspace)
    road, car = dataset.classes.order_by("index")
    only_road = with_map(dataset, mask((0, slice(None), slice(None))))
    both = with_map(dataset, mask((0, slice(0, 10), slice(None)), (1, slice(10, 20), slice(None))))
    empty = with_map(dataset, mask())  # all ignore
    bare = ImageFactory(dataset=dataset)
    client.force_login(team.viewer)
    assert _tiles(client, dataset, mask="yes") == {only_road.pk, both.pk, empty.pk}
    assert _tiles(client, dataset, mask="no") == {bare.pk}
    assert _tiles(client, dataset, **{"class": road.pk}) == {only_road.pk, both.pk}
    assert _tiles(client, dataset, **{"class": car.pk}) == {both.pk}
    assert _tiles(client, dataset, **{"class": car.pk, "mask": "no"}) == set()
    foreign = semantic(team.workspace, name="F").classes.first()
    assert _tiles(client, dataset, **{"class": foreign.pk}) == set()
    page = client.get(url("dataset_gallery", dataset), {"mask": "no"}).content.decode()
    assert 'data-testid="mask-filter"' in page and "1 image match these filters" in page
    # The image page's neighbours follow the class filter too.
    detail = client.get(
        url("dataset_image_detail", dataset, image_pk=only_road.pk), {"class": car.pk}
    )
    assert detail.status_code == 200


def _gallery_queries(client, dataset) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url("dataset_gallery", dataset)).status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize("make", [semantic, depth])
def test_gallery_queries_do_not_grow_with_the_maps_on_the_page(team, client, make):
    dataset = make(team.workspace)
    value = (
        (lambda: mask((0, slice(None), slice(None))))
        if dataset.task == Task.SEMANTIC
        else (lambda: np.full((H, W), 1500, dtype=np.uint16))
    )
    with_map(dataset, value())
    client.force_login(team.viewer)
    few = _gallery_queries(client, dataset)
    for _ in range(6):
        with_map(dataset, value())
        ImageFactory(dataset=dataset)
    assert _gallery_queries(client, dataset) == few <= 14  # as test_gallery.py's pages
    with CaptureQueriesContext(connection) as ctx:
        client.get(url("dataset_gallery", dataset), {"class": "1", "mask": "yes"})
    assert len(ctx.captured_queries) <= 14


# --- statistics ---------------------------------------------------------------------------------


def test_semantic_statistics_are_pixel_shares_and_images_per_class(team, client):
    dataset = semantic(team.workspace, classes=("road", "car", "sky"))
    # road: 48*64 - 100 + 48*64 = 6044 px on 2 images; car: 100 px on 1; sky: nowhere.
    first = mask((0, slice(None), slice(None)))
    first[:10, :10] = 1
    with_map(dataset, first)
    with_map(dataset, mask((0, slice(None), slice(None))), split=Split.VAL)
    ImageFactory(dataset=dataset)
    stats = dataset_stats(dataset=dataset)
    rows = {c["name"]: c for c in stats["classes"]}
    total = 2 * H * W
    assert stats["pixel"]["labelled_pixels"] == total
    assert rows["road"]["pixels"] == total - 100 and rows["road"]["images"] == 2
    assert rows["car"]["pixels"] == 100 and rows["car"]["images"] == 1
    assert rows["car"]["share"] == round(100 * 100 / total, 2)
    assert rows["sky"]["pixels"] == 0 and rows["sky"]["images"] == 0
    assert {s["split"]: s["labels"] for s in stats["splits"]} == {"train": 1, "val": 1, "test": 0}
    assert stats["label_total"] == 2  # masks, not label rows

    client.force_login(team.viewer)
    page = client.get(url("dataset_stats", dataset)).content.decode()
    assert "Pixels per class" in page and "Box sizes" not in page
    assert "2 masks" in page
    data = json.loads(page.split('id="stats-data" type="application/json">')[1].split("<")[0])
    assert data["measure"] == "share" and data["classes"][0]["name"] == "road"


def test_depth_statistics_are_the_maps_and_their_range(team, client):
    dataset = depth(team.workspace)
    near = np.full((H, W), 500, dtype=np.uint16)
    far = np.full((H, W), 4000, dtype=np.uint16)
    far[0, 0] = 9000
    with_map(dataset, near)
    with_map(dataset, far)
    with_map(dataset, np.zeros((H, W), dtype=np.uint16))  # no reading at all
    ImageFactory(dataset=dataset)
    d = dataset_stats(dataset=dataset)["pixel"]["depth"]
    assert d["with_readings"] == 2 and d["without_readings"] == 1
    assert d["min"] == 0.5 and d["max"] == 9.0 and d["median"] == pytest.approx(2.25)
    client.force_login(team.viewer)
    page = client.get(url("dataset_stats", dataset)).content.decode()
    assert 'data-testid="stats-depth"' in page and "3 of 4" in page and "9.0 m" in page
    assert "Labels per class" not in page


# --- health and version checks -----------------------------------------------------------------


def _kinds(dataset) -> dict[str, object]:
    return {f.kind: f for f in health_run(dataset=dataset)}


def test_semantic_health_finds_empty_masks_wrong_sizes_and_absent_classes(team):
    dataset = semantic(team.workspace, classes=("road", "car", "sky"))
    good = with_map(dataset, mask((0, slice(None), slice(None)), (1, slice(0, 5), slice(0, 5))))
    with_map(dataset, mask((0, slice(None), slice(None))), split=Split.VAL)
    empty = with_map(dataset, mask())
    bare = ImageFactory(dataset=dataset)
    # A map of another size (imported before a check, or the image replaced): stored as is.
    wrong = ImageFactory(dataset=dataset)
    stored = PixelMap.objects.get(image=good)
    PixelMap.objects.create(
        image=wrong,
        blob=Blob.objects.create(
            sha256="e" * 64, size=1, content_type="image/png", width=32, height=16
        ),
        stats=stored.stats,
    )
    kinds = _kinds(dataset)
    assert kinds[Kind.MASK_SIZE].severity == "error" and kinds[Kind.MASK_SIZE].image_ids == [
        wrong.pk
    ]
    assert "32×16 for 64×48" in kinds[Kind.MASK_SIZE].message
    assert kinds[Kind.MASK_EMPTY].image_ids == [empty.pk]
    assert "“sky”" in kinds[Kind.CLASS_NOT_IN_MASKS].message
    assert "“road”" not in kinds[Kind.CLASS_NOT_IN_MASKS].message
    assert kinds[Kind.MASK_MISSING].image_ids == [bare.pk]
    # Label-row checks that mean nothing here are not run.
    for kind in (Kind.NO_LABELS, Kind.UNLABELLED, Kind.CLASS_EMPTY, Kind.LABEL_KIND):
        assert kind not in kinds


def test_depth_health_finds_maps_without_readings_and_no_maps_at_all(team):
    dataset = depth(team.workspace)
    ImageFactory(dataset=dataset)
    assert _kinds(dataset)[Kind.NO_MASKS].severity == "error"
    blank = with_map(dataset, np.zeros((H, W), dtype=np.uint16))
    with_map(dataset, np.full((H, W), 900, dtype=np.uint16), split=Split.VAL)
    kinds = _kinds(dataset)
    assert Kind.NO_MASKS not in kinds
    assert kinds[Kind.MASK_EMPTY].image_ids == [blank.pk]
    assert "no valid reading" in kinds[Kind.MASK_EMPTY].message
    assert Kind.MASK_SIZE not in kinds


def test_version_checks_of_pixel_versions(team):
    dataset = semantic(team.workspace)
    ImageFactory(dataset=dataset)
    ImageFactory(dataset=dataset, split=Split.VAL)
    none = version_check(version_create(access=team.access("owner"), dataset=dataset))
    assert [f.code for f in none.errors] == [Kind.NO_MASKS]
    assert "No image of this version has a mask" in none.errors[0].sentence

    for image in Image.objects.filter(dataset=dataset):
        pixel_map_save(image=image, array=mask((0, slice(None), slice(None))))
    ImageFactory(dataset=dataset)  # one without a mask
    some = version_check(version_create(access=team.access("owner"), dataset=dataset))
    assert not some.errors
    assert [f.code for f in some.warnings] == [Kind.MASK_MISSING]
    assert "1 image of 3 has no mask" in some.warnings[0].sentence
    assert (some.train_images, some.val_images) == (1, 1)  # the masked ones


# --- versions and exports -----------------------------------------------------------------------


def test_the_version_page_counts_masks(team, client):
    dataset = semantic(team.workspace)
    with_map(dataset, mask((0, slice(None), slice(None))))
    ImageFactory(dataset=dataset)
    version = version_create(access=team.access("owner"), dataset=dataset)
    assert version.summary["masks"] == 1
    client.force_login(team.viewer)
    page = client.get(url("version_detail", dataset, number=version.number)).content.decode()
    assert "with 1 mask in 2 classes" in page
    assert "1 of 2 images" in page and "coco" not in page


def test_ndjson_export_of_semantic_and_depth(team):
    sem = semantic(team.workspace)
    image = with_map(sem, mask((1, slice(None), slice(None))), split=Split.VAL)
    ImageFactory(dataset=sem)
    with zipfile.ZipFile(export_ndjson(dataset=sem)) as zf:
        lines = [json.loads(x) for x in zf.read("dataset.ndjson").splitlines()]
        assert lines[0]["task"] == "semantic" and lines[0]["class_names"] == {
            "0": "road",
            "1": "car",
        }
        assert len(lines) == 2  # the image without a mask is left out
        record = lines[1]
        stem = record["file"].rsplit(".", 1)[0]
        assert record["mask"] == {"file": f"{stem}.png"} and record["split"] == "val"
        png = zf.read(f"masks/val/{stem}.png")
        assert png == default_storage.open(image.pixel_map.blob.storage_key).read()
        assert f"images/val/{record['file']}" in zf.namelist()

    dep = depth(team.workspace, scale=256)
    with_map(dep, np.full((H, W), 512, dtype=np.uint16))
    with zipfile.ZipFile(export_ndjson(dataset=dep)) as zf:
        head, record = (json.loads(x) for x in zf.read("dataset.ndjson").splitlines())
        assert head["task"] == "depth" and head["depth_scale"] == 256
        stem = record["file"].rsplit(".", 1)[0]
        assert record["depth"] == {"file": f"{stem}.png"}
        depth_png = np.asarray(PILImage.open(io.BytesIO(zf.read(f"depth/train/{stem}.png"))))
        assert depth_png.dtype == np.uint16 and depth_png.max() == 512


def test_coco_export_of_pixel_tasks_is_refused_with_a_reason(team, client):
    for dataset in (semantic(team.workspace), depth(team.workspace)):
        with pytest.raises(ServiceError, match="COCO has no place for"):
            export_coco(dataset=dataset)
    dataset = Dataset.objects.get(name="Roads")
    client.force_login(team.viewer)
    response = client.get(url("dataset_export", dataset, fmt="coco"), follow=True)
    assert "COCO has no place for semantic masks" in response.content.decode()


# --- polygons → semantic --------------------------------------------------------------------------


def _segment(workspace):
    source = DatasetFactory(workspace=workspace, name="Polys", task=Task.SEGMENT)
    cat = DatasetClassFactory(dataset=source, index=0, name="cat")
    dog = DatasetClassFactory(dataset=source, index=2, name="dog")  # a gap in the indexes
    image = ImageFactory(dataset=source)
    square = [0.0, 0.0, 0.5, 0.0, 0.5, 0.5, 0.0, 0.5]  # the top-left quarter
    small = [0.25, 0.25, 0.5, 0.25, 0.5, 0.5, 0.25, 0.5]  # inside it: drawn over it
    LabelFactory(image=image, dataset_class=cat, kind=LabelKind.POLYGON, data=square)
    LabelFactory(image=image, dataset_class=dog, kind=LabelKind.POLYGON, data=small)
    LabelFactory(image=image, dataset_class=dog, kind=LabelKind.BOX, data=[0.9, 0.9, 0.1, 0.1])
    empty = ImageFactory(dataset=source, split=Split.VAL)
    return source, image, empty


def test_a_segment_dataset_becomes_a_semantic_one_with_ultralytics_masks(team, client):
    from ultralytics.data.dataset import PolygonSemanticDataset
    from ultralytics.data.utils import add_polygon_background

    source, image, empty = _segment(team.workspace)
    client.force_login(team.editor)
    page = client.get(url("dataset_detail", source)).content.decode()
    assert 'data-testid="semantic-convert"' in page
    response = client.post(url("dataset_semantic_convert", source))
    target = Dataset.objects.get(name="Polys (semantic)")
    assert response.status_code == 302 and response["Location"] == url("dataset_detail", target)
    assert target.task == Task.SEMANTIC and target.workspace == team.workspace
    assert list(target.classes.values_list("index", "name")) == [
        (0, "cat"),
        (1, "dog"),
        (2, "background"),
    ]
    images = list(target.images.order_by("id"))
    assert [(i.blob_id, i.split) for i in images] == [
        (image.blob_id, "train"),
        (empty.blob_id, "val"),
    ]
    assert not PixelMap.objects.filter(image__dataset=target).exists()  # the worker draws them

    assert semantic_convert_run(source_id=source.pk, target_id=target.pk) == 2
    assert semantic_convert_run(source_id=source.pk, target_id=target.pk) == 0  # idempotent
    from datasets.services.pixel_maps import pixel_map_load

    drawn = pixel_map_load(PixelMap.objects.get(image=images[0]))
    # Ultralytics' own rasteriser on the same polygons gives the same pixels.
    data = add_polygon_background({"names": {0: "cat", 1: "dog"}})
    ds = PolygonSemanticDataset.__new__(PolygonSemanticDataset)
    ds.data, ds.bg_class_idx = data, data["bg_class_idx"]
    ds.labels = [
        {
            "cls": np.array([[0], [1]]),
            "segments": [
                np.array([[0, 0], [0.5, 0], [0.5, 0.5], [0, 0.5]], dtype=np.float32),
                np.array([[0.25, 0.25], [0.5, 0.25], [0.5, 0.5], [0.25, 0.5]], dtype=np.float32),
            ],
        }
    ]
    expected = ds.load_mask(0, image_shape=(H, W))
    assert np.array_equal(drawn, expected)
    assert drawn[2, 2] == 0 and drawn[16, 20] == 1 and drawn[40, 60] == 2  # cat, dog, background
    assert (pixel_map_load(PixelMap.objects.get(image=images[1])) == 2).all()
    assert Image.objects.get(pk=images[0].pk).status == "labelled"


def test_only_segment_datasets_convert_and_strangers_get_404(team, stranger, client):
    dataset = semantic(team.workspace)
    with pytest.raises(ServiceError, match="Only a segment"):
        semantic_dataset_from_segment(access=team.access("editor"), source=dataset)
    source, _, _ = _segment(team.workspace)
    DatasetClassFactory(dataset=source, index=5, name="background")
    with pytest.raises(ServiceError, match="already has a class named “background”"):
        semantic_dataset_from_segment(access=team.access("editor"), source=source)
    client.force_login(stranger)
    assert client.post(url("dataset_semantic_convert", source)).status_code == 404
    client.force_login(team.viewer)
    assert client.post(url("dataset_semantic_convert", source)).status_code == 403
    assert Dataset.objects.filter(task=Task.SEMANTIC).count() == 1


# --- clone and blob collection ------------------------------------------------------------------


def test_clone_copies_maps_and_depth_scale(team):
    dataset = depth(team.workspace, scale=256)
    first = with_map(dataset, np.full((H, W), 300, dtype=np.uint16))
    ImageFactory(dataset=dataset)
    clone = dataset_clone(access=team.access("editor"), source=dataset, name="Copy")
    assert clone.depth_scale == 256
    maps = PixelMap.objects.filter(image__dataset=clone)
    assert maps.count() == 1
    copied = maps.get()
    assert copied.blob_id == first.pixel_map.blob_id and copied.stats == first.pixel_map.stats
    assert copied.image.blob_id == first.blob_id
    sem = semantic(team.workspace)
    with_map(sem, mask((1, slice(None), slice(None))))
    sem_clone = dataset_clone(access=team.access("editor"), source=sem, name="Sem copy")
    assert PixelMap.objects.filter(image__dataset=sem_clone).get().stats == {str(1): H * W}


@pytest.mark.django_db(transaction=True)
def test_garbage_collection_keeps_map_blobs_and_deletes_a_collected_maps_overlay(team):
    dataset = semantic(team.workspace)
    image = with_map(dataset, mask((0, slice(None), slice(None))))
    map_blob = image.pixel_map.blob
    assert blobs_collect_garbage() == 0  # the mask's blob has no image, but a map uses it
    assert default_storage.exists(map_blob.storage_key)
    PixelMap.objects.filter(pk=image.pixel_map.pk).delete()
    assert blobs_collect_garbage() == 1
    assert not Blob.objects.filter(pk=map_blob.pk).exists()
    assert not default_storage.exists(map_blob.storage_key)
    assert not default_storage.exists(overlay_key(map_blob.sha256))


# --- stock Ultralytics trains the YOLO export ---------------------------------------------------


@pytest.mark.same_on_any_database(
    "stock Ultralytics trains from the exported files; the export's reads run on both above"
)
@pytest.mark.slow
def test_stock_yolo_trains_a_semantic_export(team, tmp_path):
    import subprocess
    import sys

    from tests.platform_client import client_env

    dataset = semantic(team.workspace)
    for split in (Split.TRAIN, Split.TRAIN, Split.VAL):
        with_map(
            dataset,
            mask((0, slice(0, 24), slice(None)), (1, slice(24, 48), slice(None))),
            split=split,
        )
    ImageFactory(dataset=dataset)  # no mask: left out of the export
    root = tmp_path / "data"
    with zipfile.ZipFile(export_yolo(dataset=dataset)) as zf:
        zf.extractall(root)
    assert (root / "masks" / "val").is_dir() and len(
        list((root / "images" / "train").iterdir())
    ) == 2
    script = (
        "from ultralytics import YOLO\n"
        "m = YOLO('yolo26n-sem.yaml')\n"
        f"r = m.train(data={str(root / 'data.yaml')!r}, epochs=1, imgsz=64, batch=2, workers=0,"
        f" device='cpu', plots=False, amp=False, project={str(tmp_path / 'runs')!r}, name='t')\n"
        "print('TRAINED', type(r).__name__)\n"
    )
    run = subprocess.run(  # noqa: S603
        [sys.executable, "-c", script],
        env=client_env(tmp_path / "cfg"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "TRAINED" in run.stdout
    assert list((tmp_path / "runs" / "t" / "weights").glob("*.pt"))


def test_dataset_page_and_api_count_a_semantic_class_by_the_masks_it_is_in(team, client):
    from datasets.api import dataset_out

    dataset = semantic(team.workspace)
    with_map(dataset, mask((0, slice(None), slice(None))))
    with_map(dataset, mask((0, slice(0, 5), slice(None)), (1, slice(5, 9), slice(None))))
    assert dataset_out(dataset).labels_per_class == {"road": 2, "car": 1}
    client.force_login(team.viewer)
    page = client.get(url("dataset_detail", dataset)).content.decode()
    assert "<td>0</td><td>road</td><td>2</td>" in page
    assert "<td>1</td><td>car</td><td>1</td>" in page
    assert 'data-testid="semantic-convert"' not in page  # only segment datasets convert
    dep = depth(team.workspace, scale=256)
    assert "Depth (256 per metre)" in client.get(url("dataset_detail", dep)).content.decode()
