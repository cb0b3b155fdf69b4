"""What several of the tool formats share: the uploaded images looked up by file name, the split
a folder or file names, peeks at and loads of JSON files, and the geometry of labels (a box
turned by an angle, the smallest rotated box around points, pixels to 0..1, the image's edge).

formats.py's helpers of this kind are imported from there, not copied: `_poly_to_box` (the box
around points), `_clip` (to the image), `_stem`, `split_from_path`.
"""

import json
import math
import posixpath
import re

import cv2
import numpy as np

from datasets.models import LabelKind, Task
from datasets.services.formats import (
    MAX_META_FILE_BYTES,
    SKIP_LABEL_FILE,
    SPLIT_NAMES,
    LabelFileError,
    ParsedLabel,
    Reader,
    _text,
)
from datasets.services.images import looks_like_image

# How much of a JSON file a claim looks at.
HEAD_BYTES = 8192
# Formats that keep a whole dataset (or split) in one JSON file: a claim peeks at this many of
# the candidate files at most, the shallowest first.
MAX_PEEKED = 256
# Points of the polygon that stands for a circle or an ellipse.
ELLIPSE_POINTS = 32


# --- the uploaded images, by name -----------------------------------------------------------------


class ImageNames:
    """The uploaded images by file name and by file name less its suffix (lower case): where an
    annotation's path for its image is not the upload's, its file name finds it."""

    def __init__(self, images: list[str]):
        self.by_base: dict[str, list[str]] = {}
        self.by_stem: dict[str, list[str]] = {}
        for image in images:
            base = posixpath.basename(image).lower()
            self.by_base.setdefault(base, []).append(image)
            self.by_stem.setdefault(posixpath.splitext(base)[0], []).append(image)

    def ending(self, path: str) -> list[str]:
        """The images whose path is `path` or ends with /`path`, case aside."""
        low = path.lower()
        same = self.by_base.get(posixpath.basename(low), [])
        return [i for i in same if i.lower() == low or i.lower().endswith("/" + low)]

    def unsuffixed(self, path: str) -> str | None:
        """The one image a file name written without its suffix names (a CVAT video's frame,
        Label Studio's examples' "/image1"); None where the name has a suffix, or names no
        image or several."""
        base = posixpath.basename(path).lower()
        if "." in base:
            return None
        stems = self.by_stem.get(base, [])
        return stems[0] if len(stems) == 1 else None


class ImageIndex(ImageNames):
    """The uploaded images, looked up by the path an annotation wrote for its image: inside the
    folders its file sits in, by the end of its path, by its file name."""

    def __init__(self, images: list[str]):
        super().__init__(images)
        self.exact = set(images)
        self.lower: dict[str, str] = {}
        self.by_stem_path: dict[str, list[str]] = {}
        for image in images:
            low = image.lower()
            self.lower.setdefault(low, image)
            self.by_stem_path.setdefault(low.rsplit(".", 1)[0], []).append(image)

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


# --- splits ---------------------------------------------------------------------------------------


def folder_split(path: str) -> str | None:
    """The split a folder of the path is named for (training/, val/), or None (where
    split_from_path says train)."""
    for part in reversed(path.lower().split("/")[:-1]):
        if part in SPLIT_NAMES:
            return SPLIT_NAMES[part]
    return None


def split_word(text: str) -> str | None:
    """The split a name says (`train`, `val2017`, `_annotations_valid`), or None."""
    low = text.lower()
    if low in SPLIT_NAMES:
        return SPLIT_NAMES[low]
    for word in re.split(r"[^a-z]+", low):
        if word in SPLIT_NAMES:
            return SPLIT_NAMES[word]
    return None


def named_split(name: str) -> str | None:
    """The split of a whole-dataset file: its own name (val.json), then its folders."""
    stem = posixpath.basename(name).rsplit(".", 1)[0]
    return split_word(stem) or folder_split(name)


# --- JSON files -----------------------------------------------------------------------------------


def json_head(read: Reader, name: str) -> str:
    """The first HEAD_BYTES of a file as text ("" when it cannot be read)."""
    try:
        data = read(name, MAX_META_FILE_BYTES)
    except (KeyError, LabelFileError):
        return ""
    return data[:HEAD_BYTES].decode("utf-8", "ignore").lstrip("\ufeff")


def load_json(read: Reader, name: str, skipped: list, title: str):
    """A JSON file's document, or None with the reason in `skipped`."""
    try:
        return json.loads(_text(read, name, MAX_META_FILE_BYTES))
    except (LabelFileError, KeyError) as e:
        skipped.append((name, f"unreadable {title} file ({e})", SKIP_LABEL_FILE))
    except (json.JSONDecodeError, RecursionError) as e:
        skipped.append((name, f"unreadable {title} JSON ({e})", SKIP_LABEL_FILE))
    return None


def json_not_per_image(names: list[str]) -> list[str]:
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


def dict_or_empty(value) -> dict:
    return value if isinstance(value, dict) else {}


def list_or_empty(value) -> list:
    return value if isinstance(value, list) else []


def image_size(w, h) -> tuple[int, int] | None:
    """An image's width and height as whole numbers above 0, or None."""
    try:
        w, h = int(w), int(h)
    except (TypeError, ValueError, OverflowError):
        return None
    return (w, h) if w > 0 and h > 0 else None


# --- geometry -------------------------------------------------------------------------------------


def turned(cx: float, cy: float, offsets, angle: float) -> list[float]:
    """Points given by their offsets (dx, dy) from (cx, cy), turned about it by `angle` (radians,
    clockwise on an image, whose y goes down): [x1, y1, x2, y2, ...]."""
    c, s = math.cos(angle), math.sin(angle)
    out = []
    for dx, dy in offsets:
        out += [cx + dx * c - dy * s, cy + dx * s + dy * c]
    return out


def min_area_corners(xy: list[float]) -> list[float]:
    """The corners of the smallest rotated rectangle around points (pixels, as OpenCV wants)."""
    pts = np.array(xy, dtype=np.float32).reshape(-1, 2)
    return [float(v) for v in cv2.boxPoints(cv2.minAreaRect(pts)).reshape(-1)]


def to_unit(xy: list[float], w: int, h: int) -> list[float]:
    """[x1, y1, ...] in pixels of a w × h image → in 0..1 of it."""
    return [v / (w if i % 2 == 0 else h) for i, v in enumerate(xy)]


def in_image(norm: list[float], tolerance: float) -> bool:
    """Whether normalised coordinates lie in the image, or at most `tolerance` (a share of it)
    past its edge: tools let a shape reach a little past it."""
    return min(norm) >= -tolerance and max(norm) <= 1 + tolerance


def corner_box_label(
    cls: int, x1: float, y1: float, x2: float, y2: float, task: str
) -> ParsedLabel:
    """An axis-aligned box by its corners (pixels or 0..1) as the task's label: an oriented
    box's four corners for obb, a box otherwise (segment keeps boxes, as COCO's parser does)."""
    if task == Task.OBB:
        return ParsedLabel(cls, LabelKind.OBB, [x1, y1, x2, y1, x2, y2, x1, y2])
    return ParsedLabel(cls, LabelKind.BOX, [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1])


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"
