"""Label JSON from the browser (or any API caller), checked and made canonical on the server.

Never trusted: every shape is checked against the dataset's task and classes, clipped to the
image, and refused when it is degenerate. Coordinates are normalised 0..1 of the image, as
`datasets.models.Label` stores them.
"""

import math
from dataclasses import dataclass

from datasets.models import Dataset, LabelKind, Task

# The shapes each task trains on (the same mapping the importers use).
TASK_KINDS: dict[str, tuple[str, ...]] = {
    Task.DETECT: (LabelKind.BOX,),
    Task.SEGMENT: (LabelKind.POLYGON,),
    Task.POSE: (LabelKind.KEYPOINTS,),
    Task.OBB: (LabelKind.OBB,),
    Task.CLASSIFY: (LabelKind.TAG,),
}
MAX_LABELS = 5000  # per image
MAX_POLYGON_POINTS = 2000
MIN_PIXELS = 1.0  # a box narrower than a pixel, or a polygon of less than a square pixel, is noise
DEFAULT_KEYPOINT_SHAPE = (17, 3)


@dataclass(frozen=True)
class CleanLabel:
    kind: str
    class_id: int
    data: list[float]


class LabelsInvalid(Exception):
    """The labels as a whole were refused; `errors` says which and why, by position."""

    def __init__(self, errors: list[dict]):
        self.errors = errors
        first = errors[0]
        where = f"Label {first['index'] + 1}: " if first.get("index") is not None else ""
        more = f" ({len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" * (
            len(errors) > 1
        )
        super().__init__(f"{where}{first['message']}{more}. Nothing was saved.")


class _Refused(Exception):
    pass


def _clip(value: float) -> float:
    return min(1.0, max(0.0, value))


def _numbers(data, count: int | None = None) -> list[float]:
    if not isinstance(data, list) or any(
        isinstance(v, bool) or not isinstance(v, int | float) for v in data
    ):
        raise _Refused("its coordinates must be a list of numbers")
    if count is not None and len(data) != count:
        raise _Refused(f"it needs {count} numbers, not {len(data)}")
    if not all(math.isfinite(v) for v in data):
        raise _Refused("its coordinates must be finite numbers")
    return [float(v) for v in data]


def _box(data: list[float], width: int, height: int) -> list[float]:
    cx, cy, w, h = data
    if w < 0 or h < 0:
        raise _Refused("a box cannot have a negative width or height")
    x1, y1 = _clip(cx - w / 2), _clip(cy - h / 2)
    x2, y2 = _clip(cx + w / 2), _clip(cy + h / 2)
    if (x2 - x1) * width < MIN_PIXELS or (y2 - y1) * height < MIN_PIXELS:
        raise _Refused("the box is empty or lies outside the image")
    return [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]


def polygon_area(points: list[float]) -> float:
    """Shoelace area of a flat [x1, y1, x2, y2, ...] ring (in the units of its coordinates)."""
    xs, ys = points[0::2], points[1::2]
    n = len(xs)
    twice = sum(xs[i] * ys[(i + 1) % n] - xs[(i + 1) % n] * ys[i] for i in range(n))
    return abs(twice) / 2


def _ring(data: list[float], width: int, height: int) -> list[float]:
    clipped = [_clip(v) for v in data]
    if polygon_area([v * (width if i % 2 == 0 else height) for i, v in enumerate(clipped)]) < (
        MIN_PIXELS
    ):
        raise _Refused("the shape has no area inside the image")
    return clipped


def _polygon(data: list[float], width: int, height: int) -> list[float]:
    if len(data) % 2:
        raise _Refused("a polygon needs an x and a y for every point")
    if len(data) < 6:
        raise _Refused("a polygon needs at least 3 points")
    if len(data) > 2 * MAX_POLYGON_POINTS:
        raise _Refused(f"a polygon may have at most {MAX_POLYGON_POINTS} points")
    return _ring(data, width, height)


def _keypoints(data: list[float], width: int, height: int, shape) -> list[float]:
    points, dims = shape
    expected = 4 + points * dims
    if len(data) != expected:
        raise _Refused(
            f"keypoints need a box and {points} points of {dims} numbers ({expected} numbers), "
            f"not {len(data)}"
        )
    out = _box(data[:4], width, height)
    for i in range(points):
        point = data[4 + i * dims : 4 + (i + 1) * dims]
        if dims == 3:
            visibility = point[2]
            if visibility not in (0, 1, 2):
                raise _Refused(f"point {i + 1}'s visibility must be 0, 1 or 2")
            if visibility == 0:
                out += [0.0, 0.0, 0.0]
                continue
            out += [_clip(point[0]), _clip(point[1]), float(int(visibility))]
        else:
            out += [_clip(point[0]), _clip(point[1])]
    return out


def labels_clean(
    raw, *, dataset: Dataset, width: int, height: int, class_ids: set[int]
) -> list[CleanLabel]:
    """The labels as they will be stored, or LabelsInvalid naming every refused one."""
    if not isinstance(raw, list):
        raise LabelsInvalid([{"index": None, "message": "labels must be a list"}])
    if len(raw) > MAX_LABELS:
        raise LabelsInvalid(
            [{"index": None, "message": f"an image may have at most {MAX_LABELS} labels"}]
        )
    allowed = TASK_KINDS.get(dataset.task, ())
    shape = tuple(dataset.keypoint_shape or DEFAULT_KEYPOINT_SHAPE)
    out, errors, tags = [], [], set()
    for index, item in enumerate(raw):
        try:
            if not isinstance(item, dict):
                raise _Refused("each label must be an object with kind, class_id and data")
            kind, class_id = item.get("kind"), item.get("class_id")
            if kind not in LabelKind.values:
                raise _Refused(f"unknown kind {str(kind)[:20]!r}")
            if kind not in allowed:
                names = " or ".join(LabelKind(k).label.lower() for k in allowed)
                raise _Refused(
                    f"a {Task(dataset.task).label.lower()} dataset takes {names} labels, "
                    f"not {LabelKind(kind).label.lower()}"
                )
            if isinstance(class_id, bool) or not isinstance(class_id, int):
                raise _Refused("class_id must be a number")
            if class_id not in class_ids:
                raise _Refused("its class is not one of this dataset's classes")
            data = item.get("data", [])
            if kind == LabelKind.BOX:
                data = _box(_numbers(data, 4), width, height)
            elif kind == LabelKind.POLYGON:
                data = _polygon(_numbers(data), width, height)
            elif kind == LabelKind.OBB:
                data = _ring(_numbers(data, 8), width, height)
            elif kind == LabelKind.KEYPOINTS:
                data = _keypoints(_numbers(data), width, height, shape)
            else:  # an image-level tag: no coordinates, once per class
                if data not in ([], None):
                    raise _Refused("an image class takes no coordinates")
                data = []
                if class_id in tags:
                    continue
                tags.add(class_id)
        except _Refused as exc:
            errors.append({"index": index, "message": str(exc)})
            continue
        out.append(CleanLabel(kind=kind, class_id=class_id, data=data))
    if errors:
        raise LabelsInvalid(errors)
    return out
