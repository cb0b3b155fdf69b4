"""Shapes in pixels of their image (and the JSON numbers they are read from), and the collector
that Datumaro, Supervisely, VIA and CreateML are read into.

Each of those formats is read into one list of shapes in pixels of its image (a box, a rotated
box, a polygon, a mask, an ellipse, keypoints, an image class), and each shape becomes the
labels the dataset's task takes, the same way for every one of them: a polygon is a polygon for
segment, a box elsewhere (as Ultralytics reads one); a four-cornered polygon or a rotated box is
an oriented box for obb; keypoints go to pose datasets only, image classes to classification
datasets only; a polyline that ends where it starts is the outline of an area (a polygon), an
open one is refused with the reason, as are lone points. Datumaro and Supervisely give each
image's size, so their labels are normalised here; VIA and CreateML give none, so theirs stay in
pixels (ParsedImage.in_pixels) for the import to normalise once it has read the image.
"""

import math
from collections import Counter
from dataclasses import dataclass

from datasets.models import LabelKind, Task
from datasets.services import masks
from datasets.services.formats import (
    SKIP_LABEL,
    Parsed,
    ParsedImage,
    ParsedLabel,
    labels_from_pixels,
    split_from_path,
)
from datasets.services.tool_formats.common import ELLIPSE_POINTS, ImageIndex, turned


@dataclass(slots=True)
class Shape:
    """One annotation in pixels of its image. kind: box (x1, y1, x2, y2), rbox (cx, cy, w, h,
    angle in radians, clockwise on the image), polygon (x1, y1, ...), ellipse (cx, cy, rx, ry,
    angle), mask (a bool array and the pixel of its top-left corner), keypoints (a box or None,
    and (x, y, visibility) per keypoint), tag (an image class)."""

    kind: str
    geo: object = None


_WHAT = {
    "box": "a box",
    "rbox": "a rotated box",
    "polygon": "a polygon",
    "polyline": "a polyline",
    "ellipse": "an ellipse",
    "mask": "a mask",
    "keypoints": "keypoints",
    "tag": "an image class",
}


def num(v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"not a number: {str(v)[:20]!r}")
    try:
        f = float(v)
    except ValueError:
        raise ValueError(f"not a number: {str(v)[:20]!r}") from None
    if not math.isfinite(f):
        raise ValueError("NaN or infinite value")
    return f


def nums(values) -> list[float]:
    if not isinstance(values, (list, tuple)):
        raise ValueError("coordinates are not a list of numbers")
    return [num(v) for v in values]


def xy_pairs(points) -> list[float]:
    """[[x, y], ...] → [x, y, ...]."""
    if not isinstance(points, list):
        raise ValueError("points are not a list of [x, y]")
    out = []
    for p in points:
        if not (isinstance(p, (list, tuple)) and len(p) >= 2):
            raise ValueError("a point is not [x, y]")
        out += [num(p[0]), num(p[1])]
    return out


def bounds(xy: list[float]) -> list[float]:
    """The corners (x1, y1, x2, y2) of the box around points."""
    xs, ys = xy[0::2], xy[1::2]
    return [min(xs), min(ys), max(xs), max(ys)]


def _clip_box(box: list[float], size) -> list[float]:
    if size is None:
        return box
    w, h = size
    return [max(0.0, box[0]), max(0.0, box[1]), min(float(w), box[2]), min(float(h), box[3])]


def _rotated_corners(cx, cy, w, h, angle) -> list[float]:
    """The corners of a w × h box centred on (cx, cy), turned by angle (radians, clockwise on
    an image whose y goes down), as CVAT turns them (RotatedBoxesToPolygons)."""
    corners = ((-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2))
    return turned(cx, cy, corners, angle)


def _ellipse_polygon(cx, cy, rx, ry, angle) -> list[float]:
    steps = (2 * math.pi * i / ELLIPSE_POINTS for i in range(ELLIPSE_POINTS))
    return turned(cx, cy, [(rx * math.cos(t), ry * math.sin(t)) for t in steps], angle)


def _closed(xy: list[float]) -> bool:
    """A polyline that ends where it starts (within 5% of its size, or 3 pixels), as people
    draw outlines with a polyline tool: the outline of an area."""
    if len(xy) < 8 or len(xy) % 2:
        return False
    x1, y1, x2, y2 = bounds(xy)
    gap = math.hypot(xy[0] - xy[-2], xy[1] - xy[-1])
    return max(x2 - x1, y2 - y1) > 0 and gap <= max(3.0, 0.05 * max(x2 - x1, y2 - y1))


