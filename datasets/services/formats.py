"""Recognise what an upload holds and parse its labels into one neutral form.

Parsers see only entry names and a reader for small text files; images are read later, one at a
time. Every label comes out normalised to 0..1 of the image, whatever the source format.
"""

import itertools
import json
import math
import posixpath
from collections.abc import Callable
from dataclasses import dataclass, field

import yaml
from defusedxml import ElementTree
from defusedxml.common import DefusedXmlException

from datasets.models import LabelKind, Split, Task
from datasets.services.masks import coco_rle_decode, mask_box, mask_to_polygons

MAX_LABEL_FILE_BYTES = 1 * 1024 * 1024
MAX_META_FILE_BYTES = 256 * 1024 * 1024  # a COCO json of a large dataset
SPLIT_NAMES = {
    "train": Split.TRAIN.value,
    "training": Split.TRAIN.value,
    "val": Split.VAL.value,
    "valid": Split.VAL.value,
    "validation": Split.VAL.value,
    "validate": Split.VAL.value,
    "test": Split.TEST.value,
    "testing": Split.TEST.value,
}
# Every suffix a parser here reads. The import hands parsers only images and files with these
# suffixes (CVAT's obj.names and obj.data, the Ultralytics NDJSON dataset included).
LABEL_SUFFIXES = (
    ".txt", ".yaml", ".yml", ".json", ".xml", ".ndjson", ".names", ".data", ".csv"
)  # fmt: skip
# Files that look like labels whatever the layout: each one that gives no label is said to in
# the report (format_detect.py's rule), never passed over in silence.
LABEL_LOOKING_SUFFIXES = (".txt", ".json", ".xml", ".csv", ".ndjson")
EPS = 1e-6
# Rotated boxes at an image edge may put a corner slightly outside it (DOTA does): allowed.
OBB_TOLERANCE = 0.1
# Labels in pixels may pass an edge by this much (pixel rounding): clipped, not refused.
PIXEL_TOLERANCE = 1.0


# What a skipped entry was; the import report groups by it (datasets/services/import_report.py).
SKIP_IMAGE = "image"  # an image not imported (unreadable, refused, not where its layout wants it)
SKIP_LABEL = "label"  # one label refused (a line, an object, an annotation)
SKIP_LABEL_FILE = "label_file"  # a whole label or annotation file refused
SKIP_NO_IMAGE = "no_image"  # a label file, or an annotation's image, that matched no image
SKIP_FILE = "file"  # a file that is neither an image nor labels Kestrel reads
SKIP_EMPTY = "empty_label_file"  # a label file read in its format that held no label
SKIP_NO_MASK = "no_mask"  # an image of a per-pixel layout without its mask (imported unlabelled)


class LabelFileError(Exception):
    """A whole label file is unusable (listed once in the report)."""


@dataclass(slots=True)  # an import holds one per label (hundreds of thousands): no __dict__
class ParsedLabel:
    cls: int
    kind: str
    data: list[float]


@dataclass(slots=True)
class ParsedImage:
    name: str
    split: str
    labels: list[ParsedLabel] = field(default_factory=list)
    # COCO/VOC give the image size they were drawn on; the import checks it against the real one.
    declared_size: tuple[int, int] | None = None
    # Formats that give pixels but no image size (KITTI, CreateML, VIA): the labels' numbers
    # are pixels of the image, normalised by the import once it has read the image's size.
    in_pixels: bool = False
    # Per-pixel layouts (pixel_formats.py): the archive entry of the image's mask or depth map.
    mask: str | None = None


@dataclass
class PixelLayout:
    """How the maps of a per-pixel layout are read (pixel_formats.py): a mask's raw values go
    through `lut` (256 entries: raw value → class index or 255, Ultralytics' label_mapping and
    Cityscapes' label ids), an RGB mask's colours through `colours` (a labelmap's list), and a
    palette PNG's indexes through its palette's colours when `colours` is given. Depth maps
    are 16-bit, `depth_scale` (PNG value of a metre) as the upload declared it, or why it was
    refused."""

    lut: list[int] | None = None
    colours: dict[tuple[int, int, int], int] | None = None
    depth_scale: float | None = None
    depth_scale_refused: str = ""
    # No class list in the upload nor in the dataset: classes class0… from the masks' values.
    classes_from_maps: bool = False


@dataclass
class Parsed:
    format: str
    class_names: list[str]
    images: dict[str, ParsedImage]
    skipped: list[tuple[str, str, str]] = field(default_factory=list)  # file, reason, SKIP_*
    task: str | None = None
    keypoint_shape: list[int] | None = None
    # How the files were read, in a sentence each, for the report: "12 label files paired by
    # name in labels/train-labels/ (not mirroring the image folders)".
    notes: list[str] = field(default_factory=list)
    # Labels parsed from each file the parser read as a label file (0: it held none). A file
    # read only for class names or splits is not in it. format_detect.py's rule reads it.
    label_counts: dict[str, int] = field(default_factory=dict)
    # Per-pixel layouts only (semantic and depth datasets).
    pixels: PixelLayout | None = None


