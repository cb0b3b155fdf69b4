"""KITTI object labels and Open Images CSV.

KITTI (the object benchmark's devkit readme; Datumaro's and CVAT's "KITTI 1.0" export): one
text file per image, `label_2/<id>.txt`, a line per object, `type truncated occluded alpha
x1 y1 x2 y2 h w l x y z ry [score]`. The 2D box is in pixels of `image_2/<id>.png`, whose size
the file does not give. Only the 2D box is read: the 3D values have no place in Kestrel.

Open Images (V4 to V7, storage.googleapis.com/openimages/web/download.html): boxes normalised
to 0..1 in `*-annotations-bbox.csv`, an image's verified classes in `*-human-imagelabels*.csv`,
the names of the `/m/…` ids in `class-descriptions*.csv`. An image is `<ImageID>.jpg`.
"""

import csv
import io
import math
import posixpath
import re
from collections import Counter

from datasets.models import LabelKind, Task
from datasets.services.formats import (
    EPS,
    MAX_LABEL_FILE_BYTES,
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
    _text,
    split_from_path,
)

# --- shared ---------------------------------------------------------------------------------------


def _stem(name: str) -> str:
    return posixpath.splitext(posixpath.basename(name))[0].lower()


def _split_named(path: str) -> str | None:
    """The split a folder of the path is named for (training/, val/), or None."""
    for part in reversed(path.lower().split("/")[:-1]):
        if part in SPLIT_NAMES:
            return SPLIT_NAMES[part]
    return None


def _box_label(cls: int, x1: float, y1: float, x2: float, y2: float, task: str) -> ParsedLabel:
    """An axis-aligned box by its corners (pixels or 0..1) as the task's label: an oriented
    box's four corners for obb, a box otherwise (segment keeps boxes, as COCO's parser does)."""
    if task == Task.OBB:
        return ParsedLabel(cls, LabelKind.OBB, [x1, y1, x2, y1, x2, y2, x1, y2])
    return ParsedLabel(cls, LabelKind.BOX, [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1])


def _plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"


# --- KITTI ----------------------------------------------------------------------------------------

KITTI_PEEK_FILES = 5  # per folder: the first label files may be empty (images without objects)
KITTI_PEEK_FOLDERS = 200
# Datumaro's KITTI segmentation masks, written beside image_2/: not photos.
KITTI_MASK_FOLDERS = ("instance", "semantic", "semantic_rgb")
# mmdetection3d's ImageSets/{train,val,trainval,test}.txt; val read after trainval, so it wins.
KITTI_SET_SPLITS = {"trainval.txt": "train", "train.txt": "train", "val.txt": "val",
                    "test.txt": "test"}  # fmt: skip


def _number(token: str) -> bool:
    try:
        return math.isfinite(float(token))
    except ValueError:
        return False


def _kitti_fields(line: str) -> tuple[str, list[float]] | None:
    """(type, numbers) of a KITTI object line, or None when it is not one: a type, then 14
    numbers (15 with a score). The type is one word in KITTI; a tool writing a class name with
    spaces makes it several, none of them a number."""
    parts = line.split()
    i = len(parts)
    while i > 0 and _number(parts[i - 1]):
        i -= 1
    words, numbers = parts[:i], parts[i:]
    if not words or len(numbers) not in (14, 15) or any(_number(w) for w in words):
        return None
    return " ".join(words), [float(v) for v in numbers]


def _kitti_folder(files: list[str], read: Reader) -> bool | None:
    """Whether a folder's label files are KITTI's, from its first non-empty one: its first line
    and most of its lines are KITTI object lines (a YOLO line starts with a number). None when
    the files peeked at are all empty or unreadable."""
    for name in sorted(files)[:KITTI_PEEK_FILES]:
        try:
            text = _text(read, name, MAX_LABEL_FILE_BYTES)
        except (LabelFileError, KeyError):
            continue
        lines = [ln for ln in text.splitlines() if ln.strip()]
        if lines:
            good = sum(_kitti_fields(ln) is not None for ln in lines)
            return _kitti_fields(lines[0]) is not None and good * 2 >= len(lines)
    return None


def claim_kitti(names: list[str], read: Reader) -> list[str]:
    by_folder: dict[str, list[str]] = {}
    for name in names:
        if name.lower().endswith(".txt"):
            by_folder.setdefault(posixpath.dirname(name), []).append(name)
    # label_2/ (or label_*) folders are looked at first, in case an upload has many folders.
    order = sorted(
        by_folder, key=lambda f: (not posixpath.basename(f).lower().startswith("label_"), f)
    )
    kitti, undecided = [], []
    for folder in order[:KITTI_PEEK_FOLDERS]:
        verdict = _kitti_folder(by_folder[folder], read)
        if verdict:
            kitti.append(folder)
        elif verdict is None and posixpath.basename(folder).lower() == "label_2":
            undecided.append(folder)  # a label_2/ of empty files, claimed beside a KITTI one
    if not kitti:
        return []
    return sorted(name for folder in kitti + undecided for name in by_folder[folder])


