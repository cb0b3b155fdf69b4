"""Label Studio's exports recognised, and their tasks' images found among the upload's files.

A JSON file is Label Studio's by a peek at its first KB and its first task or record only (a
COCO or LabelMe file is turned down unparsed): a task is `{data, annotations | predictions}`, a
JSON-MIN record holds an image path beside the converter's annotator and annotation_id, or
values with original_width. A task's image path is Label Studio's (`/data/upload/<project>/<8
hex>-<name>` for uploads, `/data/local-files/?d=<path>` for local storage, or a URL); it is
matched to the upload's files by the end of its path, else by its file name, never guessed.
Result is one result as the readers of both layouts hand it on.
"""

import json
import posixpath
import re
from collections import Counter
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote, urlsplit

from datasets.services.formats import MAX_META_FILE_BYTES, LabelFileError, Reader
from datasets.services.images import looks_like_image
from datasets.services.tool_formats.common import ImageNames

PEEK_BYTES = 1024
# The key of a value that holds its label names, by result type (the control tag, lower case).
LABEL_KEYS = (
    "rectanglelabels", "polygonlabels", "keypointlabels", "brushlabels", "ellipselabels",
    "choices", "labels", "taxonomy",
)  # fmt: skip
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


@dataclass(slots=True)  # one per result: 100,000 in a large export
class Result:
    """One result as the converter reads it, from a JSON annotation or a JSON-MIN record."""

    type: str
    value: dict
    where: str
    size: tuple[int, int] | None = None
    id: str | None = None
    parent: str | None = None
    from_name: str = ""
    image_rotation: float = 0.0


# --- recognising ---------------------------------------------------------------------------------


def peek(name: str, read: Reader) -> str | None:
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
    if is_task(first):
        return "json"
    if single or not image_key_of([first]):
        return None
    # Every record has the converter's annotator and annotation_id; every image result's value
    # has the image's original_width (converter.py::annotation_result_from_task).
    if ("annotator" in first and "annotation_id" in first) or any(
        min_type(item) and "original_width" in item
        for value in first.values()
        for item in as_list(value)
    ):
        return "min"
    return None


def is_task(item: dict) -> bool:
    return isinstance(item.get("data"), dict) and any(
        isinstance(item.get(k), list) for k in ("annotations", "predictions", "completions")
    )


def as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def min_type(item) -> str | None:
    """The result type of one JSON-MIN value, from its keys (its type was dropped)."""
    if not isinstance(item, dict):
        return None
    for key in LABEL_KEYS:
        if key in item:
            return key
    if "text" in item and ("original_width" in item or "x" in item):
        return "textarea"
    return shape_of(item)


def looks_like_image_ref(value) -> bool:
    if not isinstance(value, str) or not value or len(value) > 4096:
        return False
    if value.startswith("/data/") or "?d=" in value:
        return True
    try:
        path = urlsplit(value).path if "://" in value[:20] else value
    except ValueError:  # an unreadable URL ("http://[")
        return False
    return looks_like_image(unquote(path))


def image_key_of(records: list[dict]) -> str | None:
    """The data key holding the image (the labelling config's `$image`): `image` where it
    holds a path, else the key most records hold an image path in."""
    counts: Counter = Counter()
    for record in records:
        for key, value in record.items():
            if key not in MIN_META_KEYS and looks_like_image_ref(value):
                counts[key] += 1
    if not counts:
        return None
    if "image" in counts:
        return "image"
    return max(counts, key=lambda k: (counts[k], "im" in k.lower()))


def shape_of(value: dict) -> str | None:
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


# --- matching a task's image ---------------------------------------------------------------------


class TaskImages:
    """The upload's images, found by the paths Label Studio's tasks give them."""

    def __init__(self, images: list[str]):
        self.uploaded = ImageNames(images)
        self.matched: Counter = Counter()  # how tasks' image paths were matched, by rule
        self.same_name = 0  # chosen among uploaded files of one name by their folders

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
            ends = self.uploaded.ending(path)
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
            same = self.uploaded.by_base.get(name.lower(), [])
            if len(same) > 1:
                best = self._nearest(same, path)
                if best is None:
                    return None, self._ambiguous(same)
                self.same_name += 1
                same = [best]
            if same:
                self.matched[rule] += 1
                return same[0], ""
        # Label Studio's own examples name images without a suffix.
        if (found := self.uploaded.unsuffixed(path)) is not None:
            self.matched[f"{kind} without a suffix by file name less its suffix"] += 1
            return found, ""
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
