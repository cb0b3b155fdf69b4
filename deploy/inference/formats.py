"""Predictions as JSON, in the shape the hosted Ultralytics Platform answers with, so a caller
can switch between it and Kestrel by changing the URL.

The per-object rows are Ultralytics' own `Results.summary()` (the serialisation its Platform
uses): pixel coordinates unless `normalize`, rounded to `decimals` (5 by default); detect
`box` x1..y2, OBB `box` x1..y4 (four corners), segment `segments` {x, y}, pose `keypoints`
{x, y, visible} (visible: each keypoint's confidence, 0-1), classify the top 5 classes.
https://docs.ultralytics.com/platform/deploy/inference/#response

Semantic segmentation and depth answer per pixel, at the original image's size:
- semantic: one row per class present, with `pixel_ratio` (Ultralytics' summary key, what its
  Platform answers), the same figure as `pixel_share`, and the class's `mask` as COCO's
  uncompressed RLE ({"size": [h, w], "counts": [...]}, column-major, starting with a run of 0s,
  which pycocotools' `frPyObjects` reads). On request (`mask=png`) the image's answer also holds
  `mask`: a PNG of class indexes (255 where no class is) in base64.
- depth: `depth`: a 16-bit greyscale PNG in base64 (metres × `scale`, 0 where there is no
  reading, as Kestrel and Ultralytics store depth labels), and min, median and max in metres.
"""

import base64
import platform
from functools import cache
from typing import Any

import numpy as np

# The Platform's field order, for people reading the JSON; other keys keep their place after.
_ROW_ORDER = (
    "class",
    "name",
    "confidence",
    "pixel_share",
    "pixel_ratio",
    "box",
    "segments",
    "keypoints",
)
NO_CLASS = 255  # a semantic mask's "no class here" (datasets.models.IGNORE_INDEX)
# Depth PNG scales tried in turn (1000: millimetres, Kestrel's default depth_scale); the first
# that holds the deepest reading in 16 bits is used, and stated in the answer.
DEPTH_SCALES = (1000.0, 100.0, 10.0, 1.0)
DEPTH_MAX_VALUE = 65535


def _ordered(row: dict[str, Any]) -> dict[str, Any]:
    first = {key: row[key] for key in _ROW_ORDER if key in row}
    return first | {key: value for key, value in row.items() if key not in first}


def image_json(
    result: Any, *, normalize: bool = False, decimals: int = 5, mask_png: bool = False
) -> dict[str, Any]:
    """One image's answer: its [height, width], what the model found, and the time each stage
    took for this image (ms; a batch's time is shared equally by its images). `mask_png`: a
    semantic model's answer also holds its class mask as one PNG."""
    height, width = result.orig_shape
    extra: dict[str, Any] = {}
    if getattr(result, "semantic_mask", None) is not None:
        class_map = semantic_class_map(result.semantic_mask.data, names=result.names)
        rows = semantic_rows(class_map, names=result.names, decimals=decimals)
        if mask_png:
            extra["mask"] = {
                "format": "png",
                "size": [int(height), int(width)],
                "no_class": NO_CLASS,
                "data": base64.b64encode(_png(class_map)).decode("ascii"),
            }
    elif getattr(result, "depth", None) is not None:
        rows = []
        extra["depth"] = depth_json(result.depth.data, decimals=decimals)
    else:
        rows = result.summary(normalize=normalize, decimals=decimals)
    speed = result.speed or {}
    return {
        "shape": [int(height), int(width)],
        "results": [_ordered(row) for row in rows],
        **extra,
        "speed": {
            stage: round(float(speed.get(stage) or 0.0), 3)
            for stage in ("preprocess", "inference", "postprocess")
        },
    }


def _numpy(data: Any) -> np.ndarray:
    return data.cpu().numpy() if hasattr(data, "cpu") else np.asarray(data)


def _png(array: np.ndarray) -> bytes:
    import cv2

    ok, buffer = cv2.imencode(".png", np.ascontiguousarray(array))
    if not ok:
        raise ValueError("the map could not be encoded as PNG")
    return buffer.tobytes()


