"""Open Images CSV.

Open Images (V4 to V7, storage.googleapis.com/openimages/web/download.html): boxes normalised
to 0..1 in `*-annotations-bbox.csv`, an image's verified classes in `*-human-imagelabels*.csv`,
the names of the `/m/…` ids in `class-descriptions*.csv`. An image is `<ImageID>.jpg`.
"""

import csv
import io
import posixpath
import re
from collections import Counter

from datasets.models import LabelKind, Task
from datasets.services.formats import (
    EPS,
    MAX_META_FILE_BYTES,
    SKIP_FILE,
    SKIP_IMAGE,
    SKIP_LABEL,
    SKIP_LABEL_FILE,
    SKIP_NO_IMAGE,
    SPLIT_NAMES,
    LabelFileError,
    Parsed,
    ParsedImage,
    ParsedLabel,
    Reader,
    _finite,
    _in_unit,
    split_from_path,
)
from datasets.services.tool_formats.common import (
    ImageNames,
    corner_box_label,
    folder_split,
    plural,
)

OI_BOXES, OI_IMAGE_LABELS, OI_MASKS, OI_CLASSES = "boxes", "image-labels", "masks", "classes"
OI_IMAGE_LIST, OI_RELATIONS, OI_POINTS = "image-list", "relationships", "points"
OI_TOO_LARGE = "too-large"
# The files that make an upload Open Images; the others are read beside them.
OI_ANNOTATIONS = (OI_BOXES, OI_IMAGE_LABELS, OI_MASKS)
OI_NAME_HINTS = ("annotations-bbox", "imagelabels", "object-segmentation", "class-descriptions")
_OI_ID = re.compile(r"^/[a-z]/[0-9a-z_]+$")


def _oi_header(data: bytes) -> list[str]:
    head = data[:4096].decode("utf-8-sig", "replace").splitlines()[:1]
    return [c.strip() for c in next(csv.reader(head), [])] if head else []


def _oi_kind(name: str, data: bytes) -> str | None:
    """What an Open Images CSV is, from its header (the class descriptions have none in V4 to
    V6, so from their first row or their name), or None."""
    header = _oi_header(data)
    cols = set(header)
    if not header:
        return None
    if {"MaskPath", "ImageID", "LabelName"} <= cols:
        return OI_MASKS
    if {"ImageID", "LabelName", "XMin", "XMax", "YMin", "YMax"} <= cols:
        return OI_BOXES
    if {"ImageID", "LabelName", "Confidence"} <= cols:
        return OI_IMAGE_LABELS
    if "RelationshipLabel" in cols and "ImageID" in cols:
        return OI_RELATIONS
    if {"X", "Y"} <= cols and cols & {"ImageId", "ImageID"}:
        return OI_POINTS
    if {"ImageID", "OriginalURL"} <= cols:
        return OI_IMAGE_LIST
    if header == ["LabelName", "DisplayName"] or (len(header) == 2 and _OI_ID.match(header[0])):
        return OI_CLASSES
    if len(header) == 2 and "class-descriptions" in posixpath.basename(name).lower():
        return OI_CLASSES
    return None


def _oi_read(name: str, read: Reader) -> tuple[str | None, bytes | str]:
    """(kind, bytes), or (OI_TOO_LARGE, reason) for an unreadable file named like Open Images'."""
    try:
        data = read(name, MAX_META_FILE_BYTES)
    except (LabelFileError, KeyError) as e:
        hinted = any(h in posixpath.basename(name).lower() for h in OI_NAME_HINTS)
        return (OI_TOO_LARGE if hinted else None), str(e)
    return _oi_kind(name, data), data


def claim_openimages(names: list[str], read: Reader) -> list[str]:
    kinds = {}
    for name in names:
        if name.lower().endswith(".csv"):
            kind, _ = _oi_read(name, read)
            if kind is not None:
                kinds[name] = kind
    if not any(k in (*OI_ANNOTATIONS, OI_TOO_LARGE) for k in kinds.values()):
        return []
    return sorted(kinds)


def _oi_rows(data: bytes):
    """(line number, row) of a CSV after its header; a header-less class list from line 1."""
    reader = csv.reader(io.StringIO(data.decode("utf-8-sig", "replace"), newline=""))
    for row in reader:
        if row:
            yield reader.line_num, [c.strip() for c in row]


def _oi_split(csv_name: str) -> str | None:
    """The split Open Images names a file for: train-…, validation-…, oidv7-val-…."""
    for word in re.split(r"[-_.]", posixpath.basename(csv_name).lower()):
        if word in SPLIT_NAMES:
            return SPLIT_NAMES[word]
    return None


