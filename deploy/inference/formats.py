"""Predictions as JSON, in the shape the hosted Ultralytics Platform answers with, so a caller
can switch between it and Kestrel by changing the URL.

The per-object rows are Ultralytics' own `Results.summary()` (the serialisation its Platform
uses): pixel coordinates unless `normalize`, rounded to `decimals` (5 by default); detect
`box` x1..y2, OBB `box` x1..y4 (four corners), segment `segments` {x, y}, pose `keypoints`
{x, y, visible} (visible: each keypoint's confidence, 0-1), classify the top 5 classes.
https://docs.ultralytics.com/platform/deploy/inference/#response
"""

import platform
from functools import cache
from typing import Any

# The Platform's field order, for people reading the JSON; other keys keep their place after.
_ROW_ORDER = ("class", "name", "confidence", "box", "segments", "keypoints")


def _ordered(row: dict[str, Any]) -> dict[str, Any]:
    first = {key: row[key] for key in _ROW_ORDER if key in row}
    return first | {key: value for key, value in row.items() if key not in first}


def image_json(result: Any, *, normalize: bool = False, decimals: int = 5) -> dict[str, Any]:
    """One image's answer: its [height, width], what the model found, and the time each stage
    took for this image (ms; a batch's time is shared equally by its images)."""
    height, width = result.orig_shape
    rows = result.summary(normalize=normalize, decimals=decimals)
    speed = result.speed or {}
    return {
        "shape": [int(height), int(width)],
        "results": [_ordered(row) for row in rows],
        "speed": {
            stage: round(float(speed.get(stage) or 0.0), 3)
            for stage in ("preprocess", "inference", "postprocess")
        },
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
