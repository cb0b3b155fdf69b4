"""Importing semantic-segmentation and depth datasets in the layouts people have (Ultralytics',
Cityscapes, Pascal VOC, plain folders), recognised without being named, and what comes back
out of a version's export is pixel for pixel what went in (after the layout's mapping)."""

import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pytest
from django.core.files.storage import default_storage
from PIL import Image as PILImage

from datasets.models import IGNORE_INDEX, Blob, Dataset, Image, ImportStatus, PixelMap
from datasets.services.datasets import dataset_create
from datasets.services.ingest import dataset_import_path
from datasets.services.pixel_maps import overlay_key
from tests.datasets.pixel_sets import (
    VOC_COLOURS,
    depth_metres,
    exported_maps,
    jpeg,
    painted,
    palette_png,
    png,
    yaml_bytes,
    zip_of,
)

H, W = 40, 56
FIXTURES = Path(__file__).parent / "fixtures" / "pixel"


def _import(team, path, *, task="semantic", dataset=None, **create):
    access = team.access("editor")
    dataset = dataset or dataset_create(access=access, name="Pixels", task=task, **create)
    imp = dataset_import_path(access=access, dataset=dataset, path=path)
    assert imp.status == ImportStatus.SUCCEEDED, imp.error
    dataset.refresh_from_db()
    return dataset, imp


def _reasons(imp) -> dict[str, str]:
    return {s["file"]: s["reason"] for s in imp.report["skipped"]}


def _kinds(imp) -> dict[str, str]:
    return {s["file"]: s["kind"] for s in imp.report["skipped"]}


# --- each layout, round trip ------------------------------------------------------------------


@pytest.mark.django_db
def test_ultralytics_semantic_layout_applies_label_mapping_as_ultralytics_does(team, tmp_path):
    # Raw ids 7/8/26 are mapped to train ids 0/1/2, 0 to ignore; 1 is not in the mapping and
    # stays 1 (Ultralytics' table is the identity outside its mapping).
    mapping = {0: "ignore_label", 7: 0, 8: 1, 26: 2, -1: "ignore_label"}
    lut = np.arange(256, dtype=np.uint8)
    lut[[0, 7, 8, 26]] = [255, 0, 1, 2]
    files = {
        "set/data.yaml": yaml_bytes(
            {
                "path": ".",
                "train": "images/train",
                "val": "images/val",
                "masks_dir": "segs",
                "names": {0: "road", 1: "sidewalk", 2: "car"},
                "label_mapping": mapping,
            }
        )
    }
    raw = {}
    for i, split in enumerate(["train", "train", "val"]):
        raw[(split, f"im{i}")] = painted(H, W, [7, 8, 26, 0, 1], seed=i)
        files[f"set/images/{split}/im{i}.jpg"] = jpeg(W, H, i)
        files[f"set/segs/{split}/im{i}.png"] = png(raw[(split, f"im{i}")])
    dataset, imp = _import(team, zip_of(files, tmp_path / "u.zip"))
    assert imp.report["format"] == "yolo-semantic"
    assert imp.report["images_imported"] == 3 and imp.report["maps_imported"] == 3
    assert Image.objects.filter(dataset=dataset).count() == 3  # no mask became an image
    assert [c.name for c in dataset.classes.order_by("index")] == ["road", "sidewalk", "car"]
    assert imp.report["splits"] == {"train": 2, "val": 1}
    image = Image.objects.get(dataset=dataset, filename="im0.jpg")
    assert image.status == "labelled" and image.label_count == 3
    doc, maps, images = exported_maps(team.access("editor"), dataset)
    assert doc["masks_dir"] == "masks" and len(images) == 3
    for (split, stem), mask in raw.items():
        assert np.array_equal(maps[f"masks/{split}/{stem}.png"], lut[mask])


