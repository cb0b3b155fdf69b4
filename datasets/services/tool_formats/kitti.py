"""KITTI object labels.

KITTI (the object benchmark's devkit readme; Datumaro's and CVAT's "KITTI 1.0" export): one
text file per image, `label_2/<id>.txt`, a line per object, `type truncated occluded alpha
x1 y1 x2 y2 h w l x y z ry [score]`. The 2D box is in pixels of `image_2/<id>.png`, whose size
the file does not give. Only the 2D box is read: the 3D values have no place in Kestrel.
"""

import math
import posixpath

from datasets.models import Task
from datasets.services.formats import (
    MAX_LABEL_FILE_BYTES,
    MAX_META_FILE_BYTES,
    SKIP_FILE,
    SKIP_IMAGE,
    SKIP_LABEL,
    SKIP_LABEL_FILE,
    SKIP_NO_IMAGE,
    LabelFileError,
    Parsed,
    ParsedImage,
    Reader,
    _stem,
    _text,
    split_from_path,
)
from datasets.services.tool_formats.common import (
    ImageNames,
    corner_box_label,
    folder_split,
    plural,
)

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
            notes.append(f"{plural(len(ids), 'image')} put in {split} by {name}")
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
    by_stem = ImageNames(photos).by_stem
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
        named = folder_split(name)
        if named and _stem(image) not in set_split and folder_split(image) is None:
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
        label = corner_box_label(index[kind_name], *corners, task)
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
        f"{plural(len(label_counts), 'KITTI label file')} read, each paired with the image of "
        "its name; 2D boxes in pixels (the 3D values are not imported)",
    )
    if dont_care:
        notes.append(
            f"{plural(dont_care, 'DontCare region')} not imported: KITTI marks areas left "
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
