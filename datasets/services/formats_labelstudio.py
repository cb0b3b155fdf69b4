"""Label Studio's JSON and JSON-MIN exports.

The structures are Label Studio's (docs: guide/export.md, guide/task_format.md, the tags' pages;
its converter: label_studio_sdk/converter/converter.py, utils.py, brush.py, exports/yolo.py):

- JSON ("label-studio"): a list of tasks `{id, data: {image: path}, annotations: [{result,
  was_cancelled, ...}], predictions, drafts, file_upload}`. Each result is `{type, value,
  original_width, original_height, id, parentID, from_name, to_name}`, its numbers in percent
  (0–100) of the image; a rectangle's `rotation` turns it clockwise about its top-left corner,
  in pixels (utils.py::convert_annotation_to_yolo_obb).
- JSON-MIN ("label-studio-min"): one flat record per annotation: the task's data, its id, one key
  per control tag of the labelling config (named by its `name=`) holding its results' values
  (with original_width/original_height), then annotator, annotation_id, created_at, updated_at,
  lead_time (converter.py::convert_to_json_min). A single choice or text is written as a bare
  string (utils.py::prettify_result), so shapes are told apart by their values' keys.

Image paths are Label Studio's: `/data/upload/<project>/<8 hex>-<name>` for uploads,
`/data/local-files/?d=<path>` for local storage, or a URL; they are matched to the upload's files.
"""

import json
import math
import posixpath
import re
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

import cv2
import numpy as np

from datasets.models import LabelKind, Task
from datasets.services.formats import (
    MAX_META_FILE_BYTES,
    OBB_TOLERANCE,
    SKIP_LABEL,
    SKIP_LABEL_FILE,
    SKIP_NO_IMAGE,
    LabelFileError,
    Parsed,
    ParsedImage,
    ParsedLabel,
    Reader,
    _text,
    split_from_path,
)
from datasets.services.images import looks_like_image
from datasets.services.masks import label_studio_rle_decode, mask_box, mask_to_polygons

PEEK_BYTES = 1024
# Label Studio lets a region reach past the image's edge (its SDK's test export has a box 1.6%
# past it): up to this share of the image it is cut at the edge, past it refused.
EDGE_TOLERANCE = 0.05
# The key of a value that holds its label names, by result type (the control tag, lower case).
LABEL_KEYS = (
    "rectanglelabels", "polygonlabels", "keypointlabels", "brushlabels", "ellipselabels",
    "choices", "labels", "taxonomy",
)  # fmt: skip
# The shape a result draws, by type; "labels" results take theirs from their value's keys.
SHAPES = {
    "rectanglelabels": "rectangle", "rectangle": "rectangle",
    "polygonlabels": "polygon", "polygon": "polygon",
    "keypointlabels": "keypoint", "keypoint": "keypoint",
    "brushlabels": "brush", "brush": "brush",
    "ellipselabels": "ellipse", "ellipse": "ellipse",
}  # fmt: skip
# JSON-MIN's own keys beside the task's data and the control tags' results.
MIN_META_KEYS = {"id", "annotator", "annotation_id", "created_at", "updated_at", "lead_time",
                 "agreement", "history", "was_cancelled"}  # fmt: skip
# What the first KB of an export holds somewhere; a file without any of them is not parsed.
_MARKERS = (
    b'"data"', b'"annotations"', b'"predictions"', b'"completions"', b'"annotator"',
    b'"annotation_id"', b'"original_width"', b'"points"', b'"rle"',
    *(f'"{k}"'.encode() for k in LABEL_KEYS),
)  # fmt: skip
# An uploaded file is stored as <first 8 hex of a uuid4>-<its name> (data_import/models.py).
_HASHED = re.compile(r"^[0-9a-f]{8}-(.+)$", re.IGNORECASE)
_WHAT = {"rectangle": "rectangle", "polygon": "polygon", "keypoint": "keypoint",
         "brush": "brush mask", "ellipse": "ellipse"}  # fmt: skip


# --- recognising ---------------------------------------------------------------------------------


def claim_label_studio(names: list[str], read: Reader) -> list[str]:
    """The upload's Label Studio JSON and JSON-MIN files."""
    return [n for n in sorted(names) if n.lower().endswith(".json") and _peek(n, read)]


def _peek(name: str, read: Reader) -> str | None:
    """Which Label Studio export a file is ("json" or "min"), or None: from its first KB and
    its first task or record only (a COCO or LabelMe file is turned down unparsed)."""
    try:
        data = read(name, MAX_META_FILE_BYTES)
    except (KeyError, LabelFileError):
        return None
    head = data[:PEEK_BYTES].lstrip(b"\xef\xbb\xbf \t\r\n")
    if not any(m in head for m in _MARKERS):
        return None
    if head.startswith(b"{"):
        # One task a file, as Label Studio's target storages write them.
        if b'"result"' not in head or not (b'"annotations"' in head or b'"predictions"' in head):
            return None
        single = True
    elif head.startswith(b"["):
        single = False
    else:
        return None
    try:
        text = data.decode("utf-8-sig")
        start = text.index("{")
        if not single and text[text.index("[") + 1 : start].strip():
            return None
        first, _ = json.JSONDecoder().raw_decode(text, start)
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(first, dict):
        return None
    if _is_task(first):
        return "json"
    if single or not _image_key([first]):
        return None
    # Every record has the converter's annotator and annotation_id; every image result's value
    # has the image's original_width (converter.py::annotation_result_from_task).
    if ("annotator" in first and "annotation_id" in first) or any(
        _min_type(item) and "original_width" in item
        for value in first.values()
        for item in _as_list(value)
    ):
        return "min"
    return None


