"""Datumaro, Supervisely, VGG Image Annotator (VIA) and CreateML exports.

Each format is read into one list of shapes in pixels of its image (a box, a rotated box, a
polygon, a mask, an ellipse, keypoints, an image class), and each shape becomes the labels the
dataset's task takes, the same way for every format here: a polygon is a polygon for segment, a
box elsewhere (as Ultralytics reads one); a four-cornered polygon or a rotated box is an
oriented box for obb; keypoints go to pose datasets only, image classes to classification
datasets only; a polyline that ends where it starts is the outline of an area (a polygon), an
open one is refused with the reason, as are lone points. Datumaro and Supervisely give each
image's size, so their labels are normalised here; VIA and CreateML give none, so theirs stay in
pixels (ParsedImage.in_pixels) for the import to normalise once it has read the image.

Claims look at entry names first and then at the first few KB of a few files only (an import
can hold 100,000 files): Datumaro's annotations/<subset>.json, Supervisely's meta.json beside
its <dataset>/ann/ folders, and for VIA and CreateML the JSON files that are not named like an
image (those are one file per image, LabelMe's or Supervisely's).
"""

import base64
import binascii
import io
import json
import math
import posixpath
import re
import zlib
from collections import Counter
from dataclasses import dataclass

import numpy as np
from PIL import Image as PILImage

from datasets.models import LabelKind, Task
from datasets.services import masks
from datasets.services.formats import (
    MAX_META_FILE_BYTES,
    SKIP_FILE,
    SKIP_LABEL,
    SKIP_LABEL_FILE,
    SKIP_NO_IMAGE,
    SPLIT_NAMES,
    LabelFileError,
    Parsed,
    ParsedImage,
    ParsedLabel,
    Reader,
    _text,
    labels_from_pixels,
    split_from_path,
)
from datasets.services.images import looks_like_image

# How much of a JSON file a claim looks at.
HEAD_BYTES = 8192
# VIA and CreateML keep a whole dataset (or split) in one file: a claim peeks at this many of
# the candidate files at most, the shallowest first.
MAX_PEEKED = 256
# Points of the polygon that stands for a circle or an ellipse in a segment dataset.
ELLIPSE_POINTS = 32
# A Supervisely bitmap's PNG, decompressed, is refused past this size.
MAX_BITMAP_BYTES = 64 * 1024 * 1024


# --- shared: reading, finding images, splits ------------------------------------------------------


def _head(read: Reader, name: str) -> str:
    """The first HEAD_BYTES of a file as text ("" when it cannot be read)."""
    try:
        data = read(name, MAX_META_FILE_BYTES)
    except (KeyError, LabelFileError):
        return ""
    return data[:HEAD_BYTES].decode("utf-8", "ignore").lstrip("\ufeff")


def _load(read: Reader, name: str, skipped: list, title: str):
    """A JSON file's document, or None with the reason in `skipped`."""
    try:
        return json.loads(_text(read, name, MAX_META_FILE_BYTES))
    except (LabelFileError, KeyError) as e:
        skipped.append((name, f"unreadable {title} file ({e})", SKIP_LABEL_FILE))
    except (json.JSONDecodeError, RecursionError) as e:
        skipped.append((name, f"unreadable {title} JSON ({e})", SKIP_LABEL_FILE))
    return None


def _dict(value) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _split_word(text: str) -> str | None:
    """The split a name says (`train`, `val2017`, `_annotations_valid`), or None."""
    low = text.lower()
    if low in SPLIT_NAMES:
        return SPLIT_NAMES[low]
    for word in re.split(r"[^a-z]+", low):
        if word in SPLIT_NAMES:
            return SPLIT_NAMES[word]
    return None


def _folder_split(name: str) -> str | None:
    """The split a folder of the path names, or None (split_from_path says train then)."""
    for part in reversed(name.lower().split("/")[:-1]):
        if part in SPLIT_NAMES:
            return SPLIT_NAMES[part]
    return None


def _file_split(name: str) -> str | None:
    """The split of a whole-dataset file: its own name (val.json), then its folders."""
    stem = posixpath.basename(name).rsplit(".", 1)[0]
    return _split_word(stem) or _folder_split(name)


def _json_not_per_image(names: list[str]) -> list[str]:
    """JSON files that are not named like an image (a.json beside a.jpg, a.jpg.json): the
    candidates for a file holding a whole dataset, shallowest first."""
    stems, bases = set(), set()
    for n in names:
        if looks_like_image(n):
            low = n.lower()
            stems.add(low.rsplit(".", 1)[0])
            bases.add(posixpath.basename(low))
            stems.add(posixpath.basename(low).rsplit(".", 1)[0])
    out = []
    for n in names:
        low = n.lower()
        if not low.endswith(".json"):
            continue
        bare = low[: -len(".json")]
        if bare in stems or posixpath.basename(bare) in stems or posixpath.basename(bare) in bases:
            continue
        out.append(n)
    out.sort(key=lambda n: (n.count("/"), n))
    return out