@pytest.mark.django_db
def test_cityscapes_label_ids_become_the_19_train_ids(team, tmp_path):
    # labelIds: 7 road → 0, 26 car → 13, 33 bicycle → 18, 24 person → 11, 0 and 4 → ignore.
    expected_of = np.full(256, 255, dtype=np.uint8)
    expected_of[[7, 26, 33, 24]] = [0, 13, 18, 11]
    files, raw = {}, {}
    for i, (split, city) in enumerate([("train", "aachen"), ("val", "lindau")]):
        stem = f"{city}_000000_00001{i}"
        raw[(split, stem)] = painted(H, W, [7, 26, 33, 24, 0, 4], seed=10 + i)
        files[f"leftImg8bit/{split}/{city}/{stem}_leftImg8bit.png"] = png(
            np.full((H, W, 3), 90 + i, dtype=np.uint8)
        )
        files[f"gtFine/{split}/{city}/{stem}_gtFine_labelIds.png"] = png(raw[(split, stem)])
        files[f"gtFine/{split}/{city}/{stem}_gtFine_color.png"] = png(
            np.zeros((H, W, 3), dtype=np.uint8)
        )
        files[f"gtFine/{split}/{city}/{stem}_gtFine_instanceIds.png"] = png(
            np.zeros((H, W), dtype=np.uint16)
        )
        files[f"gtFine/{split}/{city}/{stem}_gtFine_polygons.json"] = b'{"objects": []}'
    dataset, imp = _import(team, zip_of(files, tmp_path / "c.zip"))
    assert imp.report["format"] == "cityscapes"
    assert imp.report["images_imported"] == 2 and imp.report["maps_imported"] == 2
    names = [c.name for c in dataset.classes.order_by("index")]
    assert len(names) == 19 and names[0] == "road" and names[13] == "car"
    assert imp.report["splits"] == {"train": 1, "val": 1}
    assert all("labelIds masks are read" in r for f, r in _reasons(imp).items() if "gtFine_" in f)
    _, maps, _ = exported_maps(team.access("editor"), dataset)
    for (split, stem), mask in raw.items():
        assert np.array_equal(maps[f"masks/{split}/{stem}_leftImg8bit.png"], expected_of[mask])


@pytest.mark.django_db
def test_pascal_voc_palette_masks_with_their_image_sets(team, tmp_path):
    files = {
        "VOC2012/ImageSets/Segmentation/train.txt": b"2007_000001\n",
        "VOC2012/ImageSets/Segmentation/val.txt": b"2007_000002\n",
        "VOC2012/JPEGImages/2007_009999.jpg": jpeg(W, H, 99),  # detection only: no mask
        "VOC2012/Annotations/2007_000001.xml": b"<annotation/>",
    }
    raw = {}
    for i in (1, 2):
        mask = painted(H, W, [0, 15, 7, 12], seed=i)
        mask[0, :] = mask[:, 0] = IGNORE_INDEX  # VOC's border
        raw[f"2007_00000{i}"] = mask
        files[f"VOC2012/JPEGImages/2007_00000{i}.jpg"] = jpeg(W, H, i)
        files[f"VOC2012/SegmentationClass/2007_00000{i}.png"] = palette_png(mask)
        files[f"VOC2012/SegmentationObject/2007_00000{i}.png"] = palette_png(mask)
    dataset, imp = _import(team, zip_of(files, tmp_path / "voc.zip"))
    assert imp.report["format"] == "voc-segmentation"
    names = [c.name for c in dataset.classes.order_by("index")]
    assert names[0] == "background" and names[15] == "person" and len(names) == 21
    assert imp.report["images_imported"] == 2 and imp.report["splits"] == {"train": 1, "val": 1}
    assert "segmentation set" in _reasons(imp)["VOC2012/JPEGImages/2007_009999.jpg"]
    _, maps, _ = exported_maps(team.access("editor"), dataset)
    assert np.array_equal(maps["masks/train/2007_000001.png"], raw["2007_000001"])
    assert np.array_equal(maps["masks/val/2007_000002.png"], raw["2007_000002"])