def _is_task(item: dict) -> bool:
    return isinstance(item.get("data"), dict) and any(
        isinstance(item.get(k), list) for k in ("annotations", "predictions", "completions")
    )


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _min_type(item) -> str | None:
    """The result type of one JSON-MIN value, from its keys (its type was dropped)."""
    if not isinstance(item, dict):
        return None
    for key in LABEL_KEYS:
        if key in item:
            return key
    if "text" in item and ("original_width" in item or "x" in item):
        return "textarea"
    return _shape_of(item)


def _looks_like_image_ref(value) -> bool:
    if not isinstance(value, str) or not value or len(value) > 4096:
        return False
    if value.startswith("/data/") or "?d=" in value:
        return True
    try:
        path = urlsplit(value).path if "://" in value[:20] else value
    except ValueError:  # an unreadable URL ("http://[")
        return False
    return looks_like_image(unquote(path))


def _image_key(records: list[dict]) -> str | None:
    """The data key holding the image (the labelling config's `$image`): `image` where it
    holds a path, else the key most records hold an image path in."""
    counts: Counter = Counter()
    for record in records:
        for key, value in record.items():
            if key not in MIN_META_KEYS and _looks_like_image_ref(value):
                counts[key] += 1
    if not counts:
        return None
    if "image" in counts:
        return "image"
    return max(counts, key=lambda k: (counts[k], "im" in k.lower()))


# --- reading -------------------------------------------------------------------------------------


@dataclass(slots=True)  # one per result: 100,000 in a large export
class _Result:
    """One result as the converter reads it, from a JSON annotation or a JSON-MIN record."""

    type: str
    value: dict
    where: str
    size: tuple[int, int] | None = None
    id: str | None = None
    parent: str | None = None
    from_name: str = ""
    image_rotation: float = 0.0


@dataclass
class _Pose:
    """One object of a pose dataset: a rectangle and the keypoints found in it, by name."""

    image: str
    file: str
    where: str  # its rectangle's place, or its first keypoint's
    cls: str
    box: list[float]
    corners: tuple[float, float, float, float]
    id: str | None = None
    points: dict[str, tuple[float, float]] = field(default_factory=dict)
    # Keypoints Label Studio marks hidden (its COCO import reads `hidden` as not visible).
    hidden: set[str] = field(default_factory=set)


def _size(result: dict) -> tuple[int, int] | None:
    w, h = result.get("original_width"), result.get("original_height")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (w, h)):
        return None
    if not (math.isfinite(w) and math.isfinite(h) and w > 0 and h > 0):
        return None
    return (int(w), int(h)) if int(w) == w and int(h) == h else None


def _ident(value) -> str | None:
    """A result's id, parentID, or a relation's end, as a key (None if it is not one)."""
    ok = isinstance(value, str | int) and not isinstance(value, bool)
    return str(value) if ok and str(value) else None


def _number(value: dict, key: str, default: float | None = None) -> float:
    v = value.get(key, default)
    kind = type(v)  # exact types: bool is an int, and is no coordinate
    if kind is float and v - v == 0.0 or kind is int:  # v - v is NaN for NaN and infinities
        return float(v)
    raise ValueError(f"its {key} is not a number")


def _coordinate(v) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError("a point whose coordinates are not numbers")
    return float(v)


def _in_image(norm: list[float], tolerance: float = EDGE_TOLERANCE) -> bool:
    return min(norm) >= -tolerance and max(norm) <= 1 + tolerance


def _clipped(norm: list[float]) -> list[float]:
    return [min(1.0, max(0.0, v)) for v in norm]


def _box_of(xy: list[float]) -> list[float]:
    xs, ys = xy[0::2], xy[1::2]
    x1, x2, y1, y2 = min(xs), max(xs), min(ys), max(ys)
    return [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]


def _min_area_corners(xy_px: list[float]) -> list[float]:
    pts = np.array(xy_px, dtype=np.float32).reshape(-1, 2)
    return [float(v) for v in cv2.boxPoints(cv2.minAreaRect(pts)).reshape(-1)]


def _label_names(value: dict, key: str) -> list[str]:
    names = value.get(key)
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list):
        return []
    return [str(n).strip() for n in names if str(n).strip()]


