"""How much two labels overlap, and which suggestions an image already has a label for."""

from typing import Any

import cv2
import numpy as np

from annotation.assist.geometry import _outline

RASTER_SIDE = 256


def _area(polygon: np.ndarray) -> float:
    if len(polygon) < 3:
        return 0.0
    x, y = polygon[:, 0], polygon[:, 1]
    return abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))) / 2


def _bounds(polygon: np.ndarray) -> tuple[float, float, float, float]:
    if not len(polygon):
        return (0.0, 0.0, 0.0, 0.0)
    (ax, ay), (bx, by) = polygon.min(axis=0), polygon.max(axis=0)
    return (float(ax), float(ay), float(bx), float(by))


def _raster_iou(a: np.ndarray, b: np.ndarray) -> float:
    """IoU of two polygons drawn on a RASTER_SIDE grid spanning both: IoU does not change
    under stretching, so the grid fits their union and small shapes are measured as finely."""
    if len(a) < 3 or len(b) < 3:
        return 0.0
    both = np.concatenate([a, b])
    low, span = both.min(axis=0), np.ptp(both, axis=0)
    if span.min() <= 0:
        return 0.0
    shift = 4  # sub-pixel vertices
    scale = (RASTER_SIDE - 1) * (1 << shift) / span
    masks = []
    for polygon in (a, b):
        mask = np.zeros((RASTER_SIDE, RASTER_SIDE), np.uint8)
        points = np.round((polygon - low) * scale).astype(np.int32)
        cv2.fillPoly(mask, [points], 1, lineType=cv2.LINE_8, shift=shift)
        masks.append(mask.astype(bool))
    union = np.count_nonzero(masks[0] | masks[1])
    return np.count_nonzero(masks[0] & masks[1]) / union if union else 0.0


def shape_iou(kind_a: str, data_a: list[float], kind_b: str, data_b: list[float]) -> float:
    """Intersection over union of two labels' regions, 0..1. Boxes (a keypoints label counts
    as its box) are exact; polygons, oriented boxes and mixtures are drawn on a grid (within
    about 2%). Two tags overlap fully (1.0); a tag and a shape not at all."""
    if "tag" in (kind_a, kind_b):
        return 1.0 if kind_a == kind_b else 0.0
    a, b = _outline(kind_a, data_a), _outline(kind_b, data_b)
    ax0, ay0, ax1, ay1 = _bounds(a)
    bx0, by0, bx1, by1 = _bounds(b)
    inter = max(0.0, min(ax1, bx1) - max(ax0, bx0)) * max(0.0, min(ay1, by1) - max(ay0, by0))
    if inter <= 0:
        return 0.0
    if kind_a in ("box", "keypoints") and kind_b in ("box", "keypoints"):
        union = (ax1 - ax0) * (ay1 - ay0) + (bx1 - bx0) * (by1 - by0) - inter
        return inter / union if union > 0 else 0.0
    return _raster_iou(a, b)


def _suggestion_parts(suggestion: Any) -> tuple[str, Any, list[float]]:
    if isinstance(suggestion, tuple | list):
        kind, key, data = suggestion
        return kind, key, data
    key = getattr(suggestion, "class_id", None)
    return suggestion.kind, suggestion.class_index if key is None else key, suggestion.data


def suggestions_filter(
    suggestions: list, labels: list[tuple], threshold: float = 0.7
) -> list[bool]:
    """For each suggestion, whether to show it: False when an existing label of the same
    class overlaps it at IoU >= threshold (a person has already drawn it).

    A suggestion is (kind, class key, data), or an object with `kind`, `data` and its class
    as `class_id` when set, else `class_index`; each label is (kind, class key, data) with the
    same kind of key. 500 labels by 100 suggestions take milliseconds: a pair is drawn only
    when the overlap of their bounding boxes could reach the threshold.
    """
    by_class: dict[Any, list[tuple[str, list[float], tuple, float]]] = {}
    for kind, key, data in labels:
        outline = _outline(kind, data)
        shape = (0.0, 0.0, 0.0, 0.0), 0.0
        if outline is not None:
            shape = _bounds(outline), _area(outline)
        by_class.setdefault(key, []).append((kind, data, *shape))
    keep = []
    for suggestion in suggestions:
        kind, key, data = _suggestion_parts(suggestion)
        same_class = by_class.get(key, [])
        outline = _outline(kind, data)
        if outline is None:
            keep.append(not any(label_kind == "tag" for label_kind, *_ in same_class))
            continue
        x0, y0, x1, y1 = _bounds(outline)
        area = _area(outline)
        duplicate = False
        for label_kind, label_data, (lx0, ly0, lx1, ly1), label_area in same_class:
            if label_kind == "tag":
                continue
            inter = max(0.0, min(x1, lx1) - max(x0, lx0)) * max(0.0, min(y1, ly1) - max(y0, ly0))
            # IoU <= overlap of the bounding boxes / the larger shape: no need to draw them.
            if inter <= 0 or inter < threshold * max(area, label_area):
                continue
            if shape_iou(kind, data, label_kind, label_data) >= threshold:
                duplicate = True
                break
        keep.append(not duplicate)
    return keep