class _ImageIndex:
    """The uploaded images, looked up by the path an annotation wrote for its image."""

    def __init__(self, images: list[str]):
        self.exact = set(images)
        self.lower: dict[str, str] = {}
        self.by_base: dict[str, list[str]] = {}
        self.by_stem: dict[str, list[str]] = {}
        self.by_stem_path: dict[str, list[str]] = {}
        for image in images:
            low = image.lower()
            self.lower.setdefault(low, image)
            self.by_base.setdefault(posixpath.basename(low), []).append(image)
            stem_path = low.rsplit(".", 1)[0]
            self.by_stem_path.setdefault(stem_path, []).append(image)
            self.by_stem.setdefault(posixpath.basename(stem_path), []).append(image)

    @staticmethod
    def _clean(ref: str) -> str:
        ref = ref.strip().replace("\\", "/")
        if "://" in ref:  # a URL: its path
            ref = ref.split("://", 1)[1].split("?", 1)[0].split("#", 1)[0]
            ref = ref.split("/", 1)[1] if "/" in ref else ref
        if re.match(r"^[a-zA-Z]:/", ref):  # C:/data/x.jpg
            ref = ref[3:]
        return ref.lstrip("/")

    def find(self, ref: str, folders: list[str], *, anywhere: bool = True) -> str | None:
        """The image a path names: inside each folder in turn, then the one image whose path
        ends with it, then the one image of its file name (preferring one inside the folders;
        only those when not `anywhere`)."""
        rel = self._clean(ref)
        if not rel:
            return None
        for folder in folders:
            path = posixpath.normpath(posixpath.join(folder, rel)) if folder else rel
            if path in self.exact:
                return path
            if path.lower() in self.lower:
                return self.lower[path.lower()]
        same = self.by_base.get(posixpath.basename(rel).lower(), [])
        if not anywhere:
            same = [c for c in same if any(c.startswith(f) for f in folders)]
        return self._pick(same, "/" + rel.lower(), folders, ends=lambda c: "/" + c.lower())

    def find_stem(self, ref: str, folders: list[str]) -> str | None:
        """The image an id names without its extension (Datumaro's item id): any image
        extension, looked for as find() does."""
        rel = self._clean(ref)
        if not rel:
            return None
        for folder in folders:
            path = posixpath.normpath(posixpath.join(folder, rel)) if folder else rel
            found = self.by_stem_path.get(path.lower(), [])
            if len(found) == 1:
                return found[0]
        same = self.by_stem.get(posixpath.basename(rel).lower(), [])
        return self._pick(
            same, "/" + rel.lower(), folders, ends=lambda c: "/" + c.lower().rsplit(".", 1)[0]
        )

    @staticmethod
    def _pick(same: list[str], suffix: str, folders: list[str], ends) -> str | None:
        if len(same) == 1:
            return same[0]
        by_suffix = [c for c in same if ends(c).endswith(suffix)]
        if len(by_suffix) == 1:
            return by_suffix[0]
        inside = [c for c in (by_suffix or same) if any(f and c.startswith(f) for f in folders)]
        return inside[0] if len(inside) == 1 else None


# --- shared: shapes in pixels → the task's labels ------------------------------------------------


@dataclass(slots=True)
class _Shape:
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