class _Reader:
    """The tasks of one upload turned into Kestrel labels for the dataset's task."""

    def __init__(self, images: list[str], task: str, classes: list[str]):
        self.task = task or Task.DETECT
        self.classes = list(classes)
        self.images = images
        self.by_base: dict[str, list[str]] = {}
        self.by_stem: dict[str, list[str]] = {}
        for image in images:
            base = posixpath.basename(image).lower()
            self.by_base.setdefault(base, []).append(image)
            self.by_stem.setdefault(posixpath.splitext(base)[0], []).append(image)
        self.parsed = {p: ParsedImage(p, split_from_path(p)) for p in images}
        self.owner: dict[str, str] = {}  # image → the task whose labels it has
        # (file, image, class name, kind, data): classes are numbered once all are known
        self.found: list[tuple[str, str, str, str, list[float]]] = []
        self.poses: list[_Pose] = []
        self.kpt_order: list[str] = []
        self.skipped: list[tuple[str, str, str]] = []
        self.said: Counter = Counter()  # what the notes count
        self.matched: Counter = Counter()  # how tasks' image paths were matched, by rule

    # images

    def find(self, ref: str, file_upload) -> tuple[str | None, str]:
        """The uploaded image a task's path names, or None and why. A path's end names it
        where the path is one (local files); else its file name does, with or without the
        prefix Label Studio gives uploads; among files of one name, the one in the path's
        folders."""
        ref = ref.strip().replace("\\", "/")
        try:
            # Label Studio's own uploads are the common case: no URL to take apart.
            parts = None if ref.startswith("/data/upload/") else urlsplit(ref)
        except ValueError:
            return None, "is not a path or URL Kestrel can read"
        if parts is not None and "?d=" in ref:
            kind, path = "local-files paths (?d=)", (parse_qs(parts.query).get("d") or [""])[0]
        elif ref.startswith("/data/upload/"):
            kind, path = "upload paths (/data/upload/)", unquote(ref[len("/data/upload/") :])
        elif parts is not None and parts.scheme and parts.netloc:
            kind, path = "URLs", unquote(parts.path)
        else:
            kind, path = "paths", unquote(ref)
        path = posixpath.normpath("/" + path.replace("\\", "/")).lstrip("/")
        base = posixpath.basename(path)
        if kind in ("paths", "local-files paths (?d=)"):
            low = path.lower()
            same = self.by_base.get(base.lower(), [])
            ends = [i for i in same if i.lower() == low or i.lower().endswith("/" + low)]
            if len(ends) == 1:
                self.matched[f"{kind} by the end of their path"] += 1
                return ends[0], ""
            if len(ends) > 1:
                return None, self._ambiguous(ends)
        tries = [(base, f"{kind} by file name")]
        if isinstance(file_upload, str) and file_upload:
            name = posixpath.basename(file_upload.replace("\\", "/"))
            tries.append((name, "tasks by their file_upload name"))
        for name, rule in list(tries):
            if m := _HASHED.match(name):
                tries.append((m.group(1), f"{rule} without Label Studio's 8-character prefix"))
        for name, rule in tries:
            same = self.by_base.get(name.lower(), [])
            if len(same) > 1:
                best = self._nearest(same, path)
                if best is None:
                    return None, self._ambiguous(same)
                self.said["same_name"] += 1
                same = [best]
            if same:
                self.matched[rule] += 1
                return same[0], ""
        if "." not in base:  # Label Studio's own examples name images without a suffix
            stems = self.by_stem.get(base.lower(), [])
            if len(stems) == 1:
                self.matched[f"{kind} without a suffix by file name less its suffix"] += 1
                return stems[0], ""
        return None, "is not in the upload"

    @staticmethod
    def _nearest(same: list[str], path: str) -> str | None:
        """Of files named alike, the one whose folders end like the path's; None on a tie."""
        want = path.lower().split("/")[:-1][::-1]

        def score(image: str) -> int:
            have = image.lower().split("/")[:-1][::-1]
            n = 0
            while n < min(len(want), len(have)) and want[n] == have[n]:
                n += 1
            return n

        scores = sorted(((score(i), i) for i in same), reverse=True)
        if scores[0][0] == 0 or scores[0][0] == scores[1][0]:
            return None
        return scores[0][1]

    @staticmethod
    def _ambiguous(same: list[str]) -> str:
        shown = ", ".join(sorted(same)[:3])
        return (
            f"matches {len(same)} uploaded files ({shown}) and its path does not tell which: "
            "not guessed"
        )

    # tasks

    def read_task(
        self, file: str, which: str, ref, file_upload, results: list[_Result], data_keys=()
    ) -> None:
        """One task (or JSON-MIN record), `which` naming it ("task 12"), and its results."""
        place = f"{file} {which}"
        if not isinstance(ref, str) or not ref.strip():
            keys = ", ".join(sorted(str(k) for k in (data_keys or []))[:6]) or "none"
            self.skipped.append((place, f"no image path in its data (keys: {keys})", SKIP_NO_IMAGE))
            return
        image, why = self.find(ref, file_upload)
        if image is None:
            self.skipped.append((place, f"its image {ref.strip()[:200]} {why}", SKIP_NO_IMAGE))
            return
        if image in self.owner:
            if not results:
                return
            self.skipped.append(
                (
                    place,
                    f"its image {image} is also {self.owner[image]}'s: only that task's labels "
                    "are read",
                    SKIP_LABEL,
                )
            )
            return
        self.owner[image] = which
        sizes = [r.size for r in results if r.size]
        size = sizes[0] if sizes else None
        if size is not None:
            self.parsed[image].declared_size = size
        elif any(r.type in SHAPES or r.type == "labels" for r in results):
            self.said["no_size"] += 1
        # A <Rectangle> (or <Polygon>...) beside a <Labels> tag: two results of one id, the
        # "labels" one carrying the shape too (as exports/yolo.py reads them).
        by_id = {r.id: r for r in results if r.type == "labels" and r.id}
        bare = {r.id for r in results if r.type in SHAPES and r.type == SHAPES[r.type] and r.id}
        rects: list[_Pose] = []
        points: list[tuple[_Result, str, float, float]] = []
        choices: list[tuple[_Result, list[str]]] = []
        relations: list[_Result] = []
        for r in results:
            try:
                if r.image_rotation:
                    raise ValueError(
                        f"drawn on the image turned {r.image_rotation:g}° in Label Studio: "
                        "not imported"
                    )
                if r.size and size and r.size != size:
                    raise ValueError(
                        f"drawn on a {r.size[0]}×{r.size[1]} image, and this task's other "
                        f"results on {size[0]}×{size[1]}"
                    )
                if r.type == "relation":
                    relations.append(r)
                    continue
                if r.type == "choices":
                    choices.append((r, self._choices(r)))
                    continue
                shape, names = self._shape(r, bare, by_id)
                if shape is None:
                    continue  # the same region as a "labels" result read on its own
                self._region(file, image, r, shape, names, r.size or size, rects, points)
            except ValueError as e:
                self.skipped.append((r.where, str(e), SKIP_LABEL))
        if self.task == Task.POSE:
            used = self._group(file, image, rects, points, relations)
            relations = [r for r in relations if id(r) not in used]
        for r in relations:
            self.skipped.append((r.where, "relations between regions are not imported", SKIP_LABEL))
        self._image_class(file, image, choices)

    def _shape(self, r: _Result, bare, by_id) -> tuple[str | None, list[str]]:
        """The shape a result draws and its label names; ValueError if it is no shape."""
        if r.type in SHAPES:
            shape = SHAPES[r.type]
            if r.type != shape:
                names = _label_names(r.value, r.type)
            elif r.id in by_id:
                other = by_id[r.id]
                if _shape_of(other.value):
                    return None, []
                names = _label_names(other.value, "labels")
            else:
                names = []
            if not names:
                raise ValueError(f"a {_WHAT[shape]} without a label")
            return shape, names
        if r.type == "labels":
            shape = _shape_of(r.value)
            if shape is None:
                if r.id in bare:
                    return None, []
                raise ValueError("text spans (labels) are not imported: Kestrel labels images")
            names = _label_names(r.value, "labels")
            if not names:
                raise ValueError(f"a {_WHAT[shape]} without a label")
            return shape, names
        if r.type == "textarea":
            raise ValueError("text (textarea) is not imported: Kestrel has no text labels")
        if r.type.startswith("video") or r.type in ("timelinelabels", "timeserieslabels"):
            raise ValueError(f"{r.type} results are not imported: Kestrel labels images")
        raise ValueError(f"{r.type} results are not imported: not a shape Kestrel has")

    def _choices(self, r: _Result) -> list[str]:
        if _shape_of(r.value):
            raise ValueError("a choice made for a region (an attribute of it): not imported")
        names = list(dict.fromkeys(_label_names(r.value, "choices")))
        if not names:
            raise ValueError("choices without a choice")
        if self.task != Task.CLASSIFY:
            raise ValueError(
                f"an image class ({', '.join(names)[:60]}): image classes are imported into a "
                f"classify dataset (this one is {self.task})"
            )
        return names

    def _image_class(self, file: str, image: str, choices) -> None:
        names = list(dict.fromkeys(n for _, ns in choices for n in ns))
        if len(names) == 1:
            self.found.append((file, image, names[0], LabelKind.TAG, []))
        elif len(names) > 1:
            for r, _ in choices:
                self.skipped.append(
                    (
                        r.where,
                        f"several image classes ({', '.join(names)[:80]}): an image of a "
                        "classify dataset has one",
                        SKIP_LABEL,
                    )
                )

    def _region(self, file, image, r: _Result, shape, names, size, rects, points) -> None:
        what = _WHAT[shape]
        task = self.task
        if task == Task.CLASSIFY:
            raise ValueError(f"a {what}: a classify dataset takes image classes (choices) only")
        if shape == "ellipse":
            raise ValueError("ellipses are not imported: Kestrel has no ellipse labels")
        if shape == "keypoint":
            if task != Task.POSE:
                raise ValueError(
                    f"a keypoint ({names[0][:40]}): keypoints are imported into a pose dataset "
                    f"(this one is {task})"
                )
            x, y = _number(r.value, "x") / 100, _number(r.value, "y") / 100
            if not _in_image([x, y]):
                raise ValueError(f"keypoint {names[0][:40]!r} outside the image")
            x, y = self._clip([x, y])
            points.append((r, names[0], x, y))
            return
        if task == Task.POSE and shape != "rectangle":
            raise ValueError(f"a {what}: a pose dataset takes rectangles and keypoints")
        if shape == "rectangle":
            corners, rotated = self._rectangle(r.value, size)
            if task == Task.OBB:
                kept = [(LabelKind.OBB, corners)]
            else:
                norm = self._clip(corners)
                box = _box_of(norm)
                if box[2] <= 0 or box[3] <= 0:
                    raise ValueError("a rectangle with no area inside the image")
                if rotated:
                    self.said[f"rotated_{task}"] += 1
                if task == Task.POSE:
                    xs, ys = norm[0::2], norm[1::2]
                    around = (min(xs), min(ys), max(xs), max(ys))
                    rects += [_Pose(image, file, r.where, n, box, around, r.id) for n in names]
                    return
                if task == Task.SEGMENT and rotated:
                    kept = [(LabelKind.POLYGON, norm)]
                else:
                    kept = [(LabelKind.BOX, box)]
        elif shape == "polygon":
            kept = [self._polygon(r.value, size)]
        else:
            kept = self._brush(r.value, size)
        for name in names:
            for kind, data in kept:
                self.found.append((file, image, name, kind, data))

    def _clip(self, norm: list[float]) -> list[float]:
        if min(norm) >= 0.0 and max(norm) <= 1.0:
            return norm  # the common case, inside the image
        kept = _clipped(norm)
        if any(abs(a - b) > 1e-9 for a, b in zip(norm, kept, strict=True)):
            self.said["clipped"] += 1
        return kept

    def _rectangle(self, value: dict, size) -> tuple[list[float], bool]:
        """The four corners, normalised (top-left, top-right, bottom-right, bottom-left), and
        whether the rectangle is turned (by other than a multiple of 90°)."""
        x, y = _number(value, "x"), _number(value, "y")
        w, h = _number(value, "width"), _number(value, "height")
        rotation = _number(value, "rotation", 0.0) % 360
        if w <= 0 or h <= 0:
            raise ValueError("a rectangle with no width or height")
        if rotation == 0:
            x1, y1, x2, y2 = x / 100, y / 100, (x + w) / 100, (y + h) / 100
            corners = [x1, y1, x2, y1, x2, y2, x1, y2]
        else:
            if size is None:
                raise ValueError(
                    "a rotated rectangle without original_width/original_height: its rotation "
                    "is in pixels of the image"
                )
            iw, ih = size
            px, py, pw, ph = x / 100 * iw, y / 100 * ih, w / 100 * iw, h / 100 * ih
            a = math.radians(rotation)
            cos, sin = math.cos(a), math.sin(a)
            turned = [
                (px, py),
                (px + pw * cos, py + pw * sin),
                (px + pw * cos - ph * sin, py + pw * sin + ph * cos),
                (px - ph * sin, py + ph * cos),
            ]
            corners = [v for cx, cy in turned for v in (cx / iw, cy / ih)]
        tolerance = OBB_TOLERANCE if self.task == Task.OBB else EDGE_TOLERANCE
        if not _in_image(corners, tolerance):
            raise ValueError("a rectangle outside the image")
        return corners, rotation % 90 != 0

    def _polygon(self, value: dict, size) -> tuple[str, list[float]]:
        pts = value.get("points")
        if not isinstance(pts, list) or not all(isinstance(p, list) and len(p) == 2 for p in pts):
            raise ValueError("a polygon whose points are not [x, y] pairs")
        if len(pts) < 3:
            raise ValueError("a polygon needs 3 points or more")
        norm = [_coordinate(v) / 100 for p in pts for v in p]
        if not _in_image(norm):
            raise ValueError("a polygon outside the image")
        norm = self._clip(norm)
        box = _box_of(norm)
        if box[2] <= 0 or box[3] <= 0:
            raise ValueError("a polygon with no area")
        if self.task == Task.SEGMENT:
            return LabelKind.POLYGON, norm
        if self.task == Task.OBB:
            self.said["polygon_obb"] += 1
            return LabelKind.OBB, _obb_around(norm, size)
        return LabelKind.BOX, box

    def _brush(self, value: dict, size) -> list[tuple[str, list[float]]]:
        if size is None:
            raise ValueError(
                "a brush mask without original_width/original_height: it cannot be decoded"
            )
        if value.get("format", "rle") != "rle":
            raise ValueError(f"a brush mask in format {str(value.get('format'))[:20]!r}, not rle")
        mask = label_studio_rle_decode(value.get("rle"), *size)
        w, h = size
        found = mask_box(mask)
        if found is None:
            raise ValueError("an empty brush mask")
        self.said["masks"] += 1
        if self.task == Task.DETECT:
            x1, y1, x2, y2 = found
            return [(LabelKind.BOX, _box_of([x1 / w, y1 / h, x2 / w, y2 / h]))]
        polygons = mask_to_polygons(mask)
        if not polygons:
            raise ValueError("a brush mask with no region of 4 pixels or more")
        if self.task == Task.OBB:
            corners = _min_area_corners(polygons[0])
            return [(LabelKind.OBB, [v / (w if i % 2 == 0 else h) for i, v in enumerate(corners)])]
        self.said["mask_regions"] += len(polygons)
        return [
            (LabelKind.POLYGON, _clipped([v / (w if i % 2 == 0 else h) for i, v in enumerate(p)]))
            for p in polygons
        ]

    # pose

    def _group(self, file, image, rects: list[_Pose], points, relations) -> set[int]:
        """Keypoints into the rectangle their parentID names (Label Studio's own link, as
        exports/yolo.py reads it), else one a relation links, else the smallest that holds
        them. Without any rectangle, an image's keypoints are one object, boxed around them
        (as Label Studio's COCO export boxes them), where no keypoint name repeats."""
        by_id = {p.id: p for p in rects if p.id}
        linked: dict[str, _Pose] = {}
        used: set[int] = set()
        for rel in relations:
            a, b = rel.value.get("from_id"), rel.value.get("to_id")
            for point_id, rect_id in ((a, b), (b, a)):
                if rect_id in by_id and point_id not in by_id and point_id:
                    linked[point_id] = by_id[rect_id]
                    used.add(id(rel))
        loose: list[tuple[_Result, str, float, float]] = []
        for r, name, x, y in points:
            owner = by_id.get(r.parent) or linked.get(r.id)
            if owner is None:
                holding = [
                    p for p in rects
                    if p.corners[0] <= x <= p.corners[2] and p.corners[1] <= y <= p.corners[3]
                ]  # fmt: skip
                owner = min(holding, key=lambda p: p.box[2] * p.box[3]) if holding else None
                if owner is not None:
                    self.said["kp_contained"] += 1
            if owner is None:
                if rects:
                    self.skipped.append(
                        (r.where, f"keypoint {name[:40]!r} lies in no rectangle", SKIP_LABEL)
                    )
                else:
                    loose.append((r, name, x, y))
                continue
            if name in owner.points:
                self.skipped.append(
                    (r.where, f"a second {name[:40]!r} keypoint in one rectangle", SKIP_LABEL)
                )
                continue
            owner.points[name] = (x, y)
            if r.value.get("hidden"):
                owner.hidden.add(name)
            self._keypoint_name(name)
        self.poses += rects
        groups: dict[str, list] = {}
        for item in loose:
            groups.setdefault(item[0].from_name or "object", []).append(item)
        for cls, group in groups.items():
            names = [name for _, name, _, _ in group]
            xy = [v for _, _, x, y in group for v in (x, y)]
            box = _box_of(xy)
            if len(set(names)) != len(names) or box[2] <= 0 or box[3] <= 0:
                why = (
                    "keypoints of several objects and no rectangle to group them: draw a "
                    "rectangle around each object"
                    if len(set(names)) != len(names)
                    else "keypoints with no area around them and no rectangle to box them"
                )
                self.skipped += [(r.where, why, SKIP_LABEL) for r, _, _, _ in group]
                continue
            pose = _Pose(image, file, group[0][0].where, cls, box, (0, 0, 0, 0))
            pose.points = {name: (x, y) for _, name, x, y in group}
            pose.hidden = {name for r, name, _, _ in group if r.value.get("hidden")}
            for name in names:
                self._keypoint_name(name)
            self.poses.append(pose)
            self.said["kp_boxed"] += 1
        return used

    def _keypoint_name(self, name: str) -> None:
        if name not in self.kpt_order:
            self.kpt_order.append(name)

    def finish(self) -> tuple[list[str], dict[str, int], list[int] | None]:
        """Class names, labels per file, and the keypoint shape, once every task is read."""
        names = list(self.classes)
        new = {c for _, _, c, _, _ in self.found} | {p.cls for p in self.poses}
        names += sorted(new - set(names))
        index = {n: i for i, n in enumerate(names)}
        counts: Counter = Counter()
        for file, image, cls, kind, data in self.found:
            self.parsed[image].labels.append(ParsedLabel(index[cls], kind, data))
            counts[file] += 1
        self.kpt_order = keypoint_order(self.kpt_order)
        kpt_shape = [len(self.kpt_order), 3] if self.kpt_order else None
        for pose in self.poses:
            if not self.kpt_order:
                self.skipped.append(
                    (pose.where, "a rectangle with no keypoints: a pose dataset's labels are "
                     "keypoints", SKIP_LABEL)
                )  # fmt: skip
                continue
            kpts = []
            for name in self.kpt_order:
                x, y = pose.points.get(name, (0.0, 0.0))
                seen = 0.0 if name not in pose.points else 1.0 if name in pose.hidden else 2.0
                kpts += [x, y, seen]
            label = ParsedLabel(index[pose.cls], LabelKind.KEYPOINTS, _clipped(pose.box) + kpts)
            self.parsed[pose.image].labels.append(label)
            counts[pose.file] += 1
        return names, dict(counts), kpt_shape