Reader = Callable[[str, int], bytes]


def _text(read: Reader, name: str, limit: int) -> str:
    data = read(name, limit)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise LabelFileError("not UTF-8 text") from None


def split_from_path(name: str) -> str:
    for part in reversed(name.lower().split("/")[:-1]):
        if part in SPLIT_NAMES:
            return SPLIT_NAMES[part]
    return Split.TRAIN.value


def _finite(values: list[str]) -> list[float]:
    out = []
    for v in values:
        try:
            f = float(v)
        except ValueError:
            raise ValueError(f"not a number: {v[:20]!r}") from None
        if not math.isfinite(f):
            raise ValueError("NaN or infinite value")
        out.append(f)
    return out


def _in_unit(coords: list[float]) -> bool:
    return all(-EPS <= c <= 1 + EPS for c in coords)


def _clip(coords: list[float]) -> list[float]:
    return [min(1.0, max(0.0, c)) for c in coords]


def labels_from_pixels(
    labels: list[ParsedLabel], width: int, height: int, *, kpt_dims: int = 3
) -> tuple[list[ParsedLabel], list[str]]:
    """Labels in pixels of a width × height image → normalised ones, and a reason for each
    refused (outside the image). Keypoints have kpt_dims values each (x, y, visibility).
    A box or polygon up to PIXEL_TOLERANCE past an edge is clipped to it: exports that round
    to whole pixels (Roboflow's CreateML: centre and size) put an edge half a pixel out."""
    out, refused = [], []
    tx, ty = PIXEL_TOLERANCE / width, PIXEL_TOLERANCE / height
    for label in labels:
        d = label.data
        if label.kind == LabelKind.BOX:
            x1, x2 = (d[0] - d[2] / 2) / width, (d[0] + d[2] / 2) / width
            y1, y2 = (d[1] - d[3] / 2) / height, (d[1] + d[3] / 2) / height
            if not (-tx <= x1 and x2 <= 1 + tx and -ty <= y1 and y2 <= 1 + ty):
                refused.append(f"box outside the {width}×{height} image")
                continue
            x1, y1, x2, y2 = _clip([x1, y1, x2, y2])
            if x2 <= x1 or y2 <= y1:
                refused.append(f"box on the edge of the {width}×{height} image, with no area in it")
                continue
            box = [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]
            out.append(ParsedLabel(label.cls, label.kind, box))
        elif label.kind in (LabelKind.POLYGON, LabelKind.OBB):
            norm = [v / (width if i % 2 == 0 else height) for i, v in enumerate(d)]
            if label.kind == LabelKind.OBB:
                inside = all(-OBB_TOLERANCE <= v <= 1 + OBB_TOLERANCE for v in norm)
            else:
                inside = all(
                    -t <= v <= 1 + t for v, t in zip(norm, itertools.cycle((tx, ty)), strict=False)
                )
            if not inside:
                refused.append(f"{label.kind} outside the {width}×{height} image")
                continue
            kept = norm if label.kind == LabelKind.OBB else _clip(norm)
            out.append(ParsedLabel(label.cls, label.kind, kept))
        elif label.kind == LabelKind.KEYPOINTS:
            box = [d[0] / width, d[1] / height, d[2] / width, d[3] / height]
            rest, dims = d[4:], kpt_dims
            kpts = []
            for i, v in enumerate(rest):
                j = i % dims
                kpts.append(v / width if j == 0 else v / height if j == 1 else v)
            coords = [v for i, v in enumerate(kpts) if i % dims < 2]
            if not _in_unit(coords):
                refused.append(f"keypoints outside the {width}×{height} image")
                continue
            out.append(ParsedLabel(label.cls, label.kind, _clip(box) + kpts))
        else:
            out.append(label)
    return out, refused


def _poly_to_box(xy: list[float]) -> list[float]:
    xs, ys = xy[0::2], xy[1::2]
    x1, x2, y1, y2 = min(xs), max(xs), min(ys), max(ys)
    return [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]