def _box_label(box: list[float]) -> tuple[str, list[float]]:
    x1, y1, x2, y2 = box
    if x2 - x1 <= 0 or y2 - y1 <= 0:
        raise ValueError("box with no width or height")
    return LabelKind.BOX, [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]


def _labels_of(shape: Shape, task: str, size, converted: Counter) -> list[tuple[str, list]]:
    """The labels one shape gives a dataset of this task, in pixels; ValueError with the reason
    when it gives none. `converted` counts shapes read as another kind, for the notes."""
    kind, geo = shape.kind, shape.geo
    if kind == "tag":
        if task != Task.CLASSIFY:
            raise ValueError("an image class is imported into a classification dataset only")
        return [(LabelKind.TAG, [])]
    if task == Task.CLASSIFY:
        verb = "are" if kind == "keypoints" else "is"
        raise ValueError(
            f"{_WHAT.get(kind, kind)} {verb} not imported into a classification dataset"
        )
    if kind == "keypoints":
        if task != Task.POSE:
            raise ValueError("keypoints are imported into a pose dataset only")
        box, kpts = geo
        if box is None:
            seen = [v for x, y, vis in kpts if vis > 0 for v in (x, y)]
            if not seen:
                raise ValueError("keypoints with none visible")
            box = bounds(seen)
        x1, y1, x2, y2 = box
        if x2 - x1 <= 0 or y2 - y1 <= 0:
            raise ValueError("keypoints whose box has no width or height")
        data = [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]
        for x, y, vis in kpts:
            data += [x, y, vis] if vis > 0 else [0.0, 0.0, 0.0]
        return [(LabelKind.KEYPOINTS, data)]
    if kind == "box":
        return [_box_label(geo)]
    if kind == "rbox":
        cx, cy, w, h, angle = geo
        if w <= 0 or h <= 0:
            raise ValueError("box with no width or height")
        corners = _rotated_corners(cx, cy, w, h, angle)
        if abs(math.sin(angle)) < 1e-9 or abs(math.cos(angle)) < 1e-9:  # 0, 90, 180°
            box = bounds(corners)
            return [(LabelKind.OBB, corners)] if task == Task.OBB else [_box_label(box)]
        if task == Task.OBB:
            return [(LabelKind.OBB, corners)]
        converted["rotated boxes read as the upright boxes around them"] += 1
        return [_box_label(_clip_box(bounds(corners), size))]
    if kind == "polyline":
        if not _closed(geo):
            raise ValueError(
                "an open polyline is not imported (it is no box, polygon or keypoints)"
            )
        converted["polylines that end where they start read as polygons"] += 1
        xy = geo[:-2] if geo[-2:] == geo[:2] else geo
        return _labels_of(Shape("polygon", xy), task, size, converted)
    if kind == "polygon":
        xy = geo
        if len(xy) < 6 or len(xy) % 2:
            raise ValueError("a polygon needs 3 points or more")
        box = bounds(xy)
        if box[2] - box[0] <= 0 or box[3] - box[1] <= 0:
            raise ValueError("polygon with no area")
        if task == Task.SEGMENT:
            return [(LabelKind.POLYGON, xy)]
        if task == Task.OBB and len(xy) == 8:
            return [(LabelKind.OBB, xy)]
        return [_box_label(box)]
    if kind == "ellipse":
        cx, cy, rx, ry, angle = geo
        if rx <= 0 or ry <= 0:
            raise ValueError("ellipse with no width or height")
        if task == Task.SEGMENT:
            converted[f"circles and ellipses read as polygons of {ELLIPSE_POINTS} points"] += 1
            return [(LabelKind.POLYGON, _ellipse_polygon(cx, cy, rx, ry, angle))]
        c, s = math.cos(angle), math.sin(angle)
        hw, hh = math.hypot(rx * c, ry * s), math.hypot(rx * s, ry * c)
        return [_box_label(_clip_box([cx - hw, cy - hh, cx + hw, cy + hh], size))]
    if kind == "mask":
        mask, ox, oy = geo
        if task == Task.SEGMENT:
            polygons = masks.mask_to_polygons(mask)
            if not polygons:
                raise ValueError("empty mask")
            converted["masks traced into polygons"] += 1
            return [
                (LabelKind.POLYGON, [v + (ox if i % 2 == 0 else oy) for i, v in enumerate(p)])
                for p in polygons
            ]
        box = masks.mask_box(mask)
        if box is None:
            raise ValueError("empty mask")
        return [_box_label([box[0] + ox, box[1] + oy, box[2] + ox, box[3] + oy])]
    raise ValueError(f"{kind} shapes are not imported")