def _numbered(names: list[str]) -> list[int] | None:
    """The number each name ends in (kp0, kp-12, 3), when every name has a distinct one."""
    numbers = [re.search(r"(\d+)$", n) for n in names]
    if not all(numbers):
        return None
    values = [int(m.group(1)) for m in numbers]
    return values if len(set(values)) == len(values) else None


def keypoint_order(names: list[str]) -> list[str]:
    """Keypoint labels in the order of the numbers they end in (Kestrel's export names them
    kp0..kpN; an object missing kp3 must not move kp4 up), else as they first appear."""
    numbers = _numbered(names)
    if numbers is None:
        return names
    return [n for _, n in sorted(zip(numbers, names, strict=True))]


def _order_rule(names: list[str]) -> str:
    if _numbered(names) is not None:
        return "by the number each keypoint label ends in"
    return "by first appearance of each keypoint label"


def _shape_of(value: dict) -> str | None:
    """The shape a value's keys draw (a "labels" result's, or a per-region choice's)."""
    if "rle" in value:
        return "brush"
    if "points" in value:
        return "polygon"
    if "radiusX" in value:
        return "ellipse"
    if {"x", "y", "width", "height"} <= value.keys():
        return "rectangle"
    if {"x", "y"} <= value.keys():
        return "keypoint"
    return None