def yolo_line(line: str, *, task: str, n_classes: int, kpt_shape: list[int] | None) -> ParsedLabel:
    """One Ultralytics label line → ParsedLabel; ValueError with the reason otherwise."""
    parts = line.split()
    if not parts:
        raise ValueError("empty line")
    try:
        cls = int(parts[0])
    except ValueError:
        raise ValueError(f"class id {parts[0][:20]!r} is not an integer") from None
    if cls < 0 or cls >= n_classes:
        raise ValueError(f"class id {cls} out of range (0..{n_classes - 1})")
    values = _finite(parts[1:])
    n = len(values)
    if task == Task.POSE:
        k, d = kpt_shape or (17, 3)
        if n != 4 + k * d:
            raise ValueError(f"pose lines need {5 + k * d} columns, found {n + 1}")
        box, kpts = values[:4], values[4:]
        coords = [v for i, v in enumerate(kpts) if d == 2 or i % 3 != 2]
        if not _in_unit(box) or not _in_unit(coords):
            raise ValueError("coordinates outside 0..1")
        if d == 3 and any(v not in (0.0, 1.0, 2.0) for v in kpts[2::3]):
            raise ValueError("keypoint visibility must be 0, 1 or 2")
        return ParsedLabel(cls, LabelKind.KEYPOINTS, _clip(box) + kpts)
    if task == Task.OBB:
        if n != 8:
            raise ValueError(f"oriented-box lines need 9 columns, found {n + 1}")
        if not all(-OBB_TOLERANCE <= v <= 1 + OBB_TOLERANCE for v in values):
            raise ValueError("coordinates outside 0..1")
        return ParsedLabel(cls, LabelKind.OBB, values)
    if not _in_unit(values):
        raise ValueError("coordinates outside 0..1")
    values = _clip(values)
    if n == 4:
        if values[2] <= 0 or values[3] <= 0:
            raise ValueError("box with no width or height")
        return ParsedLabel(cls, LabelKind.BOX, values)
    if n >= 6 and n % 2 == 0:
        if task == Task.SEGMENT:
            return ParsedLabel(cls, LabelKind.POLYGON, values)
        return ParsedLabel(cls, LabelKind.BOX, _poly_to_box(values))  # as Ultralytics does
    raise ValueError(f"{n + 1} columns: expected 5 (box) or an odd number ≥ 7 (polygon)")


# --- detection ---------------------------------------------------------------------------------


def _find_data_yaml(yamls: list[str], read: Reader) -> tuple[str, dict] | None:
    for name in sorted(yamls, key=lambda n: (n.count("/"), n)):
        try:
            doc = yaml.safe_load(_text(read, name, MAX_LABEL_FILE_BYTES))
        except (yaml.YAMLError, LabelFileError):
            continue
        if isinstance(doc, dict) and "names" in doc:
            return name, doc
    return None


def _names_from_yaml(doc: dict) -> list[str]:
    names = doc.get("names")
    if isinstance(names, dict):
        try:
            keyed = {int(k): str(v) for k, v in names.items()}
        except (TypeError, ValueError):
            raise LabelFileError("`names` keys must be class ids") from None
        return [keyed.get(i, f"class{i}") for i in range(max(keyed) + 1)] if keyed else []
    if isinstance(names, list):
        return [str(n) for n in names]
    raise LabelFileError("`names` must be a list or a mapping")


def _yaml_split_dirs(
    yaml_name: str, doc: dict, images: list[str], notes: list[str]
) -> dict[str, str]:
    """Folder prefixes per split, resolved like Ultralytics (relative `../` paths included).

    Exports (Roboflow's) write paths such as `../train/images` that point outside the archive:
    where the literal folder holds no image, the path is read from the archive's root (the
    folder of data.yaml, then the top of the archive), and a note says so."""
    base = posixpath.dirname(yaml_name)
    root = doc.get("path")
    if isinstance(root, str) and root and not root.startswith("/") and ":" not in root:
        base = posixpath.normpath(posixpath.join(base, root))
    dirs = {posixpath.dirname(i) + "/" for i in images}

    def holds_images(folder: str) -> bool:
        return any(d.startswith(folder) for d in dirs)

    out = {}
    for key in ("train", "val", "test"):
        values = doc.get(key)
        for value in values if isinstance(values, list) else [values]:
            if not isinstance(value, str) or not value or value.startswith("/"):
                continue
            literal = posixpath.normpath(posixpath.join(base, value))
            inside = value
            while inside.startswith(("../", "./")):
                inside = inside.split("/", 1)[1]
            tries = [literal, posixpath.join(posixpath.dirname(yaml_name), inside), inside]
            tries = [posixpath.normpath(t).rstrip("/") + "/" for t in tries]
            tries = [t for t in tries if not t.startswith("../") and t != "./"]
            folder = next((t for t in tries if holds_images(t)), None)
            if folder is None:
                continue
            if folder != tries[0] or literal.startswith(".."):
                notes.append(
                    f"{yaml_name}'s {key} path {value} read as {folder.rstrip('/')} "
                    "inside the archive"
                )
            out[folder] = key
    return out


def _label_path(image: str) -> str:
    """Ultralytics' rule: the last /images/ becomes /labels/, the suffix becomes .txt."""
    p = "/" + image
    if "/images/" in p:
        head, tail = p.rsplit("/images/", 1)
        p = f"{head}/labels/{tail}"
    return p[1:].rsplit(".", 1)[0] + ".txt"


def _stem(name: str) -> str:
    return posixpath.splitext(posixpath.basename(name))[0].lower()