def _num(v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise ValueError(f"not a number: {str(v)[:20]!r}")
    try:
        f = float(v)
    except ValueError:
        raise ValueError(f"not a number: {str(v)[:20]!r}") from None
    if not math.isfinite(f):
        raise ValueError("NaN or infinite value")
    return f


def _nums(values) -> list[float]:
    if not isinstance(values, (list, tuple)):
        raise ValueError("coordinates are not a list of numbers")
    return [_num(v) for v in values]


def _xy_pairs(points) -> list[float]:
    """[[x, y], ...] → [x, y, ...]."""
    if not isinstance(points, list):
        raise ValueError("points are not a list of [x, y]")
    out = []
    for p in points:
        if not (isinstance(p, (list, tuple)) and len(p) >= 2):
            raise ValueError("a point is not [x, y]")
        out += [_num(p[0]), _num(p[1])]
    return out


def _box_of(xy: list[float]) -> list[float]:
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
    c, s = math.cos(angle), math.sin(angle)
    out = []
    for dx, dy in ((-w / 2, -h / 2), (w / 2, -h / 2), (w / 2, h / 2), (-w / 2, h / 2)):
        out += [cx + dx * c - dy * s, cy + dx * s + dy * c]
    return out


def _ellipse_polygon(cx, cy, rx, ry, angle) -> list[float]:
    c, s = math.cos(angle), math.sin(angle)
    out = []
    for i in range(ELLIPSE_POINTS):
        t = 2 * math.pi * i / ELLIPSE_POINTS
        x, y = rx * math.cos(t), ry * math.sin(t)
        out += [cx + x * c - y * s, cy + x * s + y * c]
    return out


def _closed(xy: list[float]) -> bool:
    """A polyline that ends where it starts (within 5% of its size, or 3 pixels), as people
    draw outlines with a polyline tool: the outline of an area."""
    if len(xy) < 8 or len(xy) % 2:
        return False
    x1, y1, x2, y2 = _box_of(xy)
    gap = math.hypot(xy[0] - xy[-2], xy[1] - xy[-1])
    return max(x2 - x1, y2 - y1) > 0 and gap <= max(3.0, 0.05 * max(x2 - x1, y2 - y1))


def _box_label(box: list[float]) -> tuple[str, list[float]]:
    x1, y1, x2, y2 = box
    if x2 - x1 <= 0 or y2 - y1 <= 0:
        raise ValueError("box with no width or height")
    return LabelKind.BOX, [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]


def _labels_of(shape: _Shape, task: str, size, converted: Counter) -> list[tuple[str, list]]:
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
            box = _box_of(seen)
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
            box = _box_of(corners)
            return [(LabelKind.OBB, corners)] if task == Task.OBB else [_box_label(box)]
        if task == Task.OBB:
            return [(LabelKind.OBB, corners)]
        converted["rotated boxes read as the upright boxes around them"] += 1
        return [_box_label(_clip_box(_box_of(corners), size))]
    if kind == "polyline":
        if not _closed(geo):
            raise ValueError(
                "an open polyline is not imported (it is no box, polygon or keypoints)"
            )
        converted["polylines that end where they start read as polygons"] += 1
        xy = geo[:-2] if geo[-2:] == geo[:2] else geo
        return _labels_of(_Shape("polygon", xy), task, size, converted)
    if kind == "polygon":
        xy = geo
        if len(xy) < 6 or len(xy) % 2:
            raise ValueError("a polygon needs 3 points or more")
        box = _box_of(xy)
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


class _Collector:
    """What a parser found, image by image, in pixels; finish() names the classes, normalises
    where the image's size is known and returns the Parsed."""

    def __init__(self, fmt: str, images: list[str], classes: list[str], task: str):
        self.fmt = fmt
        self.task = task or Task.DETECT
        self.classes = list(classes)
        self.declared: list[str] = []  # the format's own class list, in its order
        self.images = {p: ParsedImage(p, split_from_path(p)) for p in images}
        self.index = _ImageIndex(images)
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

    def add(self, image: str, cls: str, shape: _Shape, source: str, where: str) -> int:
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


def _image_size(w, h) -> tuple[int, int] | None:
    try:
        w, h = int(w), int(h)
    except (TypeError, ValueError, OverflowError):
        return None
    return (w, h) if w > 0 and h > 0 else None


# --- Datumaro -------------------------------------------------------------------------------------

# Datumaro's annotation types Kestrel reads (captions, cuboids... are refused)
_DATUMARO_TYPES = {"label", "bbox", "polygon", "polyline", "ellipse", "mask", "points", "skeleton"}
_DATUMARO_HEAD = re.compile(r'"dm_format_version"|"categories"\s*:\s*\{')
_COCO_HEAD = re.compile(r'"images"\s*:\s*\[')


def claim_datumaro(names, read) -> list[str]:
    """annotations/<subset>.json whose categories are an object (COCO's are a list)."""
    found = []
    for name in names:
        parts = name.lower().split("/")
        if len(parts) < 2 or parts[-2] != "annotations" or not parts[-1].endswith(".json"):
            continue
        head = _head(read, name)
        if _DATUMARO_HEAD.search(head) and not _COCO_HEAD.search(head):
            found.append(name)
    return found


def _datumaro_categories(doc: dict) -> tuple[list, set[int], dict[int, list[str]]]:
    """Label names by id, the ids that are parts of a skeleton (not classes), and each
    skeleton's (or points label's) keypoint names by label id."""
    cats = doc.get("categories") if isinstance(doc.get("categories"), dict) else {}
    label_cat = cats.get("label") if isinstance(cats.get("label"), dict) else {}
    labels = label_cat.get("labels") if isinstance(label_cat.get("labels"), list) else []
    labels = [lb if isinstance(lb, dict) else {} for lb in labels]  # ids are places in the list
    label_names = [str(lb.get("name", f"class{i}")) for i, lb in enumerate(labels)]
    points_cat = cats.get("points") if isinstance(cats.get("points"), dict) else {}
    kpt_names: dict[int, list[str]] = {}
    for item in _list(points_cat.get("items")):
        if isinstance(item, dict) and isinstance(item.get("labels"), list):
            try:
                kpt_names[int(item.get("label_id"))] = [str(n) for n in item["labels"]]
            except (TypeError, ValueError, OverflowError):
                continue
    parts: set[int] = set()
    by_name = {n: i for i, n in enumerate(label_names)}
    from_parts: dict[int, list[str]] = {}
    for i, lb in enumerate(labels):
        parent = lb.get("parent")
        if isinstance(parent, str) and parent in by_name:  # a skeleton's point (CVAT)
            parts.add(i)
            from_parts.setdefault(by_name[parent], []).append(label_names[i])
    for skeleton, order in from_parts.items():
        kpt_names.setdefault(skeleton, order)  # the points categories' order first
    return label_names, parts, kpt_names


def _datumaro_points(ann: dict) -> list[tuple[float, float, float]]:
    xy = _nums(ann.get("points") or [])
    if len(xy) % 2:
        raise ValueError("points need x and y each")
    vis = ann.get("visibility") if isinstance(ann.get("visibility"), list) else []
    out = []
    for k in range(len(xy) // 2):
        v = vis[k] if k < len(vis) else 2
        v = float(v) if isinstance(v, (int, float)) and v in (0, 1, 2) else 2.0
        out.append((xy[2 * k], xy[2 * k + 1], v))
    return out


def _skeleton_points(ann: dict, n: int) -> list[tuple[float, float, float]]:
    """A skeleton written as one list of points (Datumaro's test assets): x, y, visibility
    for each point of the skeleton, or x, y pairs beside a visibility list."""
    values = _nums(ann["points"])
    if len(values) == 2 * n or (not n and isinstance(ann.get("visibility"), list)):
        return _datumaro_points(ann)
    if len(values) % 3 or (n and len(values) != 3 * n):
        raise ValueError(f"a skeleton of {n} points with {len(values)} values")
    return [
        (x, y, v if v in (0, 1, 2) else 2.0)
        for x, y, v in zip(values[0::3], values[1::3], values[2::3], strict=True)
    ]


def _datumaro_shape(ann: dict, label_names, kpt_names, size) -> _Shape:
    """One Datumaro annotation → a _Shape; ValueError with the reason otherwise."""
    kind = str(ann.get("type"))
    attrs = ann.get("attributes") if isinstance(ann.get("attributes"), dict) else {}
    if kind == "label":
        return _Shape("tag")
    if kind == "bbox":
        bbox = _nums(ann.get("bbox") or [])
        if len(bbox) != 4:
            raise ValueError("a bbox needs x, y, width, height")
        x, y, w, h = bbox
        rotation = attrs.get("rotation")
        angle = math.radians(_num(rotation)) if rotation not in (None, "", 0) else 0.0
        if angle % (2 * math.pi):
            return _Shape("rbox", [x + w / 2, y + h / 2, w, h, angle])
        return _Shape("box", [x, y, x + w, y + h])
    if kind in ("polygon", "polyline"):
        return _Shape(kind, _nums(ann.get("points") or []))
    if kind == "ellipse":
        pts = _nums(ann.get("points") or [])
        if len(pts) != 4:
            raise ValueError("an ellipse needs the corners of its box")
        x1, y1, x2, y2 = pts
        rotation = attrs.get("rotation")
        angle = math.radians(_num(rotation)) if rotation not in (None, "", 0) else 0.0
        return _Shape(
            "ellipse", [(x1 + x2) / 2, (y1 + y2) / 2, abs(x2 - x1) / 2, abs(y2 - y1) / 2, angle]
        )
    if kind == "mask":
        rle = ann.get("rle")
        if not isinstance(rle, dict):
            raise ValueError("a mask without its rle")
        mask = masks.coco_rle_decode(rle)
        if size is not None and (mask.shape[1], mask.shape[0]) != size:
            raise ValueError(
                f"mask of {mask.shape[1]}×{mask.shape[0]} on a {size[0]}×{size[1]} image"
            )
        return _Shape("mask", (mask, 0, 0))
    if kind == "points":
        return _Shape("keypoints", (None, _datumaro_points(ann)))
    if kind == "skeleton":
        order = kpt_names.get(ann.get("label_id"))
        elements = [e for e in _list(ann.get("elements")) if isinstance(e, dict)]
        if not elements and isinstance(ann.get("points"), list):
            return _Shape("keypoints", (None, _skeleton_points(ann, len(order or []))))
        if not order:
            ids = [e.get("label_id") for e in elements]
            order = [
                label_names[i] for i in ids if isinstance(i, int) and 0 <= i < len(label_names)
            ]
        kpts = [(0.0, 0.0, 0.0)] * len(order)
        for e in elements:
            lid = e.get("label_id")
            name = (
                label_names[lid] if isinstance(lid, int) and 0 <= lid < len(label_names) else None
            )
            found = _datumaro_points(e)
            if name in order and found:
                kpts[order.index(name)] = found[0]
        return _Shape("keypoints", (None, kpts))
    raise ValueError(f"{kind[:30]} annotations are not imported")


def parse_datumaro(images, files, read, *, task, classes, names):
    """annotations/<subset>.json: categories.label.labels (the classes, a skeleton's parts
    excepted), items with id, image {path, size [h, w]} and annotations in pixels. The subset
    is the split; an item's image is images/<subset>/<path>, images/<path>, or found by its
    path or id anywhere in the upload. Annotations of one object share a group (a COCO object
    read by Datumaro is a polygon and its bbox): each object is imported once, as the shape the
    task wants."""
    out = _Collector("datumaro", images, classes, task)
    grouped_twice = 0
    subsets = []
    for ann_file in sorted(files):
        doc = _load(read, ann_file, out.skipped, "Datumaro")
        if doc is None:
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
            out.skip(ann_file, "not a Datumaro file (no items list)", SKIP_LABEL_FILE)
            continue
        out.label_counts[ann_file] = 0
        label_names, parts, kpt_names = _datumaro_categories(doc)
        for i, name in enumerate(label_names):
            if i not in parts:
                out.declare(name)
        subset = posixpath.basename(ann_file).rsplit(".", 1)[0]
        split = _split_word(subset)
        subsets.append(subset)
        if split is None and subset.lower() != "default":
            out.notes.append(
                f"{ann_file}: subset {subset!r} names no split: its images keep the split "
                "of their folders (train where none does)"
            )
        low = ann_file.lower()
        root = ann_file[: low.rfind("annotations/")]
        folders = [f"{root}images/{subset}/", f"{root}images/", root]
        for n, item in enumerate(doc["items"]):
            if not isinstance(item, dict):
                continue
            item_id = str(item.get("id", ""))
            where = f"{ann_file} item {item_id[:100] or n}"
            media = item.get("image") if isinstance(item.get("image"), dict) else None
            media = media or (item.get("media") if isinstance(item.get("media"), dict) else {})
            path = media.get("path") if isinstance(media.get("path"), str) else ""
            image = out.index.find(path, folders) if path else None
            image = image or (out.index.find_stem(item_id, folders) if item_id else None)
            if image is None:
                out.skip(
                    f"{ann_file} item {(path or item_id)[:200]}",
                    "its image is not in the upload",
                    SKIP_NO_IMAGE,
                )
                continue
            hw = media.get("size")
            size = _image_size(hw[1], hw[0]) if isinstance(hw, list) and len(hw) == 2 else None
            anns = [a for a in _list(item.get("annotations")) if isinstance(a, dict)]
            if size is None:  # a mask is drawn on the whole image: its size is the image's
                for a in anns:
                    rle_size = _dict(a.get("rle")).get("size") if a.get("type") == "mask" else None
                    if isinstance(rle_size, list) and len(rle_size) == 2:
                        size = _image_size(rle_size[1], rle_size[0])
                        break
            out.take(image, split, size)
            grouped_twice += _datumaro_item(
                out, image, anns, label_names, kpt_names, where, ann_file, size
            )
    if subsets:
        out.notes.insert(0, f"Datumaro subsets read: {', '.join(subsets)}")
    if grouped_twice:
        out.notes.append(
            f"{grouped_twice} annotations describing an object another one of its group "
            "already gave were not imported twice"
        )
    return out.finish()


def _datumaro_item(out, image, anns, label_names, kpt_names, where, ann_file, size) -> int:
    """The annotations of one item; returns how many were left out as another shape of an
    object already imported (a group's bbox beside its polygon)."""
    shapes: list[tuple[int, str, _Shape, int]] = []  # (label id, where, shape, group)
    for k, ann in enumerate(anns):
        here = f"{where} annotation {ann.get('id', k)}"
        kind = str(ann.get("type"))[:30]
        if kind not in _DATUMARO_TYPES:
            out.skip(here, f"{kind} annotations are not imported")
            continue
        lid = ann.get("label_id")
        if not isinstance(lid, int) or not 0 <= lid < len(label_names):
            out.skip(here, f"{str(ann.get('type'))[:30]} with an unknown label id {lid!r}")
            continue
        try:
            shape = _datumaro_shape(ann, label_names, kpt_names, size)
        except ValueError as e:
            out.skip(here, f"{label_names[lid][:40]!r}: {e}")
            continue
        group = ann.get("group") if isinstance(ann.get("group"), int) else 0
        shapes.append((lid, here, shape, group if shape.kind != "tag" else 0))
    clusters: dict[tuple[int, int], list[int]] = {}
    for i, (lid, _, _, group) in enumerate(shapes):
        if group:
            clusters.setdefault((group, lid), []).append(i)
    dropped: set[int] = set()
    task = out.task
    for members in clusters.values():
        if len(members) < 2:
            continue
        kinds = {i: shapes[i][2].kind for i in members}
        boxes = [i for i in members if kinds[i] in ("box", "rbox")]
        outlines = [i for i in members if kinds[i] in ("polygon", "mask", "ellipse")]
        points = [i for i in members if kinds[i] == "keypoints"]
        if task == Task.POSE and points:
            if boxes and shapes[boxes[0]][2].kind == "box":
                for i in points:  # the group's box is the keypoints' box
                    shapes[i][2].geo = (shapes[boxes[0]][2].geo, shapes[i][2].geo[1])
            keep = points
        elif task == Task.SEGMENT and outlines:
            keep = outlines + points
        elif boxes:
            keep = boxes[:1] + points
        else:
            keep = members
        dropped |= set(members) - set(keep)
    for i, (lid, here, shape, _) in enumerate(shapes):
        if i not in dropped:
            out.add(image, label_names[lid], shape, ann_file, here)
    return len(dropped)


# --- Supervisely ----------------------------------------------------------------------------------

_SLY_SIDE_FILES = {
    "key_id_map.json": "Supervisely's ids of objects on its server",
    "obj_class_to_machine_color.json": "Supervisely's colours of its classes",
}
_SLY_SIDE_FOLDERS = {
    "meta": "Supervisely's image metadata",
    "img_info": "Supervisely's image records",
    "blob": "Supervisely's image blobs",
}
# geometryType → what Kestrel reads it as (classes of other shapes make no label)
_SLY_SHAPES = {"rectangle", "polygon", "bitmap", "alpha_mask", "graph", "oriented_bbox", "any"}


def _sly_roots(names: list[str]) -> dict[str, list[str]]:
    """Each folder holding a meta.json → the annotation files of its datasets
    (<dataset>/ann/<image>.json, nested datasets too)."""
    metas = sorted(
        (n for n in names if posixpath.basename(n).lower() == "meta.json"),
        key=lambda n: (n.count("/"), n),
    )
    roots: dict[str, list[str]] = {}
    for meta in metas:
        root = posixpath.dirname(meta) + "/" if "/" in meta else ""
        if any(root.startswith(r) for r in roots):  # a deeper meta.json of a project found
            continue
        roots[root] = []
    for name in names:
        low = name.lower()
        parts = low.split("/")
        if not low.endswith(".json") or len(parts) < 3 or parts[-2] != "ann":
            continue
        root = max((r for r in roots if name.startswith(r)), key=len, default=None)
        if root is not None and name.count("/") - root.count("/") >= 2:
            roots[root].append(name)
    return {r: anns for r, anns in roots.items() if anns}


def claim_supervisely(names, read) -> list[str]:
    """meta.json (with its classes) and the <dataset>/ann/*.json files below it."""
    found = []
    for root, anns in _sly_roots(names).items():
        meta = f"{root}meta.json"
        meta = next((n for n in names if n.lower() == meta.lower()), meta)
        head = _head(read, meta)
        if head.startswith("{") and re.search(r'"classes"\s*:\s*\[', head):
            found += [meta, *anns]
    return found


def _sly_meta(doc) -> tuple[list[dict], dict[str, list[str]], dict[str, dict]]:
    """Classes in order, each graph class's node ids in template order (and their names),
    and tag metas by name."""
    classes = [c for c in _list(doc.get("classes")) if isinstance(c, dict) and c.get("title")]
    nodes: dict[str, list[str]] = {}
    for c in classes:
        config = c.get("geometry_config") if isinstance(c.get("geometry_config"), dict) else {}
        if isinstance(config.get("nodes"), dict):
            nodes[str(c["title"])] = [str(k) for k in config["nodes"]]
    tags = {
        str(t["name"]): t for t in _list(doc.get("tags")) if isinstance(t, dict) and t.get("name")
    }
    return classes, nodes, tags


def _sly_bitmap(data: str, size: tuple[int, int] | None) -> np.ndarray:
    """Supervisely's bitmap: base64 of a zlib-compressed PNG (or of a bare PNG) → a bool mask
    (its alpha where it has one, else its set pixels), as Bitmap.base64_2_data reads it."""
    try:
        raw = base64.b64decode(data)
    except (binascii.Error, ValueError, TypeError):
        raise ValueError("bitmap data is not base64") from None
    try:
        inflate = zlib.decompressobj()
        png = inflate.decompress(raw, MAX_BITMAP_BYTES)
        if inflate.unconsumed_tail:
            raise ValueError("bitmap too large")
    except zlib.error:
        png = raw
    try:
        with PILImage.open(io.BytesIO(png)) as im:
            w, h = im.size
            if w * h > masks.MAX_MASK_PIXELS or (size and (w > size[0] or h > size[1])):
                raise ValueError(f"bitmap of {w}×{h} is larger than its image")
            if im.mode in ("RGBA", "LA", "PA") or "transparency" in im.info:
                return np.asarray(im.convert("RGBA"))[:, :, 3] > 0
            if im.mode in ("P", "1", "L", "I", "I;16"):
                return np.asarray(im) > 0
            return np.asarray(im.convert("RGB")).any(axis=-1)
    except (OSError, SyntaxError, PILImage.DecompressionBombError):
        raise ValueError("bitmap data is not a PNG") from None


def _sly_shape(obj: dict, nodes_order: list[str] | None, holes: Counter, size) -> _Shape:
    kind = str(obj.get("geometryType") or obj.get("shape") or "")
    points = obj.get("points") if isinstance(obj.get("points"), dict) else {}
    if kind == "rectangle":
        xy = _xy_pairs(points.get("exterior"))
        if len(xy) != 4:
            raise ValueError("a rectangle needs 2 points")
        return _Shape("sly-rect", _box_of(xy))
    if kind == "polygon":
        if any(isinstance(h, list) and h for h in _list(points.get("interior"))):
            holes["polygons with holes read as their outline (holes are not kept)"] += 1
        return _Shape("polygon", _xy_pairs(points.get("exterior")))
    if kind in ("bitmap", "alpha_mask"):
        bitmap = obj.get(kind) if isinstance(obj.get(kind), dict) else obj.get("bitmap")
        if not isinstance(bitmap, dict) or not isinstance(bitmap.get("data"), str):
            raise ValueError("a bitmap without its data")
        origin = _nums(bitmap.get("origin") or [0, 0])
        if len(origin) != 2:
            raise ValueError("a bitmap's origin is not [x, y]")
        return _Shape("mask", (_sly_bitmap(bitmap["data"], size), origin[0], origin[1]))
    if kind == "oriented_bbox":
        raw = obj.get("points")
        raw = raw.get("exterior") if isinstance(raw, dict) else raw
        xy = _xy_pairs(raw)
        if len(xy) != 4:
            raise ValueError("an oriented box needs 2 points")
        x1, y1, x2, y2 = _box_of(xy)
        angle = _num(obj.get("angle") or 0)
        return _Shape("rbox", [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, angle])
    if kind == "graph":
        nodes = obj.get("nodes") if isinstance(obj.get("nodes"), dict) else {}
        order = nodes_order or list(nodes)
        kpts = []
        for node_id in order:
            node = nodes.get(node_id)
            if not isinstance(node, dict) or not isinstance(node.get("loc"), list):
                kpts.append((0.0, 0.0, 0.0))
                continue
            loc = _nums(node["loc"])
            if len(loc) != 2:
                raise ValueError("a node's loc is not [x, y]")
            kpts.append((loc[0], loc[1], 1.0 if node.get("disabled") else 2.0))
        return _Shape("keypoints", (None, kpts))
    if kind == "point":
        raise ValueError("a lone point is not imported (it is no box, polygon or skeleton)")
    if kind in ("line", "polyline"):
        return _Shape("polyline", _xy_pairs(points.get("exterior")))
    raise ValueError(f"{kind[:30] or 'untyped'} objects are not imported")


def _sly_tags(tags, tag_metas: dict) -> tuple[list[str], list[str]]:
    """An image's tags → the classes they name, and the tags that name none. A tag without
    a value is its name; a one-of tag's value (value_type oneof_string) is the chosen class;
    older exports list bare names."""
    named, other = [], []
    for t in tags if isinstance(tags, list) else []:
        if isinstance(t, str):
            named.append(t)
        elif isinstance(t, dict) and t.get("name"):
            name, value = str(t["name"]), t.get("value")
            kind = (tag_metas.get(name) or {}).get("value_type")
            if value in (None, ""):
                named.append(name)
            elif kind == "oneof_string" and isinstance(value, str):
                named.append(value)
            else:
                other.append(name)
    return named, other


def parse_supervisely(images, files, read, *, task, classes, names):
    """meta.json: the classes (title, shape; a graph's nodes in template order) and tags.
    <dataset>/ann/<image name>.json: size {height, width}, objects (classTitle, geometryType
    rectangle / polygon / bitmap / graph / oriented_bbox / line; lone points refused) and the
    image's tags. The image is <dataset>/img/<image name>. The split: an image tag named
    train/val/test, else the dataset folder's name, else the image's folders. In a
    classification dataset the image's tags are its classes."""
    out = _Collector("supervisely", images, classes, task)
    metas = [f for f in files if posixpath.basename(f).lower() == "meta.json"]
    anns = sorted(f for f in files if f not in metas)
    meta_by_root: dict[str, tuple] = {}
    for meta in sorted(metas):
        doc = _load(read, meta, out.skipped, "Supervisely meta")
        if not isinstance(doc, dict):
            if doc is not None:
                out.skip(meta, "not a Supervisely meta.json (not an object)", SKIP_LABEL_FILE)
            continue
        sly_classes, nodes, tag_metas = _sly_meta(doc)
        meta_by_root[posixpath.dirname(meta) + "/" if "/" in meta else ""] = (nodes, tag_metas)
        if out.task != Task.CLASSIFY:
            for c in sly_classes:
                if str(c.get("shape") or "any") in _SLY_SHAPES:
                    out.declare(str(c["title"]))
        out.notes.append(f"classes read from {meta} ({len(sly_classes)} classes)")
    holes: Counter = Counter()
    datasets: set[str] = set()
    tags_left: Counter = Counter()
    for ann_file in anns:
        root = max((r for r in meta_by_root if ann_file.startswith(r)), key=len, default=None)
        nodes, tag_metas = meta_by_root.get(root, ({}, {}))
        ds_folder = "/".join(ann_file.split("/")[:-2])
        datasets.add(ds_folder)
        image_name = posixpath.basename(ann_file)[: -len(".json")]
        # <dataset>/img/<image name>, else an image of that name (or stem) in the dataset
        image = out.index.find(image_name, [f"{ds_folder}/img/"], anywhere=False)
        if image is None:
            image = out.index.find(image_name, [f"{ds_folder}/"], anywhere=False)
        if image is None:
            image = out.index.find_stem(f"{ds_folder}/img/{image_name}", [""])
        if image is None:
            out.skip(ann_file, f"its image {image_name[:100]} is not in the upload", SKIP_NO_IMAGE)
            continue
        doc = _load(read, ann_file, out.skipped, "Supervisely annotation")
        if doc is None:
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("objects", []), list):
            out.skip(ann_file, "not a Supervisely annotation (no objects list)", SKIP_LABEL_FILE)
            continue
        out.label_counts[ann_file] = 0
        size_doc = doc.get("size") if isinstance(doc.get("size"), dict) else {}
        size = _image_size(size_doc.get("width"), size_doc.get("height"))
        tags, valued = _sly_tags(doc.get("tags"), tag_metas)
        split_tags = [t for t in tags if t.lower() in SPLIT_NAMES]
        class_tags = [t for t in tags if t.lower() not in SPLIT_NAMES]
        tags_left.update(valued)
        split = (
            SPLIT_NAMES[split_tags[-1].lower()]
            if split_tags
            else _split_word(posixpath.basename(ds_folder)) or _folder_split(image)
        )
        out.take(image, split, size)
        if out.task == Task.CLASSIFY:
            for t in class_tags:
                out.add(image, t, _Shape("tag"), ann_file, f"{ann_file} tag {t[:60]}")
        else:
            tags_left.update(class_tags)
        for k, obj in enumerate(_list(doc.get("objects"))):
            if not isinstance(obj, dict):
                continue
            where = f"{ann_file} object {obj.get('id', k)}"
            title = str(obj.get("classTitle") or "")
            try:
                shape = _sly_shape(obj, nodes.get(title), holes, size)
            except ValueError as e:
                out.skip(where, f"{title[:40]!r}: {e}")
                continue
            if shape.kind == "sly-rect":
                # Supervisely's right and bottom are the last pixel inside the box.
                x1, y1, x2, y2 = shape.geo
                w, h = size if size else (x2 + 1, y2 + 1)
                shape = _Shape("box", [x1, y1, min(x2 + 1, max(w, x2)), min(y2 + 1, max(h, y2))])
            out.add(image, title, shape, ann_file, where)
    if anns:
        out.notes.insert(
            0, f"Supervisely project: {len(anns)} annotation files in {len(datasets)} datasets"
        )
    for what, n in holes.items():
        out.notes.append(f"{n} {what}")
    if tags_left:
        shown = ", ".join(t for t, _ in tags_left.most_common(5))
        why = (
            "only a classification dataset takes image classes"
            if out.task != Task.CLASSIFY
            else "a tag with a value is a class only when it is one of a list (oneof_string)"
        )
        out.notes.append(f"image tags not imported ({shown}): {why}")
    read_files = set(files)
    for name in names:
        low = name.lower()
        base = posixpath.basename(low)
        parent = low.split("/")[-2] if "/" in low else ""
        if not low.endswith(".json") or name in read_files:
            continue
        if base in _SLY_SIDE_FILES:
            out.skip(name, f"not read: {_SLY_SIDE_FILES[base]}, no labels", SKIP_FILE)
        elif parent in _SLY_SIDE_FOLDERS and any(low.startswith(r.lower()) for r in meta_by_root):
            out.skip(name, f"not read: {_SLY_SIDE_FOLDERS[parent]}, no labels", SKIP_FILE)
    return out.finish()


# --- VGG Image Annotator (VIA) --------------------------------------------------------------------

_VIA_PROJECT = re.compile(r'"_via_(img_metadata|settings|image_id_list|data_format_version)"')
_FIRST_VALUE_OBJECT = re.compile(r'^\s*\{\s*"(?:[^"\\]|\\.)*"\s*:\s*\{')
# Attribute names that say "the class", best first (compared without case, spaces, _ or -).
_CLASS_ATTRIBUTES = (
    "class",
    "classname",
    "label",
    "labelname",
    "name",
    "type",
    "category",
    "objectclass",
    "objecttype",
    "object",
)


def _is_via(head: str) -> bool:
    if _VIA_PROJECT.search(head):
        return True
    return bool(_FIRST_VALUE_OBJECT.match(head)) and '"filename"' in head and '"regions"' in head


def claim_via(names, read) -> list[str]:
    """A VIA project (_via_img_metadata...) or its annotation export ({"<file><size>":
    {filename, size, regions}}), among the JSON files not named like an image."""
    return [n for n in _json_not_per_image(names)[:MAX_PEEKED] if _is_via(_head(read, n))]


def _class_attribute(keys: Counter) -> tuple[str | None, str]:
    """The attribute that holds the class, and how it was chosen (for the note)."""
    if len(keys) == 1:
        key = next(iter(keys))
        return key, f"the class is the region attribute {key!r} (the only one)"

    def plain(k: str) -> str:
        return re.sub(r"[\s_\-]+", "", k.lower())

    for wanted in _CLASS_ATTRIBUTES:
        for key in sorted(keys, key=lambda k: -keys[k]):
            if plain(key) == wanted:
                others = ", ".join(repr(k) for k in sorted(keys) if k != key)
                return key, f"the class is the region attribute {key!r} ({others} not read)"
    for key in sorted(keys, key=lambda k: -keys[k]):
        if "class" in plain(key) or "label" in plain(key):
            others = ", ".join(repr(k) for k in sorted(keys) if k != key)
            return key, f"the class is the region attribute {key!r} ({others} not read)"
    return None, ""


def _attribute_class(value) -> str:
    """A region attribute's value → a class name: text, a dropdown or radio option's id, or the
    one ticked box of a checkbox attribute ({"cat": true})."""
    if isinstance(value, dict):
        ticked = [str(k) for k, v in value.items() if v]
        if len(ticked) != 1:
            raise ValueError(f"{len(ticked)} options ticked where the class needs one")
        return ticked[0]
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value).strip()
    raise ValueError("its class attribute is not text")