def _obb_around(norm: list[float], size) -> list[float]:
    """The smallest rotated rectangle around a polygon (in pixels, where the size is known:
    a rectangle in normalised units is not one on a non-square image)."""
    if size is None:
        xs, ys = norm[0::2], norm[1::2]
        x1, x2, y1, y2 = min(xs), max(xs), min(ys), max(ys)
        return [x1, y1, x2, y1, x2, y2, x1, y2]
    w, h = size
    px = [v * (w if i % 2 == 0 else h) for i, v in enumerate(norm)]
    return [v / (w if i % 2 == 0 else h) for i, v in enumerate(_min_area_corners(px))]


# --- the two layouts -----------------------------------------------------------------------------


def _json_tasks(reader: _Reader, file: str, tasks: list, said: Counter) -> None:
    for n, item in enumerate(tasks, 1):
        if not isinstance(item, dict) or not _is_task(item):
            reader.skipped.append(
                (f"{file} task #{n}", "not a Label Studio task (no data and annotations)",
                 SKIP_LABEL)
            )  # fmt: skip
            continue
        which = f"task {_ident(item.get('id')) or f'#{n}'}"
        place = f"{file} {which}"
        said["tasks"] += 1
        said["predictions"] += len(_list(item.get("predictions")))
        said["drafts"] += len(_list(item.get("drafts")))
        annotations = [a for a in _list(item.get("annotations") or item.get("completions"))
                       if isinstance(a, dict)]  # fmt: skip
        done = [a for a in annotations if not (a.get("was_cancelled") or a.get("skipped"))]
        said["cancelled"] += len(annotations) - len(done)
        if len(done) > 1:
            said["several"] += 1
        results = []
        for m, r in enumerate(_list(done[0].get("result")) if done else [], 1):
            if not isinstance(r, dict):
                continue
            rid = _ident(r.get("id"))
            value = r.get("value") if isinstance(r.get("value"), dict) else {}
            if r.get("type") == "relation":
                value = {"from_id": _ident(r.get("from_id")), "to_id": _ident(r.get("to_id"))}
            results.append(
                _Result(
                    type=str(r.get("type") or "?").lower(),
                    value=value,
                    where=f"{place} result {rid or m}",
                    size=_size(r),
                    id=_ident(rid),
                    parent=_ident(r.get("parentID")),
                    from_name=str(r.get("from_name") or ""),
                    image_rotation=_rotation(r),
                )
            )
        data = item["data"]
        reader.read_task(file, which, _task_image(data), item.get("file_upload"), results, data)