class _LabelTrees:
    """Label files by stem inside each `labels` folder, for pairing images whose label
    folders do not mirror the image folders (data/labels/train-labels/x.txt)."""

    def __init__(self, txts):
        self.trees: dict[str, dict[str, list[str]]] = {}
        for txt in txts:
            parts = txt.split("/")
            for i, part in enumerate(parts[:-1]):
                if part.lower() == "labels":
                    tree = "/".join(parts[: i + 1]) + "/"
                    self.trees.setdefault(tree, {}).setdefault(_stem(txt), []).append(txt)

    def candidates(self, image: str) -> tuple[str, list[str]] | None:
        """The nearest labels tree above the image and the label files in it named like it."""
        parts = image.split("/")[:-1]
        for depth in range(len(parts), -1, -1):
            tree = "/".join([*parts[:depth], "labels"]) + "/"
            if tree in self.trees:
                return tree, self.trees[tree].get(_stem(image), [])
        return None


def _yolo_labels(
    read: Reader,
    label_name: str,
    *,
    task: str,
    names: list[str],
    kpt_shape: list[int] | None,
    skipped: list,
) -> list[ParsedLabel]:
    """The labels of one Ultralytics label file; refused lines go to `skipped`."""
    try:
        text = _text(read, label_name, MAX_LABEL_FILE_BYTES)
    except LabelFileError as e:
        skipped.append((label_name, f"label file {e}", SKIP_LABEL_FILE))
        return []
    out = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(
                yolo_line(
                    line, task=task, n_classes=len(names) if names else 10**6, kpt_shape=kpt_shape
                )
            )
        except ValueError as e:
            skipped.append((f"{label_name}:{lineno}", f"label {e}", SKIP_LABEL))
    return out


def class_list_file(txts, read: Reader, *, near: str = "") -> tuple[str, list[str]] | None:
    """A `classes.txt` (Label Studio, CVAT's obj.names): one class name a line, in id order.
    The shallowest one wins, preferring one inside `near`."""
    found = [t for t in txts if posixpath.basename(t).lower() in ("classes.txt", "obj.names")]
    found.sort(key=lambda t: (not t.startswith(near), t.count("/"), t))
    for name in found:
        try:
            text = _text(read, name, MAX_LABEL_FILE_BYTES)
        except LabelFileError:
            continue
        names = [line.strip() for line in text.splitlines() if line.strip()]
        if names:
            return name, names
    return None


def _label_studio_names(jsons, read: Reader) -> tuple[str, list[str]] | None:
    """Label Studio's YOLO export writes notes.json with its categories (id, name)."""
    for name in sorted(j for j in jsons if posixpath.basename(j).lower() == "notes.json"):
        try:
            doc = json.loads(_text(read, name, MAX_LABEL_FILE_BYTES))
            cats = sorted(doc["categories"], key=lambda c: int(c["id"]))
            return name, [str(c["name"]) for c in cats]
        except (LabelFileError, ValueError, KeyError, TypeError):
            continue
    return None


def parse_yolo(
    images, txts, data_yaml, read: Reader, *, task: str, classes: list[str], jsons=()
) -> Parsed:
    skipped: list[tuple[str, str, str]] = []
    notes: list[str] = []
    yaml_task, kpt_shape, names, split_dirs = None, None, list(classes), {}
    if data_yaml is not None:
        yaml_name, doc = data_yaml
        try:
            names = _names_from_yaml(doc)
        except LabelFileError as e:
            skipped.append((yaml_name, str(e), SKIP_LABEL_FILE))
        split_dirs = _yaml_split_dirs(yaml_name, doc, images, notes)
        shape = doc.get("kpt_shape")
        if isinstance(shape, list) and len(shape) == 2 and all(isinstance(v, int) for v in shape):
            kpt_shape, yaml_task = shape, Task.POSE
    else:
        listed = class_list_file(txts, read)
        # Label Studio's YOLO export has both classes.txt and notes.json: both are read.
        studio = _label_studio_names(jsons, read)
        listed = listed or studio
        if listed is not None:
            names = listed[1]
            notes.append(f"class names read from {listed[0]} ({len(names)} classes)")
        if studio is not None and studio[1] != names:
            notes.append(f"{studio[0]} names other classes than {listed[0]}: not used")
    effective_task = task or yaml_task or Task.DETECT
    if not names:
        # No data.yaml: class ids must fit the dataset's classes (or become class0..N).
        names = list(classes)
    label_files = set(txts)
    trees = _LabelTrees(txts)
    mirrored = {_label_path(i) for i in images} & label_files
    parsed_images: dict[str, ParsedImage] = {}
    label_counts: dict[str, int] = {}
    used_labels: set[str] = set()
    by_stem: dict[str, int] = {}
    ambiguous: dict[str, str] = {}
    max_cls_seen = -1
    for image in images:
        split = next(
            (s for prefix, s in split_dirs.items() if image.startswith(prefix)), None
        ) or split_from_path(image)
        entry = ParsedImage(image, split)
        label_name = _label_path(image)
        if label_name not in label_files:
            label_name = None
            found = trees.candidates(image)
            if found is not None:
                tree, candidates = found
                # Not another image's mirrored label, nor one in a folder naming another split.
                candidates = [
                    c
                    for c in candidates
                    if c not in mirrored and split_from_path_or_name(c) in (None, split)
                ]
                if len(candidates) > 1:
                    # Several label files share the stem: one in the image's split folder wins.
                    same = [c for c in candidates if split_from_path_or_name(c) == split]
                    candidates = same if len(same) == 1 else candidates
                if len(candidates) == 1:
                    label_name = candidates[0]
                    by_stem[posixpath.dirname(label_name)] = (
                        by_stem.get(posixpath.dirname(label_name), 0) + 1
                    )
                elif candidates:
                    for c in candidates:
                        ambiguous[c] = (
                            f"{len(candidates)} label files in {tree} are named like {image}"
                        )
        if label_name is not None:
            used_labels.add(label_name)
            entry.labels = _yolo_labels(
                read,
                label_name,
                task=effective_task,
                names=names,
                kpt_shape=kpt_shape,
                skipped=skipped,
            )
            label_counts[label_name] = len(entry.labels)
            for label in entry.labels:
                max_cls_seen = max(max_cls_seen, label.cls)
        parsed_images[image] = entry
    for folder, n in sorted(by_stem.items()):
        notes.append(
            f"{n} label file{'s' if n != 1 else ''} paired by image name in {folder}/ "
            "(their folders do not mirror the image folders)"
        )
    if not names and max_cls_seen >= 0:
        names = [f"class{i}" for i in range(max_cls_seen + 1)]
    for orphan in sorted(label_files - used_labels):
        if "/labels/" in "/" + orphan and not orphan.lower().endswith("classes.txt"):
            if orphan in ambiguous:
                reason = f"not paired: {ambiguous[orphan]} (none was guessed)"
                skipped.append((orphan, reason, SKIP_LABEL_FILE))
            else:
                skipped.append((orphan, "label file without a matching image", SKIP_NO_IMAGE))
    return Parsed(
        format="yolo",
        class_names=names,
        images=parsed_images,
        skipped=skipped,
        task=yaml_task,
        keypoint_shape=kpt_shape,
        notes=notes,
        label_counts=label_counts,
    )