def _via_shape(sa: dict) -> _Shape:
    name = str(sa.get("name") or "")
    if name == "rect":
        x, y, w, h = (_num(sa.get(k)) for k in ("x", "y", "width", "height"))
        return _Shape("box", [x, y, x + w, y + h])
    if name == "polygon":
        xs, ys = _nums(sa.get("all_points_x")), _nums(sa.get("all_points_y"))
        if len(xs) != len(ys):
            raise ValueError("all_points_x and all_points_y differ in length")
        return _Shape("polygon", [v for pair in zip(xs, ys, strict=True) for v in pair])
    if name == "circle":
        cx, cy, r = (_num(sa.get(k)) for k in ("cx", "cy", "r"))
        return _Shape("ellipse", [cx, cy, r, r, 0.0])
    if name == "ellipse":
        cx, cy, rx, ry = (_num(sa.get(k)) for k in ("cx", "cy", "rx", "ry"))
        return _Shape("ellipse", [cx, cy, rx, ry, _num(sa.get("theta") or 0)])
    if name == "point":
        raise ValueError("a lone point is not imported (it is no box, polygon or skeleton)")
    if name == "polyline":
        xs, ys = _nums(sa.get("all_points_x")), _nums(sa.get("all_points_y"))
        if len(xs) != len(ys):
            raise ValueError("all_points_x and all_points_y differ in length")
        return _Shape("polyline", [v for pair in zip(xs, ys, strict=True) for v in pair])
    raise ValueError(f"{name[:30] or 'untyped'} regions are not imported")