def _task_image(data: dict):
    """The image path of a task's data: the key holding one, else `image` (Label Studio's own
    examples write paths without a suffix, "/image1")."""
    key = _image_key([data]) or "image"
    return data.get(key)


def _rotation(r: dict) -> float:
    v = r.get("image_rotation") or 0
    return float(v) % 360 if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _min_records(reader: _Reader, file: str, records: list, said: Counter, notes) -> None:
    rows = [r for r in records if isinstance(r, dict)]
    image_key = _image_key(rows)
    if image_key is None:
        reader.skipped.append((file, "taken for Label Studio JSON-MIN, but no key of its "
                               "records holds an image path", SKIP_LABEL_FILE))  # fmt: skip
        return
    texts = sorted(
        {
            k
            for r in rows
            for k, v in r.items()
            if isinstance(v, str) and k not in MIN_META_KEYS and not _looks_like_image_ref(v)
        }
    )
    has_choices = any(_min_type(v) == "choices" for r in rows for v in r.values())
    choice_key = None
    if texts and reader.task == Task.CLASSIFY and not has_choices and len(texts) == 1:
        choice_key = texts[0]
        notes.append(
            f"{file}: image classes read from its text field {choice_key!r} (JSON-MIN writes a "
            "single choice as plain text)"
        )
    elif texts:
        notes.append(
            f"{file}: text fields {', '.join(texts)[:120]} not read (JSON-MIN writes a single "
            "choice or text as plain text: Kestrel reads one as the image class only in a "
            "classify dataset, and only where it is the one text field)"
        )
    unread: set[str] = set()
    seen: set = set()
    for n, record in enumerate(records, 1):
        if not isinstance(record, dict):
            reader.skipped.append((f"{file} record {n}", "not a JSON-MIN record", SKIP_LABEL))
            continue
        tid = _ident(record.get("id"))
        which = f"task {tid}" if tid is not None else f"record {n}"
        place = f"{file} {which}"
        if tid is not None and tid in seen:
            said["several"] += 1  # one record per annotation: the first (the newest) is read
            continue
        seen.add(tid)
        said["tasks"] += 1
        results = []
        for key, value in record.items():
            if key in MIN_META_KEYS or key == image_key:
                continue
            if isinstance(value, str):
                if key == choice_key:
                    results.append(_Result("choices", {"choices": [value]}, f"{place} {key}"))
                continue
            items = _as_list(value)
            for m, item in enumerate(items, 1):
                kind = _min_type(item)
                if kind is None:
                    if isinstance(item, dict) and "original_width" in item:
                        kind = "unknown"
                    else:
                        unread.add(key)
                        continue
                results.append(
                    _Result(
                        type=kind,
                        value=item,
                        where=f"{place} {key}" + (f" {m}" if len(items) > 1 else ""),
                        size=_size(item),
                        id=_ident(item.get("id")),
                        parent=_ident(item.get("parentID")),
                        from_name=key,
                        image_rotation=_rotation(item),
                    )
                )
        reader.read_task(file, which, record.get(image_key), None, results)
    if unread:
        notes.append(
            f"{file}: fields {', '.join(sorted(unread))[:120]} not read: they hold no Label "
            "Studio result"
        )