def split_from_path_or_name(name: str) -> str | None:
    """The split a path's folders name, also inside a folder name (`train-labels`), or None."""
    for part in reversed(name.lower().split("/")[:-1]):
        if part in SPLIT_NAMES:
            return SPLIT_NAMES[part]
        for word in part.replace("_", "-").split("-"):
            if word in SPLIT_NAMES:
                return SPLIT_NAMES[word]
    return None


def _is_coco(name: str, read: Reader) -> bool:
    try:
        head = read(name, MAX_META_FILE_BYTES)[:4096].decode("utf-8", "ignore")
    except LabelFileError:
        return False
    return '"images"' in head or '"annotations"' in head or '"categories"' in head


def _match_by_name(images: list[str]) -> dict[str, list[str]]:
    by_base: dict[str, list[str]] = {}
    for image in images:
        by_base.setdefault(posixpath.basename(image).lower(), []).append(image)
    return by_base


def parse_coco(images, coco_files, read: Reader, *, task: str, classes: list[str]) -> Parsed:
    skipped: list[tuple[str, str, str]] = []
    by_base = _match_by_name(images)
    parsed_images: dict[str, ParsedImage] = {}
    names: list[str] = list(classes)
    notes: list[str] = []
    kpt_shape = None
    label_counts: dict[str, int] = {}
    rle = {"masks": 0, "polygons": 0, "crowd": 0}  # RLE masks traced for a segment dataset
    for coco_name in sorted(coco_files):
        try:
            doc = json.loads(_text(read, coco_name, MAX_META_FILE_BYTES))
        except (LabelFileError, json.JSONDecodeError) as e:
            skipped.append((coco_name, f"unreadable COCO JSON ({e})", SKIP_LABEL_FILE))
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("images"), list):
            skipped.append((coco_name, "not a COCO file (no images list)", SKIP_LABEL_FILE))
            continue
        cats = sorted(
            (c for c in doc.get("categories", []) if isinstance(c, dict) and "id" in c),
            key=lambda c: c["id"],
        )
        used_ids = {a.get("category_id") for a in doc.get("annotations", []) if isinstance(a, dict)}
        supers = {str(c.get("supercategory")) for c in cats if c.get("supercategory")}
        only_super = [
            c
            for c in cats
            if c["id"] not in used_ids
            and str(c.get("name")) in supers
            and any(str(o.get("supercategory")) == str(c.get("name")) and o is not c for o in cats)
            and str(c.get("name")) not in names
        ]
        if only_super:
            shown = ", ".join(str(c["name"]) for c in only_super[:5])
            notes.append(
                f"{coco_name}: {len(only_super)} categor{'ies' if len(only_super) != 1 else 'y'} "
                f"only naming a supercategory ({shown}) not made into classes: "
                "no annotation uses them"
            )
            cats = [c for c in cats if c not in only_super]
        cat_index: dict[int, int] = {}
        for cat in cats:
            name = str(cat.get("name", f"class{cat['id']}"))
            if name not in names:
                names.append(name)
            cat_index[cat["id"]] = names.index(name)
            kp = cat.get("keypoints")
            if isinstance(kp, list) and kp:
                kpt_shape = [len(kp), 3]
        stem = posixpath.basename(coco_name).lower()
        file_split = next((s for k, s in SPLIT_NAMES.items() if k in stem), None)
        coco_images: dict[int, ParsedImage] = {}
        label_counts[coco_name] = 0
        for img in doc["images"]:
            if not isinstance(img, dict) or "id" not in img or "file_name" not in img:
                skipped.append((coco_name, "an image entry without id or file_name", SKIP_LABEL))
                continue
            file_name = str(img["file_name"]).replace("\\", "/")
            candidates = by_base.get(posixpath.basename(file_name).lower(), [])
            exact = [c for c in candidates if c.endswith(file_name)]
            match = (exact or candidates)[:1]
            if not match:
                skipped.append(
                    (file_name[:200], "listed in the COCO file but not uploaded", SKIP_NO_IMAGE)
                )
                continue
            path = match[0]
            split = file_split or split_from_path(path)
            w, h = img.get("width"), img.get("height")
            declared = (int(w), int(h)) if isinstance(w, int) and isinstance(h, int) else None
            entry = parsed_images.setdefault(path, ParsedImage(path, split, declared_size=declared))
            coco_images[img["id"]] = entry
        for ann in doc.get("annotations", []):
            where = f"{coco_name} annotation {ann.get('id', '?') if isinstance(ann, dict) else '?'}"
            if not isinstance(ann, dict):
                continue
            entry = coco_images.get(ann.get("image_id"))
            if entry is None:
                skipped.append((where, f"unknown image id {ann.get('image_id')!r}", SKIP_LABEL))
                continue
            if ann.get("category_id") not in cat_index:
                skipped.append(
                    (where, f"unknown category id {ann.get('category_id')!r}", SKIP_LABEL)
                )
                continue
            if entry.declared_size is None:
                skipped.append(
                    (where, "its image has no width/height in the COCO file", SKIP_LABEL)
                )
                continue
            try:
                found = _coco_labels(ann, cat_index[ann["category_id"]], entry, task, rle=rle)
                entry.labels.extend(found)
                label_counts[coco_name] += len(found)
            except ValueError as e:
                skipped.append((where, f"label {e}", SKIP_LABEL))
    for p in images:
        parsed_images.setdefault(p, ParsedImage(p, split_from_path(p)))
    if rle["masks"]:
        crowd = f", {rle['crowd']} of them crowd regions (iscrowd 1)" if rle["crowd"] else ""
        notes.append(
            f"{rle['masks']} RLE mask{'s' if rle['masks'] != 1 else ''}{crowd} became "
            f"{rle['polygons']} polygon{'s' if rle['polygons'] != 1 else ''}: one per region "
            "of each mask, regions under 4 pixels left out, holes filled"
        )
    return Parsed(
        format="coco",
        class_names=names,
        images=parsed_images,
        skipped=skipped,
        notes=notes,
        task=Task.POSE if kpt_shape else None,
        keypoint_shape=kpt_shape,
        label_counts=label_counts,
    )