@pytest.mark.django_db
def test_a_labelmap_names_the_classes_and_reads_rgb_masks_by_colour(team, tmp_path):
    labelmap = (
        b"# label:color_rgb:parts:actions\nbackground:0,0,0::\ncat:250,50,83::\ndog:51,221,255::\n"  # noqa: E501
    )
    colours = {0: (0, 0, 0), 1: (250, 50, 83), 2: (51, 221, 255)}
    mask = painted(H, W, [0, 1, 2, 1], seed=3)
    rgb = np.zeros((H, W, 3), dtype=np.uint8)
    for value, colour in colours.items():
        rgb[mask == value] = colour
    # A palette PNG whose palette is in another order than the labelmap: its colours decide.
    other = [(51, 221, 255), (0, 0, 0), (250, 50, 83)] + VOC_COLOURS[3:]
    shuffled = np.array([1, 2, 0], dtype=np.uint8)[mask]
    files = {
        "labelmap.txt": labelmap,
        "JPEGImages/a.jpg": jpeg(W, H, 1),
        "SegmentationClass/a.png": png(rgb),
        "JPEGImages/b.jpg": jpeg(W, H, 2),
        "SegmentationClass/b.png": palette_png(shuffled, other),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "cvat.zip"))
    assert [c.name for c in dataset.classes.order_by("index")] == ["background", "cat", "dog"]
    assert imp.report["maps_imported"] == 2, imp.report["skipped"]
    _, maps, _ = exported_maps(team.access("editor"), dataset)
    assert np.array_equal(maps["masks/train/a.png"], mask)
    assert np.array_equal(maps["masks/train/b.png"], mask)


@pytest.mark.django_db
@pytest.mark.parametrize("folder", ["masks", "labels", "annotations"])
def test_plain_image_and_mask_folders_pair_by_name(team, tmp_path, folder):
    files = {"classes.txt": b"sky\ntree\nroad\n"}
    raw = {}
    for i, split in enumerate(["train", "val"]):
        raw[f"p{i}"] = painted(H, W, [0, 1, 2, IGNORE_INDEX], seed=20 + i)
        files[f"data/images/{split}/p{i}.jpg"] = jpeg(W, H, 20 + i)
        # Not mirrored: one flat folder of masks, paired by name.
        files[f"data/{folder}/p{i}.png"] = png(raw[f"p{i}"])
    dataset, imp = _import(team, zip_of(files, tmp_path / "plain.zip"))
    assert imp.report["format"] == "mask-folders"
    assert [c.name for c in dataset.classes.order_by("index")] == ["sky", "tree", "road"]
    assert imp.report["images_imported"] == 2 and imp.report["maps_imported"] == 2
    _, maps, _ = exported_maps(team.access("editor"), dataset)
    assert np.array_equal(maps["masks/train/p0.png"], raw["p0"])
    assert np.array_equal(maps["masks/val/p1.png"], raw["p1"])


@pytest.mark.django_db
def test_masks_without_a_class_list_make_classes_from_their_values(team, tmp_path):
    mask = painted(H, W, [0, 3, 1], seed=5)
    files = {"images/a.jpg": jpeg(W, H, 5), "masks/a.png": png(mask)}
    dataset, imp = _import(team, zip_of(files, tmp_path / "bare.zip"))
    assert [c.name for c in dataset.classes.order_by("index")] == [f"class{i}" for i in range(4)]
    _, maps, _ = exported_maps(team.access("editor"), dataset)
    assert np.array_equal(maps["masks/train/a.png"], mask)


@pytest.mark.django_db
def test_masks_are_mapped_to_the_datasets_own_classes_by_name(team, tmp_path):
    mask = painted(H, W, [0, 1, 2], seed=6)
    files = {
        "classes.txt": b"sky\ntree\nroad\n",
        "images/a.jpg": jpeg(W, H, 6),
        "masks/a.png": png(mask),
    }
    access = team.access("editor")
    dataset = dataset_create(
        access=access, name="Ours", task="semantic", class_names=["road", "sky", "tree"]
    )
    dataset, imp = _import(team, zip_of(files, tmp_path / "m.zip"), dataset=dataset)
    _, maps, _ = exported_maps(access, dataset)
    assert np.array_equal(maps["masks/train/a.png"], np.array([1, 2, 0], np.uint8)[mask])


def _save_depth(depth: np.ndarray, scale: float, path: Path) -> bytes:
    from ultralytics.data.utils import save_depth_png

    save_depth_png(path, depth, scale=scale)
    return path.read_bytes()


