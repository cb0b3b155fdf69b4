"""Shared by the helpers: reading an image and a box, a pixel contour as a short normalised
polygon, and a label's region as a polygon."""

import math
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from annotation.assist.errors import AssistError


def _simplify(points: np.ndarray, max_points: int) -> np.ndarray:
    """A closed outline of 3..max_points vertices, from a pixel contour (N, 2)."""
    contour = np.asarray(points, dtype=np.float32).reshape(-1, 1, 2)
    if len(contour) <= max_points:
        return contour.reshape(-1, 2)
    epsilon = max(cv2.arcLength(contour, True) * 0.001, 0.1)
    while True:
        approx = cv2.approxPolyDP(contour, epsilon, True)
        if len(approx) <= max_points:
            break
        epsilon *= 1.3
    if len(approx) < 3:  # a sliver: its tightest rectangle says more than two points
        return cv2.boxPoints(cv2.minAreaRect(contour))[:max_points]
    return approx.reshape(-1, 2)


def _normalised(points: np.ndarray, width: float, height: float) -> list[float]:
    scaled = np.asarray(points, dtype=np.float64).reshape(-1, 2) / (width, height)
    scaled = np.clip(scaled, 0.0, 1.0)
    return [round(float(v), 6) for v in scaled.reshape(-1)]


def _image_read(path: str | Path) -> np.ndarray:
    image = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if image is None:
        raise AssistError(f"{Path(path).name} could not be read as an image.")
    return image


def _box_numbers(box: Any) -> tuple[float, float, float, float]:
    try:
        values = tuple(float(v) for v in box)
    except (TypeError, ValueError):
        values = ()
    if len(values) != 4 or not all(map(math.isfinite, values)):
        raise AssistError("A box is four numbers: centre x, centre y, width, height.")
    return values


def _outline(kind: str, data: list[float]) -> np.ndarray | None:
    """A label's region as a normalised polygon (N, 2); None for a tag."""
    values = np.asarray(data, dtype=np.float64)
    if kind in ("box", "keypoints"):
        if len(values) < 4:
            return np.zeros((0, 2))
        cx, cy, w, h = values[:4]
        return np.array(
            [
                [cx - w / 2, cy - h / 2],
                [cx + w / 2, cy - h / 2],
                [cx + w / 2, cy + h / 2],
                [cx - w / 2, cy + h / 2],
            ]
        )
    if kind in ("polygon", "obb"):
        return values[: len(values) // 2 * 2].reshape(-1, 2)
    return None
