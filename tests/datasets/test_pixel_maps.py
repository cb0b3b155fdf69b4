"""Per-pixel labels: masks and depth maps checked, stored once as PNG blobs, frozen into
versions and written in Ultralytics' layouts."""

import gzip
import hashlib
import io
import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import yaml
from django.core.files.storage import default_storage
from PIL import Image as PILImage

from datasets.models import IGNORE_INDEX, PixelMap, Task
from datasets.services.export import yolo_layout_write
from datasets.services.pixel_maps import (
    PixelMapError,
    depth_decode,
    overlay_key,
    pixel_map_load,
    pixel_map_save,
    png_encode,
    semantic_decode,
)
from datasets.services.versions import manifest_build, version_create, version_manifest_load
from tests.datasets.factories import DatasetClassFactory, DatasetFactory, ImageFactory


def _png(array: np.ndarray, mode: str | None = None) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(array, mode).save(out, format="PNG")
    return out.getvalue()


def _bomb(width: int, height: int) -> bytes:
    """A PNG whose header declares width × height but whose file is a few hundred bytes."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body) & 0xFFFFFFFF
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 1000)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def test_a_palette_mask_gives_its_indexes_not_its_colours():
    mask = np.zeros((6, 8), dtype=np.uint8)
    mask[2:4, 2:5] = 15
    mask[0, :] = IGNORE_INDEX
    img = PILImage.fromarray(mask, "P")
    img.putpalette([(i * 7) % 256 for i in range(768)])
    out = io.BytesIO()
    img.save(out, format="PNG")
    assert np.array_equal(semantic_decode(out.getvalue()), mask)


def test_an_rgb_mask_needs_its_colours_named():
    rgb = np.zeros((4, 4, 3), dtype=np.uint8)
    rgb[1:3, 1:3] = (128, 0, 0)
    data = _png(rgb)
    with pytest.raises(PixelMapError, match="without a palette"):
        semantic_decode(data)
    mask = semantic_decode(data, palette={(0, 0, 0): 0, (128, 0, 0): 1})
    assert mask.tolist() == [[0, 0, 0, 0], [0, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0]]
    with pytest.raises(PixelMapError, match="#800000"):
        semantic_decode(data, palette={(0, 0, 0): 0})


def test_a_bomb_is_refused_from_its_header_before_any_pixel_is_inflated():
    with pytest.raises(PixelMapError, match="more than"):
        semantic_decode(_bomb(60_000, 60_000))
    with pytest.raises(PixelMapError, match="not a PNG"):
        semantic_decode(b"GIF89a" + b"\x00" * 40)


def test_depth_is_16_bit_and_exact():
    depth = (np.arange(12, dtype=np.uint16).reshape(3, 4) * 5000).astype(np.uint16)
    assert np.array_equal(depth_decode(png_encode(depth)), depth)
    with pytest.raises(PixelMapError, match="8-bit depth map where 16-bit is declared"):
        depth_decode(_png(np.zeros((3, 4), dtype=np.uint8)))


def test_the_same_pixels_always_give_the_same_bytes():
    mask = np.random.default_rng(1).integers(0, 3, (40, 50), dtype=np.uint8)
    assert png_encode(mask) == png_encode(mask.copy())


def _semantic_dataset(team, classes=("road", "car")):
    dataset = DatasetFactory(workspace=team.workspace, name="Streets", task=Task.SEMANTIC)
    for i, name in enumerate(classes):
        DatasetClassFactory(dataset=dataset, index=i, name=name)
    return dataset


@pytest.mark.django_db
def test_a_saved_mask_is_a_blob_with_its_overlay_and_counts_as_the_images_label(team):
    dataset = _semantic_dataset(team)
    image = ImageFactory(dataset=dataset)  # 64 × 48
    mask = np.full((48, 64), IGNORE_INDEX, dtype=np.uint8)
    mask[10:20, 5:30] = 1
    mask[30:, :] = 0
    pixel_map_save(image=image, array=mask, user=team.editor)
    stored = PixelMap.objects.get(image=image)
    data = default_storage.open(stored.blob.storage_key).read()
    assert hashlib.sha256(data).hexdigest() == stored.blob.sha256 == stored.blob.storage_key[-64:]
    assert default_storage.exists(overlay_key(stored.blob.sha256))
    assert np.array_equal(pixel_map_load(stored), mask)
    assert stored.stats == {"0": 18 * 64, "1": 250}
    image.refresh_from_db()
    assert (image.label_count, image.status, image.revision) == (2, "labelled", 1)

    with pytest.raises(PixelMapError, match="outside the 2 classes"):
        pixel_map_save(image=image, array=np.full((48, 64), 7, dtype=np.uint8))
    with pytest.raises(PixelMapError, match="the image is 64×48"):
        pixel_map_save(image=image, array=np.zeros((10, 10), dtype=np.uint8))
    assert np.array_equal(pixel_map_load(PixelMap.objects.get(image=image)), mask)


@pytest.mark.django_db
def test_a_version_names_each_map_and_exports_ultralytics_layout(team, tmp_path):
    dataset = _semantic_dataset(team)
    masks = {}
    for k, split in enumerate(("train", "val")):
        image = ImageFactory(dataset=dataset, split=split, filename=f"street{k}.png")
        mask = np.zeros((48, 64), dtype=np.uint8)
        mask[5 + k : 25, 10:40] = 1
        pixel_map_save(image=image, array=mask)
        masks[image.blob.sha256] = mask
    ImageFactory(dataset=dataset, filename="unlabelled.png")
    version = version_create(access=team.access("editor"), dataset=dataset)
    manifest = version_manifest_load(version)
    assert manifest == manifest_build(dataset=dataset)
    with default_storage.open(version.manifest_key, "rb") as f:
        assert hashlib.sha256(gzip.decompress(f.read())).hexdigest() == version.content_hash
    assert sum("mask" in img for img in manifest["images"]) == 2
    assert version.summary["masks"] == 2 and version.summary["labels"] == 2

    class Folder:
        def blob(self, arcname, sha):
            path = tmp_path / arcname
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(default_storage.open(f"blobs/{sha[:2]}/{sha}").read())

        def text(self, arcname, text):
            (tmp_path / arcname).write_text(text)

    yolo_layout_write(Folder(), manifest)
    doc = yaml.safe_load((tmp_path / "data.yaml").read_text())
    assert doc["masks_dir"] == "masks" and doc["names"] == {0: "road", 1: "car"}
    images = sorted(Path(tmp_path, "images").rglob("*.png"))
    assert len(images) == 2  # the unlabelled image has nothing to learn from
    for path in images:
        sha = hashlib.sha256(path.read_bytes()).hexdigest()
        mask_path = tmp_path / "masks" / path.parent.name / path.name
        assert np.array_equal(np.asarray(PILImage.open(mask_path)), masks[sha])


@pytest.mark.django_db
def test_a_depth_manifest_carries_its_scale(team):
    dataset = DatasetFactory(workspace=team.workspace, task=Task.DEPTH, depth_scale=256.0)
    DatasetClassFactory(dataset=dataset, index=0, name="depth")
    image = ImageFactory(dataset=dataset)
    depth = np.full((48, 64), 512, dtype=np.uint16)
    depth[0, 0] = 0
    pixel_map_save(image=image, array=depth)
    stored = PixelMap.objects.get(image=image)
    assert stored.stats == {"valid": 48 * 64 - 1, "min": 2.0, "median": 2.0, "max": 2.0}
    manifest = manifest_build(dataset=dataset)
    assert manifest["depth_scale"] == 256.0
    raw = json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    version = version_create(access=team.access("editor"), dataset=dataset)
    assert hashlib.sha256(raw.encode()).hexdigest() == version.content_hash
