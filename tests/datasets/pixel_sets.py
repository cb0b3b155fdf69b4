"""Small semantic and depth datasets painted in numpy, written as the layouts people upload,
and read back from Kestrel's export."""

import io
import zipfile

import numpy as np
import yaml
from PIL import Image as PILImage

from datasets.services.export import _image_names, export_yolo
from datasets.services.versions import version_create, version_manifest_load

# Pascal VOC's colour map (VOCdevkit's bitget rule): index i's colour.
VOC_COLOURS = []
for _i in range(256):
    r = g = b = 0
    c = _i
    for j in range(8):
        r |= ((c >> 0) & 1) << (7 - j)
        g |= ((c >> 1) & 1) << (7 - j)
        b |= ((c >> 2) & 1) << (7 - j)
        c >>= 3
    VOC_COLOURS.append((r, g, b))


def png(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(array).save(out, format="PNG")
    return out.getvalue()


def palette_png(mask: np.ndarray, colours=VOC_COLOURS) -> bytes:
    img = PILImage.fromarray(mask, "P")
    img.putpalette([v for colour in colours for v in colour])
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def jpeg(width: int, height: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
    out = io.BytesIO()
    PILImage.fromarray(pixels).save(out, format="JPEG", quality=90)
    return out.getvalue()


def painted(height: int, width: int, values: list[int], seed: int) -> np.ndarray:
    """A mask of `values`: the first as the ground, the others as a rectangle, a disc and a
    stripe each, placed by `seed`."""
    rng = np.random.default_rng(seed)
    mask = np.full((height, width), values[0], dtype=np.uint8)
    yy, xx = np.mgrid[:height, :width]
    for k, value in enumerate(values[1:]):
        shape = k % 3
        cy, cx = int(rng.integers(0, height)), int(rng.integers(0, width))
        if shape == 0:
            mask[max(0, cy - 6) : cy + 6, max(0, cx - 9) : cx + 9] = value
        elif shape == 1:
            mask[(yy - cy) ** 2 + (xx - cx) ** 2 <= 49] = value
        else:
            mask[:, max(0, cx - 2) : cx + 2] = value
    return mask


def depth_metres(height: int, width: int, seed: int) -> np.ndarray:
    """A ramp of 0.5–20 m with a hole of no reading (NaN)."""
    rng = np.random.default_rng(seed)
    depth = np.linspace(0.5, 20.0, height * width, dtype=np.float32).reshape(height, width)
    depth += rng.random((height, width), dtype=np.float32)
    depth[: height // 4, : width // 4] = np.nan
    return depth


def zip_of(files: dict[str, bytes], path) -> str:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def yaml_bytes(doc: dict) -> bytes:
    return yaml.safe_dump(doc, sort_keys=False).encode()


def exported_maps(access, dataset) -> tuple[dict, dict[str, np.ndarray], list[str]]:
    """Freeze the dataset, export the version as Ultralytics' layout: its data.yaml, its maps
    by the path they would have under the image's own name (masks/train/x.png for the image
    x.jpg of train; the export names files by content) and its image paths."""
    version = version_create(access=access, dataset=dataset)
    images = version_manifest_load(version)["images"]
    with export_yolo(version=version) as f, zipfile.ZipFile(f) as zf:
        doc = yaml.safe_load(zf.read("data.yaml"))
        folder = "depth" if "depth_scale" in doc else "masks"
        maps, paths = {}, []
        for img, name in zip(images, _image_names(images), strict=True):
            if "mask" not in img:
                continue
            stem, own = name.rsplit(".", 1)[0], img["filename"].rsplit(".", 1)[0]
            data = zf.read(f"{folder}/{img['split']}/{stem}.png")
            maps[f"{folder}/{img['split']}/{own}.png"] = np.asarray(PILImage.open(io.BytesIO(data)))
            paths.append(f"images/{img['split']}/{name}")
            assert paths[-1] in zf.namelist()
    return doc, maps, paths