@pytest.mark.django_db
def test_ultralytics_depth_layout_keeps_every_value_and_takes_its_scale(team, tmp_path):
    files = {
        "depth8/data.yaml": yaml_bytes(
            {
                "train": "images/train",
                "val": "images/val",
                "names": {0: "depth"},
                "depth_scale": 256,
            }  # noqa: E501
        )
    }
    raw = {}
    for i, split in enumerate(["train", "val"]):
        data = _save_depth(depth_metres(H, W, i), 256, tmp_path / f"d{i}.png")
        raw[(split, f"d{i}")] = np.asarray(PILImage.open(io.BytesIO(data)))
        files[f"depth8/images/{split}/d{i}.jpg"] = jpeg(W, H, 30 + i)
        files[f"depth8/depth/{split}/d{i}.png"] = data
    dataset, imp = _import(team, zip_of(files, tmp_path / "depth.zip"), task="depth")
    assert imp.report["format"] == "yolo-depth"
    assert dataset.depth_scale == 256 and imp.report["maps_imported"] == 2
    stats = PixelMap.objects.get(image__filename="d0.jpg").stats
    assert stats["valid"] == H * W - (H // 4) * (W // 4) and 0.5 <= stats["min"] < stats["max"]
    doc, maps, _ = exported_maps(team.access("editor"), dataset)
    assert doc["depth_scale"] == 256
    for (split, stem), values in raw.items():
        got = maps[f"depth/{split}/{stem}.png"]
        assert got.dtype == np.uint16 and np.array_equal(got, values)


@pytest.mark.django_db
def test_plain_depth_folders_use_the_datasets_scale(team, tmp_path):
    values = np.arange(H * W, dtype=np.uint16).reshape(H, W) * 7
    files = {"rgb/images/a.png": png(np.zeros((H, W, 3), np.uint8)), "rgb/depth/a.png": png(values)}
    dataset, imp = _import(team, zip_of(files, tmp_path / "d.zip"), task="depth", depth_scale=100)
    assert imp.report["format"] == "depth-folders" and dataset.depth_scale == 100
    assert Image.objects.filter(dataset=dataset).count() == 1
    _, maps, _ = exported_maps(team.access("editor"), dataset)
    assert np.array_equal(maps["depth/train/a.png"], values)


# --- bad input: each refused with its reason, the rest imported -------------------------------


def _bomb(width: int, height: int) -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 1000)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


@pytest.mark.django_db
def test_bad_masks_are_refused_each_with_its_reason_and_the_rest_lands(team, tmp_path):
    good = painted(H, W, [0, 1, 2], seed=7)
    files = {
        "data.yaml": yaml_bytes({"train": "images/train", "names": ["a", "b", "c"]}),
        "images/train/good.jpg": jpeg(W, H, 1),
        "masks/train/good.png": png(good),
        "images/train/small.jpg": jpeg(W, H, 2),
        "masks/train/small.png": png(good[:20, :30]),
        "images/train/outside.jpg": jpeg(W, H, 3),
        "masks/train/outside.png": png(painted(H, W, [0, 7], seed=8)),
        "images/train/rgb.jpg": jpeg(W, H, 4),
        "masks/train/rgb.png": png(np.zeros((H, W, 3), np.uint8)),
        "images/train/bomb.jpg": jpeg(W, H, 5),
        "masks/train/bomb.png": _bomb(60_000, 60_000),
        "images/train/lossy.jpg": jpeg(W, H, 6),
        "masks/train/lossy.jpg": jpeg(W, H, 6),
        "images/train/alone.jpg": jpeg(W, H, 7),
        "masks/train/orphan.png": png(good),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "bad.zip"))
    reasons, kinds = _reasons(imp), _kinds(imp)
    assert "the mask is 30×20 but its image is 56×40" in reasons["masks/train/small.png"]
    assert "values 7 are outside the 3 classes" in reasons["masks/train/outside.png"]
    assert "without a palette" in reasons["masks/train/rgb.png"]
    bomb = reasons["masks/train/bomb.png"]
    assert "60000×60000 pixels declared, more than the 70,000,000" in bomb
    assert "must be a PNG" in reasons["masks/train/lossy.jpg"]
    assert "without its image" in reasons["masks/train/orphan.png"]
    assert kinds["masks/train/orphan.png"] == "no_image"
    assert kinds["images/train/alone.jpg"] == "no_mask"
    assert "no mask of this image" in reasons["images/train/alone.jpg"]
    # Every image landed (those whose mask was refused unlabelled); the good one with its mask.
    assert imp.report["images_imported"] == 7 and imp.report["maps_imported"] == 1
    labelled = Image.objects.filter(dataset=dataset, status="labelled")
    assert list(labelled.values_list("filename", flat=True)) == ["good.jpg"]
    assert PixelMap.objects.filter(image__dataset=dataset).count() == 1
    groups = {g["kind"]: g["count"] for g in imp.report["not_imported"]}
    assert groups["label_file"] == 5 and groups["no_image"] == 1 and groups["no_mask"] == 2