def _coco_labels(
    ann: dict, cls: int, entry: ParsedImage, task: str, *, rle: dict | None = None
) -> list[ParsedLabel]:
    """One COCO annotation's labels. A segmentation given as RLE ({"size": [h, w], "counts"})
    becomes a polygon per region of its mask in a segment dataset; `rle` counts them."""
    w, h = entry.declared_size
    seg = ann.get("segmentation")
    mask = None
    if isinstance(seg, dict) and (task == Task.SEGMENT or not isinstance(ann.get("bbox"), list)):
        # Only RLE segmentations need masks.py (OpenCV, NumPy).

        if seg.get("size") != [h, w]:
            raise ValueError(f"RLE mask of size {seg.get('size')!r}, not the image's [{h}, {w}]")
        mask = coco_rle_decode(seg)
        if not isinstance(ann.get("bbox"), list):
            found = mask_box(mask)
            if found is None:
                raise ValueError("an empty RLE mask and no bbox")
            ann = {**ann, "bbox": [found[0], found[1], found[2] - found[0], found[3] - found[1]]}
    if task == Task.OBB and isinstance(seg, list) and len(seg) == 1 and isinstance(seg[0], list):
        xy = _finite([str(v) for v in seg[0]])
        if len(xy) == 8:  # an oriented box: its four corners
            norm = [v / (w if i % 2 == 0 else h) for i, v in enumerate(xy)]
            if not all(-OBB_TOLERANCE <= v <= 1 + OBB_TOLERANCE for v in norm):
                raise ValueError("oriented box outside the image")
            return [ParsedLabel(cls, LabelKind.OBB, norm)]
    bbox = ann.get("bbox")
    if not (isinstance(bbox, list) and len(bbox) == 4):
        raise ValueError("without a 4-number bbox")
    x, y, bw, bh = _finite([str(v) for v in bbox])
    box = [(x + bw / 2) / w, (y + bh / 2) / h, bw / w, bh / h]
    corners = [x / w, y / h, (x + bw) / w, (y + bh) / h]
    if not _in_unit(corners) or bw <= 0 or bh <= 0:
        raise ValueError("box outside the image or empty")
    box = _clip(box)
    if task == Task.SEGMENT and mask is not None:
        polygons = mask_to_polygons(mask)
        if not polygons:
            raise ValueError("RLE mask with no region of 4 pixels or more")
        norm = [[v / (w if i % 2 == 0 else h) for i, v in enumerate(p)] for p in polygons]
        out = [ParsedLabel(cls, LabelKind.POLYGON, _clip(xy)) for xy in norm]
        if rle is not None:
            rle["masks"] += 1
            rle["polygons"] += len(out)
            rle["crowd"] += 1 if ann.get("iscrowd") else 0
        return out
    if task == Task.SEGMENT and isinstance(ann.get("segmentation"), list):
        out = []
        for poly in ann["segmentation"]:
            xy = _finite([str(v) for v in poly]) if isinstance(poly, list) else []
            if len(xy) < 6 or len(xy) % 2:
                continue
            norm = [v / (w if i % 2 == 0 else h) for i, v in enumerate(xy)]
            if not _in_unit(norm):
                raise ValueError("polygon outside the image")
            out.append(ParsedLabel(cls, LabelKind.POLYGON, _clip(norm)))
        if out:
            return out
    kp = ann.get("keypoints")
    if task == Task.POSE and isinstance(kp, list) and kp and len(kp) % 3 == 0:
        vals = _finite([str(v) for v in kp])
        norm = []
        for i in range(0, len(vals), 3):
            px, py, v = vals[i : i + 3]
            norm += [px / w, py / h, v]
        if not _in_unit([c for i, c in enumerate(norm) if i % 3 != 2]):
            raise ValueError("keypoints outside the image")
        return [ParsedLabel(cls, LabelKind.KEYPOINTS, box + norm)]
    return [ParsedLabel(cls, LabelKind.BOX, box)]