class _OpenImages:
    """One upload's Open Images files, read into labels."""

    def __init__(self, images, task: str, classes: list[str]):
        self.task = task or Task.DETECT
        self.skipped: list[tuple[str, str, str]] = []
        self.notes: list[str] = []
        self.label_counts: dict[str, int] = {}
        self.names_of: dict[str, str] = {}  # /m/… → display name
        self.class_names = list(classes)
        self.images = list(images)
        self.parsed: dict[str, ParsedImage] = {}
        self.by_stem: dict[str, list[str]] = {}  # of the photos, once start() knows them
        self.raw: list[tuple[str, str, ParsedLabel, str]] = []  # image, id, label, csv
        self.said: Counter = Counter()

    def start(self, masks: set[str]) -> None:
        for image in self.images:
            if image in masks:
                reason = "an Open Images segmentation mask, not a photo (named in MaskPath)"
                self.skipped.append((image, reason, SKIP_IMAGE))
                continue
            self.parsed[image] = ParsedImage(image, split_from_path(image))
        self.by_stem = ImageNames(list(self.parsed)).by_stem

    def classes(self, name: str, data: bytes) -> None:
        n = 0
        for _, row in _oi_rows(data):
            if len(row) < 2 or row[:2] == ["LabelName", "DisplayName"] or not row[0]:
                continue
            self.names_of.setdefault(row[0], row[1] or row[0])
            n += 1
        self.said[f"classes:{name}"] = n

    def image_for(self, image_id: str, split: str | None) -> tuple[str | None, str, str]:
        """The image `<ImageID>.*`, or None and why not."""
        candidates = self.by_stem.get(image_id.lower(), [])
        if len(candidates) > 1 and split:
            same = [c for c in candidates if folder_split(c) == split]
            candidates = same or candidates
        if len(candidates) == 1:
            return candidates[0], "", ""
        if not candidates:
            return None, f"image {image_id[:60]} is not in the upload", SKIP_NO_IMAGE
        shown = ", ".join(candidates[:3])
        return (
            None,
            f"{len(candidates)} images are named {image_id[:60]} ({shown}): none was guessed",
            SKIP_LABEL,
        )

    def annotations(self, name: str, data: bytes, kind: str) -> None:
        rows = _oi_rows(data)
        header = next(rows, (0, []))[1]
        col = {c: i for i, c in enumerate(header)}
        refusal = self._file_refusal(kind)
        if refusal:
            count = sum(1 for _ in rows)
            what = {OI_BOXES: "box", OI_IMAGE_LABELS: "image label", OI_MASKS: "mask"}[kind]
            self.skipped.append(
                (name, f"{plural(count, what)} not imported: {refusal}", SKIP_LABEL_FILE)
            )
            return
        self.label_counts[name] = 0
        split = _oi_split(name)
        missing: dict[str, list] = {}  # image id → [first line, rows, why, kind]
        machine: dict[str, int] = {}
        seen: set[tuple[str, str]] = set()
        for line, row in rows:
            where = f"{name}:{line}"
            if len(row) < len(header):
                reason = f"a row of {len(row)} columns; the header has {len(header)}"
                self.skipped.append((where, reason, SKIP_LABEL))
                continue
            image_id, label_id = row[col["ImageID"]], row[col["LabelName"]]
            image, why, why_kind = self.image_for(image_id, split)
            if image is None:
                missing.setdefault(image_id, [line, 0, why, why_kind])[1] += 1
                continue
            entry = self.parsed[image]
            if split:
                entry.split = split
            elif not folder_split(image) and folder_split(name):
                entry.split = folder_split(name)  # fiftyone's train/labels/detections.csv
            try:
                if kind == OI_BOXES:
                    label = self._box(row, col)
                else:
                    (confidence,) = _finite([row[col["Confidence"]]])
                    if confidence == 0:
                        self.said["negative"] += 1  # verified absent: not a class of the image
                        continue
                    if confidence != 1:
                        machine.setdefault("first", line)
                        machine["n"] = machine.get("n", 0) + 1
                        continue
                    if (image, label_id) in seen:
                        continue
                    seen.add((image, label_id))
                    label = ParsedLabel(0, LabelKind.TAG, [])
            except ValueError as e:
                self.skipped.append((where, f"label {e}", SKIP_LABEL))
                continue
            self.raw.append((image, label_id, label, name))
        for line, n, why, why_kind in missing.values():
            several = "" if n == 1 else f" ({n} rows)"
            self.skipped.append((f"{name}:{line}", why + several, why_kind))
        if machine:
            reason = (
                f"{plural(machine['n'], 'image label')} from here on with a Confidence "
                "between 0 and 1 not imported: machine-generated guesses (a human's are 0 or 1)"
            )
            self.skipped.append((f"{name}:{machine['first']}", reason, SKIP_LABEL))

    def _file_refusal(self, kind: str) -> str:
        task = self.task
        if kind == OI_MASKS:
            return (
                "Open Images masks are PNG images, which Kestrel does not read as labels "
                "(the boxes CSV, …-annotations-bbox.csv, has their boxes)"
            )
        if kind == OI_IMAGE_LABELS and task != Task.CLASSIFY:
            return f"image-level labels are read into a classify dataset, and this one is {task}"
        if kind == OI_BOXES and task == Task.CLASSIFY:
            return "a classify dataset takes image-level labels (…-human-imagelabels.csv)"
        if kind == OI_BOXES and task == Task.POSE:
            return "Open Images boxes have no keypoints, which a pose dataset's labels need"
        return ""

    def _box(self, row: list[str], col: dict[str, int]) -> ParsedLabel:
        xmin, xmax, ymin, ymax = _finite([row[col[k]] for k in ("XMin", "XMax", "YMin", "YMax")])
        if not _in_unit([xmin, xmax, ymin, ymax]):
            raise ValueError("box outside 0..1 (Open Images boxes are normalised)")
        if xmax - xmin <= EPS or ymax - ymin <= EPS:
            raise ValueError("box whose XMax is not past its XMin, or YMax past YMin")
        if "IsGroupOf" in col and row[col["IsGroupOf"]] == "1":
            self.said["group"] += 1
        return corner_box_label(0, xmin, ymin, xmax, ymax, self.task)

    def finish(self) -> Parsed:
        used = sorted({r[1] for r in self.raw}, key=lambda i: (self.names_of.get(i, i), i))
        for label_id in used:
            name = self.names_of.get(label_id, label_id)
            if name not in self.class_names:
                self.class_names.append(name)
        index = {n: i for i, n in reversed(list(enumerate(self.class_names)))}
        for image, label_id, label, name in self.raw:
            label.cls = index[self.names_of.get(label_id, label_id)]
            self.parsed[image].labels.append(label)
            self.label_counts[name] += 1
        unnamed = [i for i in used if i not in self.names_of]
        done = list(self.label_counts)
        lead = f"{plural(len(done), 'Open Images CSV')} read ({', '.join(done[:3])})"
        described = [k.split(":", 1)[1] for k in self.said if k.startswith("classes:")]
        if described:
            lead += f"; class names from {', '.join(described)}"
        self.notes.insert(0, lead)
        if unnamed:
            self.notes.append(
                f"{plural(len(unnamed), 'label id')} in no class descriptions file, each named "
                f"by its id ({', '.join(unnamed[:5])})"
            )
        if self.said["negative"]:
            self.notes.append(
                f"{plural(self.said['negative'], 'negative image label')} (Confidence 0: "
                "verified absent from the image) not imported: they are not its classes"
            )
        tags = Counter(i for i, _, lb, _ in self.raw if lb.kind == LabelKind.TAG)
        if several := sum(1 for n in tags.values() if n > 1):
            self.notes.append(
                f"{plural(several, 'image')} with more than one image-level class (Open Images "
                "labels are multi-label): each kept"
            )
        if self.said["group"]:
            self.notes.append(
                f"{plural(self.said['group'], 'box', 'boxes')} around a group of objects "
                "(IsGroupOf) imported as one object each"
            )
        return Parsed(
            format="openimages",
            class_names=self.class_names,
            images=self.parsed,
            skipped=self.skipped,
            notes=self.notes,
            label_counts=self.label_counts,
        )


