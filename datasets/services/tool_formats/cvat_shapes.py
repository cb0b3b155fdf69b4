"""The shapes of a CVAT XML export ("CVAT for images 1.1", "CVAT for video 1.1") turned into
Kestrel labels: boxes (turned by their rotation), polygons, ellipses, masks (CVAT's RLE),
skeletons and points, image tags; the images they are drawn on found among the upload's.

CVAT gives pixels and the size each image was drawn on, so labels are normalised here; a shape
a little past the image's edge (CVAT lets one be drawn there) is cut at the edge.
"""

import math
import posixpath
from collections import Counter
from dataclasses import dataclass, field

from datasets.models import LabelKind, Task
from datasets.services.formats import OBB_TOLERANCE, ParsedLabel, _clip, _finite, _poly_to_box
from datasets.services.masks import counts_decode, mask_box, mask_to_polygons
from datasets.services.tool_formats.common import (
    ELLIPSE_POINTS,
    ImageNames,
    in_image,
    min_area_corners,
    to_unit,
    turned,
)

# CVAT draws shapes a little past the image's edge; past this share of it they are refused.
EDGE_TOLERANCE = 0.01


@dataclass
class LabelSpec:
    name: str
    type: str = ""
    parent: str = ""
    children: list[str] = field(default_factory=list)