def parse_label_studio(images, files, read: Reader, *, task, classes, names) -> Parsed:
    reader = _Reader(images, task, classes)
    said: Counter = Counter()
    notes: list[str] = []
    kinds: Counter = Counter()
    read_files: list[str] = []
    for name in files:
        try:
            doc = json.loads(_text(read, name, MAX_META_FILE_BYTES))
        except (LabelFileError, ValueError) as e:
            reader.skipped.append((name, f"unreadable JSON ({e})", SKIP_LABEL_FILE))
            continue
        tasks = doc if isinstance(doc, list) else [doc]
        first = next((t for t in tasks if isinstance(t, dict)), {})
        read_files.append(name)
        if _is_task(first):
            kinds["label-studio"] += 1
            _json_tasks(reader, name, tasks, said)
        else:
            kinds["label-studio-min"] += 1
            _min_records(reader, name, tasks, said, notes)
    class_names, counts, kpt_shape = reader.finish()
    label_counts = {name: counts.get(name, 0) for name in read_files}
    fmt = "label-studio" if kinds["label-studio"] else "label-studio-min"
    unnamed = [i for i in images if i not in reader.owner]
    lead = (
        f"{said['tasks']} Label Studio tasks read from {', '.join(read_files)[:200]}"
        if fmt == "label-studio"
        else f"{said['tasks']} Label Studio JSON-MIN records read from "
        f"{', '.join(read_files)[:200]}"
    )
    return Parsed(
        format=fmt,
        class_names=class_names,
        images=reader.parsed,
        skipped=reader.skipped,
        task=Task.POSE if kpt_shape else None,
        keypoint_shape=kpt_shape,
        notes=[lead, *notes, *_notes(reader, said, fmt, unnamed)],
        label_counts=label_counts,
    )