VOC_SET_SPLITS = {  # ImageSets/Main lists, the later one winning for an image in two
    "trainval.txt": Split.TRAIN.value,
    "train.txt": Split.TRAIN.value,
    "val.txt": Split.VAL.value,
    "test.txt": Split.TEST.value,
}


def _voc_image_sets(txts, read: Reader, skipped: list, notes: list) -> dict[str, str]:
    """Image id (file stem) → split from Pascal VOC's ImageSets/Main/{train,val,trainval,test}.txt.
    Per-class lists (cat_train.txt) and other ImageSets are listed as not read."""
    sets = [t for t in txts if "imagesets/" in f"/{t.lower()}"]
    out: dict[str, str] = {}
    for list_name in sorted(VOC_SET_SPLITS):
        for name in (t for t in sets if t.lower().endswith(f"imagesets/main/{list_name}")):
            try:
                text = _text(read, name, MAX_META_FILE_BYTES)
            except LabelFileError as e:
                skipped.append((name, f"image set list {e}", SKIP_FILE))
                continue
            ids = [line.split()[0] for line in text.splitlines() if line.strip()]
            for image_id in ids:
                out[posixpath.basename(image_id).lower()] = VOC_SET_SPLITS[list_name]
            notes.append(f"{len(ids)} images put in {VOC_SET_SPLITS[list_name]} by {name}")
    for name in sets:
        low = name.lower()
        if not any(low.endswith(f"imagesets/main/{n}") for n in VOC_SET_SPLITS):
            skipped.append(
                (
                    name,
                    "not read: only ImageSets/Main/{train,val,trainval,test}.txt decide splits",
                    SKIP_FILE,
                )
            )
    return out