def _kitti_mask_images(images: list[str]) -> set[str]:
    """Images in instance/ or semantic/ folders beside an image_2/ folder: Datumaro's KITTI
    segmentation masks."""
    photo_roots = set()
    for image in images:
        parts = image.split("/")
        if len(parts) >= 2 and parts[-2].lower() == "image_2":
            photo_roots.add("/".join(parts[:-2]))
    out = set()
    for image in images:
        parts = image.split("/")
        if len(parts) >= 2 and parts[-2].lower() in KITTI_MASK_FOLDERS:
            if "/".join(parts[:-2]) in photo_roots:
                out.add(image)
    return out


def _kitti_image_sets(names: list[str], read: Reader, notes: list[str]) -> dict[str, str]:
    """Image id → split from ImageSets/{trainval,train,val,test}.txt (mmdetection3d's KITTI)."""
    lists = [
        n
        for n in names
        if n.lower().endswith(".txt") and f"/{n.lower()}".rsplit("/", 2)[-2] == "imagesets"
    ]
    out: dict[str, str] = {}
    for list_name, split in KITTI_SET_SPLITS.items():
        for name in sorted(n for n in lists if posixpath.basename(n).lower() == list_name):
            try:
                text = _text(read, name, MAX_META_FILE_BYTES)
            except LabelFileError:
                continue  # not read: the rule names it
            ids = [line.split()[0] for line in text.splitlines() if line.strip()]
            for image_id in ids:
                out[posixpath.basename(image_id).lower()] = split
            notes.append(f"{_plural(len(ids), 'image')} put in {split} by {name}")
    return out


def _kitti_image(label_name: str, by_stem: dict[str, list[str]]) -> tuple[str | None, str, str]:
    """The image a label file is for: (image, "", "") or (None, reason, kind)."""
    stem = _stem(label_name)
    candidates = by_stem.get(stem, [])
    if len(candidates) == 1:
        return candidates[0], "", ""
    if not candidates:
        return (
            None,
            f"no uploaded image is named {stem} (KITTI pairs label_2/{stem}.txt with "
            f"image_2/{stem}.png)",
            SKIP_NO_IMAGE,
        )
    folder = posixpath.dirname(label_name)
    beside = "/".join("image_2" if p.lower() == "label_2" else p for p in folder.split("/"))
    for wanted in (beside, folder):
        near = [c for c in candidates if posixpath.dirname(c) == wanted]
        if len(near) == 1:
            return near[0], "", ""
    in_image_2 = [c for c in candidates if "image_2" in c.lower().split("/")[:-1]]
    if len(in_image_2) == 1:
        return in_image_2[0], "", ""
    shown = ", ".join(candidates[:3])
    return (
        None,
        f"{len(candidates)} images are named like it ({shown}): none was guessed",
        (SKIP_LABEL_FILE),
    )