def number_attr(el, attr: str, default: float | None = None) -> float:
    raw = el.get(attr)
    if raw is None:
        if default is not None:
            return default
        raise ValueError(f"no {attr}")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{attr} is not a number: {raw[:20]!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{attr} is NaN or infinite")
    return value


def _points(raw: str | None) -> list[float]:
    """CVAT's "x1,y1;x2,y2;..." → [x1, y1, x2, y2, ...]."""
    values: list[str] = []
    for pair in (raw or "").split(";"):
        if not pair.strip():
            continue
        xy = pair.split(",")
        if len(xy) != 2:
            raise ValueError(f"points {pair[:30]!r} are not x,y")
        values += xy
    return _finite(values)


def _normalised(xy: list[float], w: int, h: int, what: str) -> list[float]:
    norm = to_unit(xy, w, h)
    if not in_image(norm, EDGE_TOLERANCE):
        raise ValueError(f"{what} outside the {w}×{h} image")
    return _clip(norm)


def _rotated(cx, cy, corners, degrees) -> list[float]:
    """Corners turned `degrees` clockwise on the screen (y down) about (cx, cy)."""
    return turned(cx, cy, [(x - cx, y - cy) for x, y in corners], math.radians(degrees))


def _obb(corners_px: list[float], w: int, h: int) -> list[float]:
    norm = to_unit(corners_px, w, h)
    if not in_image(norm, OBB_TOLERANCE):
        raise ValueError(f"oriented box outside the {w}×{h} image")
    return norm


class CvatReader:
    """One CVAT export: its labels, and shapes turned into Kestrel labels for the task."""

    def __init__(self, images: list[str], task: str, classes: list[str]):
        self.task = task or Task.DETECT
        self.names = list(classes)
        self.images = set(images)
        self.uploaded = ImageNames(images)
        self.skeletons: dict[str, list[str]] = {}
        self.kpt_shape: list[int] | None = None
        self.said = Counter()  # what the notes count: rotated boxes, attributes, ...
        self.attribute_names: set[str] = set()
        self.skipped: list[tuple[str, str, str]] = []

    # classes

    def declare(self, specs: list[LabelSpec]) -> None:
        for spec in specs:
            if spec.type == "skeleton" or spec.children:
                self.skeletons[spec.name] = spec.children
            if spec.name not in self.names:
                self.names.append(spec.name)

    def cls(self, name: str) -> int:
        if name not in self.names:
            self.names.append(name)
        return self.names.index(name)

    # images

    def find_image(self, base: str, name: str, subset: str) -> str | None:
        name = name.replace("\\", "/").lstrip("/")
        tries = [
            posixpath.join(base, "images", subset, name) if subset else None,
            posixpath.join(base, "images", name),
            posixpath.join(base, name),
            name,
        ]
        for t in tries:
            if t and (norm := posixpath.normpath(t).lstrip("/")) in self.images:
                return norm
        low = name.lower()
        same = self.uploaded.by_base.get(posixpath.basename(low), [])
        ends = self.uploaded.ending(low)
        for group in (ends, same):
            if subset and len(group) > 1:
                group = [i for i in group if f"/{subset.lower()}/" in f"/{i.lower()}"] or group
            if len(group) == 1:
                return group[0]
        return self.uploaded.unsuffixed(low)  # a video's frame named without its suffix

    def find_frame(self, base: str, frame: int) -> str | None:
        stem = f"frame_{frame:06d}"
        stems = self.uploaded.by_stem.get(stem, [])
        near = [i for i in stems if i.startswith(base)]
        group = near or stems
        return group[0] if len(group) == 1 else None

    # shapes

    def labels(self, el, kind: str, w: int, h: int, subtracks=None) -> list[ParsedLabel]:
        """The Kestrel labels one CVAT shape becomes; ValueError with the reason if none."""
        label = (el.get("label") or "").strip()
        if not label:
            raise ValueError(f"a {kind} without a label")
        for attr in el.findall("attribute"):
            self.attribute_names.add(attr.get("name") or "?")
            self.said["attributes"] += 1
        if el.get("occluded") == "1" and kind not in ("skeleton", "points"):
            self.said["occluded"] += 1
        task = self.task
        if kind == "tag":
            if task != Task.CLASSIFY:
                raise ValueError(
                    f"an image tag ({label[:40]}): tags are image classes, imported into a "
                    f"classify dataset (this one is {task})"
                )
            return [ParsedLabel(self.cls(label), LabelKind.TAG, [])]
        if task == Task.CLASSIFY:
            raise ValueError(f"a {kind}: a classify dataset takes image tags only")
        if kind in ("polyline", "cuboid"):
            what = "line" if kind == "polyline" else "3D cuboid"
            raise ValueError(f"{kind} shapes are not imported: Kestrel has no {what} labels")
        if kind in ("skeleton", "points"):
            return [self._keypoints(el, kind, label, w, h, subtracks)]
        if task == Task.POSE:
            raise ValueError(f"a {kind}: a pose dataset takes skeletons or points")
        cls = self.cls(label)
        if kind == "box":
            return [self._box(el, cls, w, h)]
        if kind == "ellipse":
            return [self._ellipse(el, cls, w, h)]
        if kind == "polygon":
            xy = _points(el.get("points"))
            if len(xy) < 6:
                raise ValueError("a polygon needs 3 points or more")
            return [self._outline(cls, xy, w, h)]
        if kind == "mask":
            return self._mask(el, cls, w, h)
        raise ValueError(f"{kind} shapes are not imported")

    def _outline(self, cls: int, xy: list[float], w: int, h: int) -> ParsedLabel:
        """A polygon's points (pixels) as the task wants them."""
        if self.task == Task.OBB:
            self.said["polygon_obb"] += 1
            return ParsedLabel(cls, LabelKind.OBB, _obb(min_area_corners(xy), w, h))
        norm = _normalised(xy, w, h, "polygon")
        box = _poly_to_box(norm)
        if box[2] <= 0 or box[3] <= 0:
            raise ValueError("a polygon with no area")
        if self.task == Task.SEGMENT:
            return ParsedLabel(cls, LabelKind.POLYGON, norm)
        return ParsedLabel(cls, LabelKind.BOX, box)

    def _box(self, el, cls: int, w: int, h: int) -> ParsedLabel:
        x1, y1, x2, y2 = (number_attr(el, a) for a in ("xtl", "ytl", "xbr", "ybr"))
        if x2 <= x1 or y2 <= y1:
            raise ValueError("a box with no width or height")
        rotation = number_attr(el, "rotation", 0.0) % 360
        if rotation == 0 and self.task != Task.OBB:
            # The common case, without the corner arithmetic (100,000 boxes a second matter).
            t = EDGE_TOLERANCE
            nx1, ny1, nx2, ny2 = x1 / w, y1 / h, x2 / w, y2 / h
            if nx1 < -t or ny1 < -t or nx2 > 1 + t or ny2 > 1 + t:
                raise ValueError(f"box outside the {w}×{h} image")
            nx1, ny1 = max(0.0, nx1), max(0.0, ny1)
            nx2, ny2 = min(1.0, nx2), min(1.0, ny2)
            return ParsedLabel(
                cls, LabelKind.BOX, [(nx1 + nx2) / 2, (ny1 + ny2) / 2, nx2 - nx1, ny2 - ny1]
            )
        corners = [(x1, y1), (x2, y1), (x2, y2), (x1, y2)]
        rotated = _rotated((x1 + x2) / 2, (y1 + y2) / 2, corners, rotation)
        if self.task == Task.OBB:
            return ParsedLabel(cls, LabelKind.OBB, _obb(rotated, w, h))
        if abs(rotation) > 1e-9 and abs(rotation - 360) > 1e-9:
            self.said["rotated"] += 1
        norm = _normalised(rotated, w, h, "box")
        if self.task == Task.SEGMENT and abs(rotation) > 1e-9:
            return ParsedLabel(cls, LabelKind.POLYGON, norm)
        return ParsedLabel(cls, LabelKind.BOX, _poly_to_box(norm))

    def _ellipse(self, el, cls: int, w: int, h: int) -> ParsedLabel:
        cx, cy, rx, ry = (number_attr(el, a) for a in ("cx", "cy", "rx", "ry"))
        if rx <= 0 or ry <= 0:
            raise ValueError("an ellipse with no width or height")
        rotation = number_attr(el, "rotation", 0.0)
        steps = [2 * math.pi * i / ELLIPSE_POINTS for i in range(ELLIPSE_POINTS)]
        ring = [(cx + rx * math.cos(t), cy + ry * math.sin(t)) for t in steps]
        xy = _rotated(cx, cy, ring, rotation)
        self.said["ellipse"] += 1
        if self.task == Task.OBB:
            x1, y1, x2, y2 = cx - rx, cy - ry, cx + rx, cy + ry
            corners = _rotated(cx, cy, [(x1, y1), (x2, y1), (x2, y2), (x1, y2)], rotation)
            return ParsedLabel(cls, LabelKind.OBB, _obb(corners, w, h))
        return self._outline(cls, xy, w, h)

    def _mask(self, el, cls: int, w: int, h: int) -> list[ParsedLabel]:
        left, top, mw, mh = (int(number_attr(el, a)) for a in ("left", "top", "width", "height"))
        try:
            counts = [int(v) for v in (el.get("rle") or "").replace(" ", "").split(",") if v]
        except ValueError:
            raise ValueError("a mask whose rle is not whole numbers") from None
        mask = counts_decode(counts, mw, mh)
        found = mask_box(mask)
        if found is None:
            raise ValueError("an empty mask")
        if self.task == Task.DETECT:
            bx1, by1, bx2, by2 = found
            xy = [left + bx1, top + by1, left + bx2, top + by2]
            return [ParsedLabel(cls, LabelKind.BOX, _poly_to_box(_normalised(xy, w, h, "mask")))]
        polygons = mask_to_polygons(mask)
        if not polygons:
            raise ValueError("a mask with no region of 4 pixels or more")
        out = []
        for poly in polygons if self.task == Task.SEGMENT else polygons[:1]:
            shifted = [v + (left if i % 2 == 0 else top) for i, v in enumerate(poly)]
            out.append(self._outline(cls, shifted, w, h))
        self.said["mask_regions"] += len(out)
        self.said["masks"] += 1
        return out

    def _keypoints(self, el, kind, label, w, h, subtracks) -> ParsedLabel:
        if self.task != Task.POSE:
            raise ValueError(
                f"{kind} shape ({label[:40]}): keypoints are imported into a pose dataset "
                f"(this one is {self.task})"
            )
        frame = el.get("frame")
        if kind == "skeleton":
            order = self.skeletons.get(label)
            if not order:
                raise ValueError(
                    f"skeleton {label[:40]!r} is not declared in <meta> with its points"
                )
            parts = {p.get("label"): p for p in el.findall("points")}
            if not parts and subtracks:
                parts = {name: shapes.get(frame) for name, shapes in subtracks.items()}
            kpts = []
            for name in order:
                p = parts.get(name)
                if p is None or p.get("outside") == "1":
                    kpts += [0.0, 0.0, 0.0]
                    continue
                xy = _points(p.get("points"))
                if len(xy) != 2:
                    raise ValueError(f"skeleton point {name[:20]!r} is not one x,y")
                kpts += [*xy, 1.0 if p.get("occluded") == "1" else 2.0]
        else:
            xy = _points(el.get("points"))
            if not xy:
                raise ValueError("points with no point")
            vis = 1.0 if el.get("occluded") == "1" else 2.0
            kpts = [v for i in range(0, len(xy), 2) for v in (xy[i], xy[i + 1], vis)]
        k = len(kpts) // 3
        if self.kpt_shape is None:
            self.kpt_shape = [k, 3]
        elif self.kpt_shape[0] != k:
            raise ValueError(f"{k} keypoints where this export's others have {self.kpt_shape[0]}")
        seen = [(kpts[i], kpts[i + 1]) for i in range(0, len(kpts), 3) if kpts[i + 2] > 0]
        if not seen:
            raise ValueError(f"a {kind} with no visible point")
        flat = [c for p in seen for c in p]
        norm = []
        for i in range(0, len(kpts), 3):
            x, y, v = kpts[i : i + 3]
            norm += [*(_normalised([x, y], w, h, "keypoint") if v else [0.0, 0.0]), v]
        box = _poly_to_box(_normalised(flat, w, h, "keypoints"))
        self.said["pose_box"] += 1
        return ParsedLabel(self.cls(label), LabelKind.KEYPOINTS, box + norm)