OI_OTHER_FILES = {
    OI_IMAGE_LIST: ("Open Images image list (URLs, licences, rotation): not labels", SKIP_FILE),
    OI_RELATIONS: (
        "Open Images relationships between two objects: Kestrel has no relationship labels",
        SKIP_LABEL_FILE,
    ),
    OI_POINTS: ("Open Images point labels: Kestrel has no point labels", SKIP_LABEL_FILE),
}


def parse_openimages(images, files, read: Reader, *, task, classes, names) -> Parsed:
    files_read = {}
    oi = _OpenImages(images, task, classes)
    for name in sorted(files):
        kind, data = _oi_read(name, read)
        if kind == OI_TOO_LARGE:
            oi.skipped.append((name, f"Open Images CSV not read ({data})", SKIP_LABEL_FILE))
        elif kind is None:  # changed since it was claimed
            oi.skipped.append((name, "not an Open Images CSV any more", SKIP_LABEL_FILE))
        elif kind in OI_OTHER_FILES:
            oi.skipped.append((name, *OI_OTHER_FILES[kind]))
        else:
            files_read[name] = (kind, data)
    masks: set[str] = set()
    by_base = ImageNames(images).by_base
    for kind, data in files_read.values():
        if kind == OI_MASKS:
            rows = _oi_rows(data)
            header = next(rows, (0, []))[1]
            if "MaskPath" in header:
                at = header.index("MaskPath")
                for _, row in rows:
                    if len(row) > at:
                        masks.update(by_base.get(posixpath.basename(row[at]).lower(), []))
    oi.start(masks)
    for name, (kind, data) in files_read.items():
        if kind == OI_CLASSES:
            oi.classes(name, data)
    for name, (kind, data) in files_read.items():
        if kind in OI_ANNOTATIONS:
            oi.annotations(name, data, kind)
    for name in names:
        low = name.lower()
        if low.endswith(".json") and "hierarchy" in posixpath.basename(low):
            reason = "Open Images class hierarchy: not read, Kestrel's classes are flat"
            oi.skipped.append((name, reason, SKIP_FILE))
        elif low.endswith(".txt") and "classes-trainable" in posixpath.basename(low):
            reason = "Open Images list of trainable class ids: the labels name their classes"
            oi.skipped.append((name, reason, SKIP_FILE))
    return oi.finish()