@pytest.mark.django_db
def test_bad_depth_maps_are_refused_each_with_its_reason(team, tmp_path):
    good = (np.arange(H * W, dtype=np.uint16).reshape(H, W) + 1) * 3
    files = {
        "images/a.jpg": jpeg(W, H, 1),
        "depth/a.png": png(good),
        "images/eight.jpg": jpeg(W, H, 2),
        "depth/eight.png": png(np.full((H, W), 9, np.uint8)),
        "images/rgb.jpg": jpeg(W, H, 3),
        "depth/rgb.png": png(np.zeros((H, W, 3), np.uint8)),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "bad.zip"), task="depth")
    reasons = _reasons(imp)
    assert "8-bit depth map where 16-bit is declared" in reasons["depth/eight.png"]
    assert "16-bit greyscale PNG, not RGB" in reasons["depth/rgb.png"]
    assert imp.report["images_imported"] == 3 and imp.report["maps_imported"] == 1


@pytest.mark.django_db
@pytest.mark.parametrize("scale", [0, -5, "metres", None])
def test_a_depth_scale_that_is_no_positive_number_is_refused(team, tmp_path, scale):
    values = np.full((H, W), 1000, np.uint16)
    files = {
        "data.yaml": yaml_bytes({"names": {0: "depth"}, "depth_scale": scale}),
        "images/train/a.jpg": jpeg(W, H, 1),
        "depth/train/a.png": png(values),
    }
    dataset, imp = _import(team, zip_of(files, tmp_path / "s.zip"), task="depth")
    reasons = _reasons(imp)
    assert "not a positive number" in reasons["data.yaml"]
    assert "not a positive number" in reasons["depth/train/a.png"]
    assert imp.report["images_imported"] == 1 and imp.report["maps_imported"] == 0
    assert "none of the" in imp.report["warning"]
    assert dataset.depth_scale == 1000  # unchanged


@pytest.mark.django_db
def test_a_depth_scale_other_than_the_maps_already_stored_is_refused(team, tmp_path):
    values = np.full((H, W), 1000, np.uint16)

    def upload(name, scale):
        files = {
            "data.yaml": yaml_bytes({"names": {0: "depth"}, "depth_scale": scale}),
            f"images/train/{name}.jpg": jpeg(W, H, len(name)),
            f"depth/train/{name}.png": png(values),
        }
        return zip_of(files, tmp_path / f"{name}.zip")

    dataset, first = _import(team, upload("a", 1000), task="depth")
    assert first.report["maps_imported"] == 1
    dataset, second = _import(team, upload("b", 256), dataset=dataset)
    assert (
        "depth_scale is 256 but this dataset's depth maps use 1000"
        in (_reasons(second)["depth/train/b.png"])
    )
    assert second.report["images_imported"] == 1 and second.report["maps_imported"] == 0
    assert Dataset.objects.get(pk=dataset.pk).depth_scale == 1000