def _via_regions(entry: dict) -> list[dict]:
    regions = entry.get("regions")
    if isinstance(regions, dict):  # VIA 1.x: {"0": region, "1": region}
        regions = [regions[k] for k in sorted(regions, key=lambda k: (len(k), k))]
    return [r for r in regions if isinstance(r, dict)] if isinstance(regions, list) else []


def _set_keys(dicts) -> Counter:
    """How many times each attribute is set (not empty) in these attribute objects."""
    return Counter(k for d in dicts for k, v in d.items() if v not in (None, "", {}))


class _ViaClasses:
    """How one VIA file names its regions' classes: the one attribute its regions set, or the
    one named like a class among several; with no attribute at all, one class for all."""

    def __init__(self, out: _Collector, via_file: str, regions: list[dict], region_defs: dict):
        keys = _set_keys(_dict(r.get("region_attributes")) for r in regions)
        self.attr, how = _class_attribute(keys)
        self.single = None
        if self.attr is not None:
            out.notes.append(f"{via_file}: {how}")
            options = _dict(region_defs.get(self.attr)).get("options")
            if out.task != Task.CLASSIFY and isinstance(options, dict):
                for option in options:  # a dropdown's or radio's options: the class order
                    out.declare(str(option))
        elif regions and not keys:
            self.single = out.classes[0] if len(out.classes) == 1 else "object"
            out.notes.append(
                f"{via_file}: its {len(regions)} regions have no attribute: all read as one "
                f"class, {self.single!r}"
            )
        elif regions:
            shown = ", ".join(repr(k) for k in sorted(keys)[:6])
            out.notes.append(
                f"{via_file}: its regions' attributes ({shown}) name no class: Kestrel reads "
                "the one attribute, or one called class, label, name or type"
            )

    def of(self, region: dict) -> str:
        if self.single is not None:
            return self.single
        if self.attr is None:
            raise ValueError("no region attribute names its class")
        value = _dict(region.get("region_attributes")).get(self.attr)
        if value in (None, "", {}):
            raise ValueError(f"no {self.attr!r} attribute (its class)")
        return _attribute_class(value)