@dataclass(slots=True)
class _Pending:
    cls: str
    kind: str
    data: list


class Collector:
    """What a parser found, image by image, in pixels; finish() names the classes, normalises
    where the image's size is known and returns the Parsed."""

    def __init__(self, fmt: str, images: list[str], classes: list[str], task: str):
        self.fmt = fmt
        self.task = task or Task.DETECT
        self.classes = list(classes)
        self.declared: list[str] = []  # the format's own class list, in its order
        self.images = {p: ParsedImage(p, split_from_path(p)) for p in images}
        self.index = ImageIndex(images)
        self.pending: dict[str, list[_Pending]] = {}
        self.sizes: dict[str, tuple[int, int]] = {}
        self.named: set[str] = set()
        self.skipped: list[tuple[str, str, str]] = []
        self.notes: list[str] = []
        self.label_counts: dict[str, int] = {}
        self.converted: Counter = Counter()

    def skip(self, where: str, reason: str, kind: str = SKIP_LABEL) -> None:
        self.skipped.append((where[:300], reason, kind))

    def declare(self, name: str) -> None:
        name = name.strip()[:100]
        if name and name not in self.declared:
            self.declared.append(name)

    def take(self, image: str, split: str | None, size: tuple[int, int] | None) -> None:
        """An annotation file or entry names this image: its split and size."""
        self.named.add(image)
        if split:
            self.images[image].split = split
        if size is not None:
            self.sizes[image] = size

    def add(self, image: str, cls: str, shape: Shape, source: str, where: str) -> int:
        """The labels of one shape, or its refusal in the report; how many it gave."""
        self.label_counts.setdefault(source, 0)
        cls = str(cls).strip()
        if not cls:
            self.skip(where, f"{_WHAT.get(shape.kind, shape.kind)} without a class")
            return 0
        try:
            found = _labels_of(shape, self.task, self.sizes.get(image), self.converted)
        except ValueError as e:
            self.skip(where, f"{cls[:40]!r}: {e}")
            return 0
        bucket = self.pending.setdefault(image, [])
        for kind, data in found:
            bucket.append(_Pending(cls[:100], kind, data))
        self.label_counts[source] += len(found)
        return len(found)

    def finish(self) -> Parsed:
        lengths = Counter(
            len(p.data) for ps in self.pending.values() for p in ps if p.kind == LabelKind.KEYPOINTS
        )
        kpt_len = max(lengths, key=lambda n: (lengths[n], n)) if lengths else None
        used = {p.cls for ps in self.pending.values() for p in ps}
        names = list(self.classes)
        for name in [*self.declared, *sorted(used - set(self.declared))]:
            if name not in names:
                names.append(name)
        index = {n: i for i, n in reversed(list(enumerate(names)))}
        for image, pending in self.pending.items():
            entry = self.images[image]
            labels = []
            for p in pending:
                if p.kind == LabelKind.KEYPOINTS and len(p.data) != kpt_len:
                    n, m = (len(p.data) - 4) // 3, (kpt_len - 4) // 3
                    self.skip(image, f"{p.cls[:40]!r}: {n} keypoints, the others have {m}")
                    continue
                labels.append(ParsedLabel(index[p.cls], p.kind, p.data))
            size = self.sizes.get(image)
            if size is not None:
                labels, refused = labels_from_pixels(labels, *size)
                self.skipped += [(image, reason, SKIP_LABEL) for reason in refused]
                if any(lb.kind != LabelKind.TAG for lb in labels):
                    entry.declared_size = size  # the import checks it against the image's
            else:
                entry.in_pixels = True
            entry.labels.extend(labels)
        for what, n in sorted(self.converted.items()):
            self.notes.append(f"{n} {what}")
        unnamed = len(self.images) - len(self.named & set(self.images))
        if unnamed and self.named:
            self.notes.append(f"{unnamed} images named in no annotation imported without labels")
        kpt_shape = [(kpt_len - 4) // 3, 3] if kpt_len else None
        return Parsed(
            format=self.fmt,
            class_names=names,
            images=self.images,
            skipped=self.skipped,
            task=Task.POSE if kpt_shape else None,
            keypoint_shape=kpt_shape,
            notes=self.notes,
            label_counts=self.label_counts,
        )