def _notes(reader: _Reader, said: Counter, fmt: str, unnamed: list[str]) -> list[str]:
    out = []
    if reader.matched:
        rules = "; ".join(f"{n} {rule}" for rule, n in reader.matched.most_common())
        out.append(f"tasks' images matched to the upload's files: {rules}")
    if reader.said["same_name"]:
        out.append(
            f"{reader.said['same_name']} images chosen among uploaded files of the same name by "
            "the folders of their Label Studio path"
        )
    if said["several"]:
        which = (
            "the first not cancelled annotation of each was read"
            if fmt == "label-studio"
            else "the first record of each (Label Studio writes the newest first) was read"
        )
        out.append(f"{said['several']} tasks had several annotations: {which}")
    if said["cancelled"]:
        out.append(f"{said['cancelled']} cancelled (skipped) annotations left out")
    if said["predictions"] or said["drafts"]:
        out.append(
            f"{said['predictions']} predictions and {said['drafts']} drafts left out: a model's "
            "suggestions and unsubmitted work are not labels"
        )
    if reader.said["clipped"]:
        out.append(
            f"{reader.said['clipped']} regions reaching past the image's edge cut at the edge"
        )
    if reader.said["no_size"]:
        out.append(
            f"{reader.said['no_size']} tasks have results without original_width/"
            "original_height: their percent coordinates were imported without checking the "
            "image's size"
        )
    for task, how in (
        ("detect", "the box around each"),
        ("segment", "polygons of their 4 corners"),
        ("pose", "the box around each"),
    ):
        if n := reader.said[f"rotated_{task}"]:
            out.append(
                f"{n} rotated rectangles imported as {how} (a {task} dataset has no rotated boxes)"
            )
    if reader.said["polygon_obb"]:
        out.append(
            f"{reader.said['polygon_obb']} polygons imported as the smallest rotated box around "
            "each"
        )
    if reader.said["masks"]:
        how = {
            Task.DETECT: "the box around each",
            Task.SEGMENT: f"{reader.said['mask_regions']} polygons (one per region)",
            Task.OBB: "the smallest rotated box around each one's largest region",
        }.get(reader.task, "labels")
        out.append(f"{reader.said['masks']} brush masks decoded and imported as {how}")
    if reader.kpt_order:
        out.append(
            f"keypoint order ({_order_rule(reader.kpt_order)}): {', '.join(reader.kpt_order)[:300]}"
        )
    if reader.said["kp_contained"]:
        out.append(
            f"{reader.said['kp_contained']} keypoints without a parentID put in the smallest "
            "rectangle that holds them"
        )
    if reader.said["kp_boxed"]:
        out.append(
            f"{reader.said['kp_boxed']} objects of keypoints without a rectangle: boxed around "
            "their keypoints, named after their keypoint tag"
        )
    if unnamed:
        out.append(f"{len(unnamed)} images no task names imported without labels")
    return out