def parse_via(images, files, read, *, task, classes, names):
    """VIA 2's project (_via_img_metadata, _via_attributes) or annotation export, and VIA 1's
    (regions as an object): per image filename and regions, each a shape_attributes (rect,
    polygon, circle, ellipse, polyline in pixels) and region_attributes. The class is the one region
    attribute the file uses, or among several the one named class / label / name / type; a file
    whose regions have no attribute at all is one class (the dataset's only class, else
    "object"). In a classification dataset the file attributes give the image's class. VIA
    gives no image size: labels stay in pixels for the import."""
    out = _Collector("via", images, classes, task)
    for via_file in sorted(files):
        doc = _load(read, via_file, out.skipped, "VIA")
        if doc is None:
            continue
        project = isinstance(doc, dict) and any(str(k).startswith("_via_") for k in doc)
        metadata = doc.get("_via_img_metadata") if project else doc
        if not isinstance(metadata, dict):
            what = "a VIA project without _via_img_metadata" if project else "not a VIA file"
            out.skip(via_file, f"{what} (no object of images)", SKIP_LABEL_FILE)
            continue
        out.label_counts[via_file] = 0
        region_defs = _dict(_dict(doc.get("_via_attributes")).get("region"))
        entries = [(k, v, _via_regions(v)) for k, v in metadata.items() if isinstance(v, dict)]
        all_regions = [r for _, _, regions in entries for r in regions]
        out.notes.append(
            f"{via_file}: {len(entries)} images and {len(all_regions)} regions read as VIA"
        )
        namer = _ViaClasses(out, via_file, all_regions, region_defs)
        file_attr = None
        if out.task == Task.CLASSIFY:
            keys = _set_keys(_dict(e.get("file_attributes")) for _, e, _ in entries)
            file_attr, how = _class_attribute(keys)
            if file_attr is not None:
                out.notes.append(f"{via_file}: {how.replace('region', 'file')}")
        file_split = _file_split(via_file)
        folder = posixpath.dirname(via_file)
        folders = [f"{folder}/", ""] if folder else [""]
        for key, entry, regions in entries:
            filename = str(entry.get("filename") or entry.get("fileref") or "")
            image = out.index.find(filename, folders) if filename else None
            if image is None:
                what = f"{via_file} {filename[:200] or key[:200]}"
                out.skip(what, "its image is not in the upload", SKIP_NO_IMAGE)
                continue
            out.take(image, file_split or _folder_split(image), None)
            file_attrs = _dict(entry.get("file_attributes"))
            if file_attr is not None and file_attrs.get(file_attr) not in (None, "", {}):
                here = f"{via_file} {filename[:200]} file attributes"
                try:
                    cls = _attribute_class(file_attrs[file_attr])
                except ValueError as e:
                    out.skip(here, f"image class: {e}")
                else:
                    out.add(image, cls, _Shape("tag"), via_file, here)
            for n, region in enumerate(regions, 1):
                where = f"{via_file} {filename[:200]} region {n}"
                try:
                    cls = namer.of(region)
                    shape_attributes = region.get("shape_attributes")
                    if not isinstance(shape_attributes, dict):
                        raise ValueError("no shape_attributes")
                    shape = _via_shape(shape_attributes)
                except ValueError as e:
                    out.skip(where, f"region {e}")
                    continue
                out.add(image, cls, shape, via_file, where)
    return out.finish()