def parse_kitti(images, files, read: Reader, *, task, classes, names) -> Parsed:
    task = task or Task.DETECT
    skipped: list[tuple[str, str, str]] = []
    notes: list[str] = []
    label_counts: dict[str, int] = {}
    masks = _kitti_mask_images(images)
    for image in sorted(masks):
        reason = "a KITTI segmentation mask, not a photo: Kestrel reads KITTI's object labels"
        skipped.append((image, reason, SKIP_IMAGE))
    photos = [i for i in images if i not in masks]
    set_split = _kitti_image_sets(names, read, notes)
    by_stem: dict[str, list[str]] = {}
    for image in photos:
        by_stem.setdefault(_stem(image), []).append(image)
    parsed_images = {
        p: ParsedImage(p, set_split.get(_stem(p)) or split_from_path(p), in_pixels=True)
        for p in photos
    }
    raw: list[tuple[str, str, list[float], str]] = []  # image, type, x1 y1 x2 y2, label file
    dont_care = 0
    for name in sorted(files):
        image, why, kind = _kitti_image(name, by_stem)
        if image is None:
            skipped.append((name, why, kind))
            continue
        try:
            text = _text(read, name, MAX_LABEL_FILE_BYTES)
        except LabelFileError as e:
            skipped.append((name, f"label file {e}", SKIP_LABEL_FILE))
            continue
        label_counts[name] = 0
        named = _split_named(name)
        if named and _stem(image) not in set_split and _split_named(image) is None:
            parsed_images[image].split = named  # label_2/val/x.txt beside image_2/x.png
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            where = f"{name}:{n}"
            fields = _kitti_fields(line)
            if fields is None:
                reason = (
                    f"not a KITTI object line ({len(line.split())} columns): expected a type, "
                    "then 14 numbers (15 with a score)"
                )
                skipped.append((where, reason, SKIP_LABEL))
                continue
            kind_name, values = fields
            if kind_name.lower() == "dontcare":
                dont_care += 1
                continue
            x1, y1, x2, y2 = values[3:7]
            if x2 <= x1 or y2 <= y1:
                reason = f"box of {kind_name[:40]!r}: right or bottom not past left or top"
                skipped.append((where, reason, SKIP_LABEL))
                continue
            if task == Task.POSE:
                reason = "KITTI objects have no keypoints, which a pose dataset's labels need"
                skipped.append((where, reason, SKIP_LABEL))
                continue
            if task == Task.CLASSIFY:
                reason = "a KITTI object is a box; a classify dataset takes one class per image"
                skipped.append((where, reason, SKIP_LABEL))
                continue
            raw.append((image, kind_name, [x1, y1, x2, y2], name))
    class_names = list(classes)
    for kind_name in sorted({r[1] for r in raw}):
        if kind_name not in class_names:
            class_names.append(kind_name)
    index = {n: i for i, n in reversed(list(enumerate(class_names)))}
    for image, kind_name, corners, name in raw:
        label = _box_label(index[kind_name], *corners, task)
        parsed_images[image].labels.append(label)
        label_counts[name] += 1
    for name in names:
        low = name.lower()
        if not low.endswith(".txt") or name in files:
            continue
        if "calib" in low.split("/")[:-1]:
            skipped.append((name, "KITTI camera calibration, not labels", SKIP_FILE))
        elif posixpath.basename(low) == "label_colors.txt":
            reason = "KITTI's segmentation colour map: Kestrel reads its object labels, not masks"
            skipped.append((name, reason, SKIP_FILE))
    notes.insert(
        0,
        f"{_plural(len(label_counts), 'KITTI label file')} read, each paired with the image of "
        "its name; 2D boxes in pixels (the 3D values are not imported)",
    )
    if dont_care:
        notes.append(
            f"{_plural(dont_care, 'DontCare region')} not imported: KITTI marks areas left "
            "unlabelled with them, they are not objects"
        )
    return Parsed(
        format="kitti",
        class_names=class_names,
        images=parsed_images,
        skipped=skipped,
        notes=notes,
        label_counts=label_counts,
    )


# --- Open Images ----------------------------------------------------------------------------------

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
        self.by_stem: dict[str, list[str]] = {}
        self.raw: list[tuple[str, str, ParsedLabel, str]] = []  # image, id, label, csv
        self.said: Counter = Counter()

    def start(self, masks: set[str]) -> None:
        for image in self.images:
            if image in masks:
                reason = "an Open Images segmentation mask, not a photo (named in MaskPath)"
                self.skipped.append((image, reason, SKIP_IMAGE))
                continue
            self.parsed[image] = ParsedImage(image, split_from_path(image))
            self.by_stem.setdefault(_stem(image), []).append(image)

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
            same = [c for c in candidates if _split_named(c) == split]
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
                (name, f"{_plural(count, what)} not imported: {refusal}", SKIP_LABEL_FILE)
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
            elif not _split_named(image) and _split_named(name):
                entry.split = _split_named(name)  # fiftyone's train/labels/detections.csv
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
                f"{_plural(machine['n'], 'image label')} from here on with a Confidence "
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
        return _box_label(0, xmin, ymin, xmax, ymax, self.task)

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
        lead = f"{_plural(len(done), 'Open Images CSV')} read ({', '.join(done[:3])})"
        described = [k.split(":", 1)[1] for k in self.said if k.startswith("classes:")]
        if described:
            lead += f"; class names from {', '.join(described)}"
        self.notes.insert(0, lead)
        if unnamed:
            self.notes.append(
                f"{_plural(len(unnamed), 'label id')} in no class descriptions file, each named "
                f"by its id ({', '.join(unnamed[:5])})"
            )
        if self.said["negative"]:
            self.notes.append(
                f"{_plural(self.said['negative'], 'negative image label')} (Confidence 0: "
                "verified absent from the image) not imported: they are not its classes"
            )
        tags = Counter(i for i, _, lb, _ in self.raw if lb.kind == LabelKind.TAG)
        if several := sum(1 for n in tags.values() if n > 1):
            self.notes.append(
                f"{_plural(several, 'image')} with more than one image-level class (Open Images "
                "labels are multi-label): each kept"
            )
        if self.said["group"]:
            self.notes.append(
                f"{_plural(self.said['group'], 'box', 'boxes')} around a group of objects "
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
    by_base: dict[str, list[str]] = {}
    for image in images:
        by_base.setdefault(posixpath.basename(image).lower(), []).append(image)
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