def parse_voc(images, xmls, read: Reader, *, classes: list[str], txts=()) -> Parsed:
    skipped: list[tuple[str, str, str]] = []
    notes: list[str] = []
    # train.txt before val.txt: an image in trainval and val goes to val.
    set_split = _voc_image_sets(txts, read, skipped, notes)
    by_base = _match_by_name(images)
    by_stem: dict[str, list[str]] = {}
    for image in images:
        by_stem.setdefault(posixpath.splitext(image)[0].lower(), []).append(image)
    names: list[str] = list(classes)
    parsed_images = {
        p: ParsedImage(p, set_split.get(_stem(p)) or split_from_path(p)) for p in images
    }
    if set_split:
        unlisted = [p for p in images if _stem(p) not in set_split]
        if unlisted:
            notes.append(
                f"{len(unlisted)} images in no ImageSets list keep the split of their folder"
            )
    raw: list[tuple[str, str, list[float], tuple[int, int], str]] = []
    label_counts: dict[str, int] = {}
    for xml_name in sorted(xmls):
        try:
            root = ElementTree.fromstring(read(xml_name, MAX_LABEL_FILE_BYTES))
        except (ElementTree.ParseError, DefusedXmlException, LabelFileError) as e:
            skipped.append((xml_name, f"unreadable XML ({type(e).__name__})", SKIP_LABEL_FILE))
            continue
        if root.tag != "annotation":
            skipped.append(
                (
                    xml_name,
                    f"taken for Pascal VOC, but its root element is <{str(root.tag)[:40]}>, "
                    "not VOC's <annotation>",
                    SKIP_LABEL_FILE,
                )
            )
            continue
        label_counts[xml_name] = 0
        filename = (root.findtext("filename") or "").strip()
        stem = posixpath.splitext(xml_name)[0].lower()
        match = by_base.get(filename.lower()) or by_stem.get(stem) or []
        if not match:
            skipped.append((xml_name, "no uploaded image matches this annotation", SKIP_NO_IMAGE))
            continue
        image = match[0]
        try:
            size = (int(root.findtext("size/width")), int(root.findtext("size/height")))
            if size[0] <= 0 or size[1] <= 0:
                raise ValueError
        except (TypeError, ValueError):
            skipped.append((xml_name, "no valid <size> width/height", SKIP_LABEL_FILE))
            continue
        parsed_images[image].declared_size = size
        for obj in root.iter("object"):
            name = (obj.findtext("name") or "").strip()
            try:
                x1, y1, x2, y2 = _finite(
                    [obj.findtext(f"bndbox/{k}") or "x" for k in ("xmin", "ymin", "xmax", "ymax")]
                )
            except ValueError as e:
                skipped.append((xml_name, f"object {name[:40]!r}: {e}", SKIP_LABEL))
                continue
            if not name:
                skipped.append((xml_name, "an object without a name", SKIP_LABEL))
                continue
            raw.append((image, name, [x1, y1, x2, y2], size, xml_name))
    for name in sorted({r[1] for r in raw}):
        if name not in names:
            names.append(name)
    for image, name, (x1, y1, x2, y2), (w, h), xml_name in raw:
        # VOC boxes are 1-based pixel corners (as Ultralytics' VOC converter reads them).
        if x2 == x1 or y2 == y1:
            skipped.append((image, f"box of {name[:40]!r}: zero-area box", SKIP_LABEL))
            continue
        if x2 < x1 or y2 < y1:
            skipped.append(
                (image, f"box of {name[:40]!r}: xmax before xmin or ymax before ymin", SKIP_LABEL)
            )
            continue
        box = [((x1 + x2) / 2 - 1) / w, ((y1 + y2) / 2 - 1) / h, (x2 - x1) / w, (y2 - y1) / h]
        if not _in_unit(box) or box[2] <= 0 or box[3] <= 0:
            skipped.append((image, f"box of {name[:40]!r} outside the image", SKIP_LABEL))
            continue
        parsed_images[image].labels.append(
            ParsedLabel(names.index(name), LabelKind.BOX, _clip(box))
        )
        label_counts[xml_name] += 1
    return Parsed(
        format="voc",
        class_names=names,
        images=parsed_images,
        skipped=skipped,
        notes=notes,
        label_counts=label_counts,
    )


def parse_classification_folders(
    images: list[str], classes: list[str], *, txts=(), data_yaml=None, read: Reader | None = None
) -> Parsed:
    """`split/class/image` or `class/image`: the folder names the class. A classes.txt, or a
    data.yaml `names` list, gives the classes and their order; folders it does not name come
    after its classes, said in a note."""
    names = list(classes)
    notes: list[str] = []
    parsed_images: dict[str, ParsedImage] = {}
    skipped: list[tuple[str, str, str]] = []
    listed = None
    if data_yaml is not None:
        try:
            listed = (data_yaml[0], _names_from_yaml(data_yaml[1]))
        except LabelFileError as e:
            skipped.append((data_yaml[0], str(e), SKIP_LABEL_FILE))
    if listed is None and read is not None:
        listed = class_list_file(txts, read)
    if listed is not None:
        names = list(listed[1])
        notes.append(f"class order read from {listed[0]} ({len(names)} classes)")
    found: dict[str, str] = {}
    for image in images:
        parts = image.split("/")
        dirs = [p for p in parts[:-1] if p.lower() not in SPLIT_NAMES]
        if not dirs:
            skipped.append(
                (image, "not inside a class folder (expected split/class/image)", SKIP_IMAGE)
            )
            continue
        found[image] = dirs[-1]
    extra = sorted(set(found.values()) - set(names))
    if listed is not None and extra:
        notes.append(
            f"{len(extra)} class folders not in {listed[0]} added after its classes: "
            + ", ".join(extra[:10])
        )
    names += extra
    for image, cls_name in found.items():
        parsed_images[image] = ParsedImage(
            image, split_from_path(image), [ParsedLabel(names.index(cls_name), LabelKind.TAG, [])]
        )
    return Parsed(
        format="classification-folders",
        class_names=names,
        images=parsed_images,
        skipped=skipped,
        task=Task.CLASSIFY,
        notes=notes,
    )