# --- CreateML -------------------------------------------------------------------------------------

_LIST_OF_OBJECTS = re.compile(r"^\s*\[\s*\{")
_LABEL_STUDIO_KEYS = re.compile(r'"(data|result|predictions|completions|annotator)"\s*:')
_CREATEML_IMAGE = re.compile(r'"image"\s*:\s*"')
_CREATEML_ANNOTATIONS = re.compile(r'"annotations"\s*:\s*\[\s*(\{|\])')


def _is_createml(head: str) -> bool:
    """A list of {"image": "...", "annotations": [{"label", "coordinates"}]}; Label Studio's
    tasks (data, annotations with result) and JSON-MIN (image with label keys, no
    annotations) are not."""
    if not _LIST_OF_OBJECTS.match(head) or _LABEL_STUDIO_KEYS.search(head):
        return False
    if not _CREATEML_IMAGE.search(head):
        return False
    m = _CREATEML_ANNOTATIONS.search(head)
    return bool(m) and ('"coordinates"' in head or m.group(1) == "]")


def claim_createml(names, read) -> list[str]:
    """Apple CreateML's object detection JSON (Roboflow names it _annotations.createml.json),
    among the JSON files not named like an image."""
    return [n for n in _json_not_per_image(names)[:MAX_PEEKED] if _is_createml(_head(read, n))]