def semantic_class_map(data: Any, *, names: dict[int, str]) -> np.ndarray:
    """Ultralytics' class map as class indexes (uint8, NO_CLASS where no class is). A
    one-class model answers foreground 1 / background 0 (Results.summary reads it so), so its
    1 becomes class 0 and its 0 no class."""
    raw = _numpy(data)
    if len(names) == 1:
        return np.where(raw == 1, 0, NO_CLASS).astype(np.uint8)
    known = np.zeros(max(int(raw.max(initial=0)) + 1, NO_CLASS + 1), dtype=bool)
    known[[c for c in names if 0 <= c < NO_CLASS]] = True
    return np.where(known[raw], raw, NO_CLASS).astype(np.uint8)


def rle_encode(flat_fortran: np.ndarray, *, size: tuple[int, int]) -> dict[str, Any]:
    """COCO's uncompressed RLE of a boolean mask given flattened column-major."""
    changes = np.flatnonzero(flat_fortran[1:] != flat_fortran[:-1]) + 1
    bounds = np.concatenate(([0], changes, [flat_fortran.size]))
    counts = np.diff(bounds).tolist()
    if flat_fortran.size and flat_fortran[0]:
        counts = [0, *counts]  # COCO's counts start with the background's run
    return {"size": [int(size[0]), int(size[1])], "counts": counts}


def semantic_rows(
    class_map: np.ndarray, *, names: dict[int, str], decimals: int = 5
) -> list[dict[str, Any]]:
    """One row per class present: its index, name, share of the image's pixels and mask."""
    total = class_map.size
    counts = np.bincount(class_map.ravel(), minlength=NO_CLASS + 1)
    flat = class_map.ravel(order="F")
    rows = []
    for class_id in np.flatnonzero(counts[:NO_CLASS]).tolist():
        share = round(int(counts[class_id]) / total, decimals)
        rows.append(
            {
                "class": class_id,
                "name": names.get(class_id, str(class_id)),
                "pixel_share": share,
                "pixel_ratio": share,
                "mask": rle_encode(flat == class_id, size=class_map.shape),
            }
        )
    return rows


def depth_json(data: Any, *, decimals: int = 5) -> dict[str, Any]:
    """A depth map in metres as a 16-bit PNG (metres × scale, 0 = no reading) and its figures
    in metres (over the pixels with a reading; None when none has one)."""
    metres = _numpy(data).astype(np.float32)
    valid = np.isfinite(metres) & (metres > 0)
    deepest = float(metres[valid].max()) if valid.any() else 0.0
    scale = next((s for s in DEPTH_SCALES if deepest * s <= DEPTH_MAX_VALUE), None)
    if scale is None:  # deeper than 65 km at 1 value a metre: a scale of its own
        scale = DEPTH_MAX_VALUE / deepest
    values = np.zeros(metres.shape, dtype=np.uint16)
    # A reading never rounds to 0, which would say "no reading".
    values[valid] = np.clip(np.rint(metres[valid] * scale), 1, DEPTH_MAX_VALUE).astype(np.uint16)
    figures: dict[str, float | None] = {"min": None, "median": None, "max": None}
    if valid.any():
        readings = metres[valid]
        figures = {
            "min": round(float(readings.min()), decimals),
            "median": round(float(np.median(readings)), decimals),
            "max": round(deepest, decimals),
        }
    height, width = metres.shape
    return {
        "format": "png",
        "size": [int(height), int(width)],
        "unit": "m",
        "scale": scale,
        "data": base64.b64encode(_png(values)).decode("ascii"),
        **figures,
        "valid_share": round(float(valid.mean()), decimals) if valid.size else 0.0,
    }


@cache
def versions() -> dict[str, str]:
    import torch
    import torchvision
    import ultralytics

    return {
        "ultralytics": ultralytics.__version__,
        "torch": torch.__version__.split("+")[0],
        "torchvision": torchvision.__version__.split("+")[0],
        "python": platform.python_version(),
    }


def response_json(
    images: list[dict[str, Any]], *, model_name: str, seconds: float
) -> dict[str, Any]:
    """The whole answer: the images' answers and the request's metadata (`functionTimeCall`:
    seconds the server spent on the request, waiting for its batch included)."""
    return {
        "images": images,
        "metadata": {
            "imageCount": len(images),
            "functionTimeCall": round(seconds, 4),
            "model": model_name,
            "version": versions(),
        },
    }