@pytest.mark.django_db
def test_a_failed_import_leaves_no_map_behind(team, tmp_path, monkeypatch):
    mask = painted(H, W, [0, 1], seed=9)
    files = {
        "classes.txt": b"a\nb\n",
        "images/a.jpg": jpeg(W, H, 9),
        "masks/a.png": png(mask),
    }
    from datasets.services import ingest
    from datasets.services.pixel_maps import png_encode

    sha = hashlib.sha256(png_encode(mask)).hexdigest()
    stored_when_it_failed = []

    def full_disk(*args, **kwargs):
        stored_when_it_failed.append(default_storage.exists(overlay_key(sha)))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ingest, "full_report_save", full_disk)  # the last write of an import
    access = team.access("editor")
    dataset = dataset_create(access=access, name="Fails", task="semantic")
    path = zip_of(files, tmp_path / "f.zip")
    imp = dataset_import_path(access=access, dataset=dataset, path=path)
    assert imp.status == ImportStatus.FAILED and "disk" in imp.error
    assert stored_when_it_failed == [True]
    assert not Blob.objects.filter(sha256=sha).exists()
    assert not default_storage.exists(Blob(sha256=sha).storage_key)
    assert not default_storage.exists(overlay_key(sha))
    assert not Image.objects.filter(dataset=dataset).exists()
    assert not PixelMap.objects.exists()


@pytest.mark.django_db
def test_the_command_imports_a_semantic_folder(team, tmp_path, capsys):
    from django.core.management import call_command

    folder = tmp_path / "set"
    (folder / "images").mkdir(parents=True)
    (folder / "masks").mkdir()
    (folder / "images" / "a.jpg").write_bytes(jpeg(W, H, 1))
    (folder / "masks" / "a.png").write_bytes(png(painted(H, W, [0, 1], seed=1)))
    (folder / "classes.txt").write_text("bg\nfg\n")
    call_command("dataset_import", str(folder), workspace="acme", name="Cmd", task="semantic")
    out = json.loads(capsys.readouterr().out)
    assert out["report"]["maps_imported"] == 1 and out["report"]["format"] == "mask-folders"


# --- real exports: Datumaro 1.13.12 (fixtures/pixel/make_datumaro.py) ------------------------


@pytest.mark.django_db
def test_datumaros_voc_segmentation_export_imports_pixel_exact(team):
    # Datumaro writes RGB masks in its labelmap's colours, and an `ignored` entry (the border).
    truth = np.load(FIXTURES / "voc_truth.npz")
    dataset, imp = _import(team, FIXTURES / "voc_segmentation_datumaro.zip")
    assert imp.report["format"] == "voc-segmentation"
    names = [c.name for c in dataset.classes.order_by("index")]
    assert names[0] == "background" and names[15] == "person" and len(names) == 21
    assert imp.report["maps_imported"] == 2 and imp.report["splits"] == {"train": 1, "val": 1}
    assert not [s for s in imp.report["skipped"] if s["kind"] != "file"], imp.report["skipped"]
    _, maps, _ = exported_maps(team.access("editor"), dataset)
    assert np.array_equal(maps["masks/train/voc_0.png"], truth["voc_0"])
    assert np.array_equal(maps["masks/val/voc_1.png"], truth["voc_1"])


@pytest.mark.django_db
def test_datumaros_cityscapes_export_imports_pixel_exact(team):
    truth = np.load(FIXTURES / "city_truth.npz")
    train_id = np.full(256, 255, dtype=np.uint8)
    train_id[[7, 23, 24, 26]] = [0, 10, 11, 13]  # road, sky, person, car
    dataset, imp = _import(team, FIXTURES / "cityscapes_datumaro.zip")
    assert imp.report["format"] == "cityscapes" and imp.report["maps_imported"] == 2
    assert dataset.classes.count() == 19
    assert not [s for s in imp.report["skipped"] if s["kind"] != "file"], imp.report["skipped"]
    _, maps, _ = exported_maps(team.access("editor"), dataset)
    for split, stem in (("train", "frankfurt_000000_000001"), ("val", "frankfurt_000001_000001")):
        got = maps[f"masks/{split}/{stem}_leftImg8bit.png"]
        assert np.array_equal(got, train_id[truth[stem]])