def parse_createml(images, files, read, *, task, classes, names):
    """A list of {"image": name, "annotations": [{"label", "coordinates": {x, y, width,
    height}}]}: x, y the box's centre, all in pixels of an image whose size the file does not
    give (the import normalises them). The split: the file's name or folder, else the image's."""
    out = _Collector("createml", images, classes, task)
    for cm_file in sorted(files):
        doc = _load(read, cm_file, out.skipped, "CreateML")
        if doc is None:
            continue
        if not isinstance(doc, list):
            out.skip(cm_file, "not a CreateML file (not a list of images)", SKIP_LABEL_FILE)
            continue
        out.label_counts[cm_file] = 0
        file_split = _file_split(cm_file)
        folder = posixpath.dirname(cm_file)
        folders = [f"{folder}/", ""] if folder else [""]
        n_images = 0
        for n, entry in enumerate(doc):
            if not isinstance(entry, dict):
                out.skip(f"{cm_file} entry {n + 1}", "not an object", SKIP_LABEL)
                continue
            ref = entry.get("image") if isinstance(entry.get("image"), str) else ""
            image = out.index.find(ref, folders) if ref else None
            if image is None:
                out.skip(
                    f"{cm_file} {ref[:200] or f'entry {n + 1}'}",
                    "its image is not in the upload",
                    SKIP_NO_IMAGE,
                )
                continue
            n_images += 1
            out.take(image, file_split or _folder_split(image), None)
            anns = entry.get("annotations")
            for k, ann in enumerate(anns if isinstance(anns, list) else []):
                where = f"{cm_file} {ref[:200]} annotation {k + 1}"
                if not isinstance(ann, dict):
                    out.skip(where, "not an object")
                    continue
                coords = ann.get("coordinates")
                try:
                    if not isinstance(coords, dict):
                        raise ValueError("no coordinates")
                    x, y, w, h = (_num(coords.get(c)) for c in ("x", "y", "width", "height"))
                except ValueError as e:
                    out.skip(where, f"annotation {e}")
                    continue
                label = ann.get("label")
                cls = str(label) if isinstance(label, (str, int)) else ""
                out.add(
                    image,
                    cls,
                    _Shape("box", [x - w / 2, y - h / 2, x + w / 2, y + h / 2]),
                    cm_file,
                    where,
                )
        out.notes.append(f"{cm_file}: {n_images} images read as CreateML")
    return out.finish()
