"""Layouts other tools export, read into formats.py's neutral `Parsed`.

CVAT's "YOLO 1.1", LabelMe's one JSON per image, and the Ultralytics NDJSON dataset (the
Ultralytics Platform's format, read as ultralytics/data/converter.py::convert_ndjson_to_yolo
reads it). As in formats.py, parsers see entry names and a reader for small files only.
"""

import json
import posixpath

from datasets.models import LabelKind, Split, Task
from datasets.services.formats import (
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
    _clip,
    _finite,
    _in_unit,
    _poly_to_box,
    _text,
    _yolo_labels,
    class_list_file,
    split_from_path,
    yolo_line,
)

# --- CVAT "YOLO 1.1" ----------------------------------------------------------------------------

CVAT_FOLDERS = {
    "obj_train_data": Split.TRAIN.value,
    "obj_valid_data": Split.VAL.value,
    "obj_val_data": Split.VAL.value,
    "obj_test_data": Split.TEST.value,
}
CVAT_LISTS = {"train.txt": Split.TRAIN.value, "valid.txt": Split.VAL.value,
              "val.txt": Split.VAL.value, "test.txt": Split.TEST.value}  # fmt: skip


def cvat_root(names: list[str], read: Reader) -> str | None:
    """The folder of a CVAT YOLO 1.1 export (the one holding obj.names and obj_train_data/)."""
    for name in sorted(names, key=lambda n: (n.count("/"), n)):
        parts = name.split("/")
        if parts[-1].lower() in ("obj.names", "obj.data"):
            return "/".join(parts[:-1]) + "/" if len(parts) > 1 else ""
        for i, part in enumerate(parts[:-1]):
            if part.lower() in CVAT_FOLDERS:
                return "/".join(parts[:i]) + "/" if i else ""
    return None


def _try_read(read: Reader, name: str, limit: int) -> str | None:
    try:
        return _text(read, name, limit)
    except (KeyError, LabelFileError):
        return None


def parse_cvat(images, txts, root: str, read: Reader, *, task: str, classes: list[str]) -> Parsed:
    """obj.names (class names, one a line), train.txt / valid.txt (the images of each split, as
    data/obj_train_data/x.jpg), and each image's .txt beside it in obj_<split>_data/."""
    skipped: list[tuple[str, str, str]] = []
    notes: list[str] = []
    names = list(classes)
    text = _try_read(read, f"{root}obj.names", MAX_LABEL_FILE_BYTES)
    listed = (
        (f"{root}obj.names", [ln.strip() for ln in text.splitlines() if ln.strip()])
        if text is not None
        else class_list_file(txts, read, near=root)
    )
    if listed is not None:
        names = listed[1]
        notes.append(f"class names read from {listed[0]} ({len(names)} classes)")
    image_set = set(images)
    by_suffix: dict[str, str] = {}
    for image in images:
        by_suffix.setdefault(image[len(root) :].lower(), image)
    list_split: dict[str, str] = {}
    list_files = set()
    for txt in txts:
        base = posixpath.basename(txt).lower()
        if posixpath.dirname(txt) + "/" not in (root, "/") or base not in CVAT_LISTS:
            continue
        list_files.add(txt)
        body = _try_read(read, txt, MAX_META_FILE_BYTES) or ""
        count = 0
        for line in body.splitlines():
            entry = line.strip().replace("\\", "/")
            if not entry:
                continue
            rel = entry[5:] if entry.startswith("data/") else entry
            image = by_suffix.get(rel.lower())
            if image is None:
                skipped.append((entry[:200], f"listed in {txt} but not uploaded", SKIP_NO_IMAGE))
                continue
            list_split[image] = CVAT_LISTS[base]
            count += 1
        notes.append(f"{count} images put in {CVAT_LISTS[base]} by {txt}")
    label_files = set(txts)
    used: set[str] = set()
    parsed_images: dict[str, ParsedImage] = {}
    label_counts: dict[str, int] = {}
    paired = 0
    for image in images:
        folder_split = next(
            (s for p in image.lower().split("/")[:-1] if (s := CVAT_FOLDERS.get(p))), None
        )
        split = list_split.get(image) or folder_split or split_from_path(image)
        entry = ParsedImage(image, split)
        beside = image.rsplit(".", 1)[0] + ".txt"
        if beside in label_files:
            used.add(beside)
            paired += 1
            entry.labels = _yolo_labels(
                read,
                beside,
                task=task or Task.DETECT,
                names=names,
                kpt_shape=None,
                skipped=skipped,
            )
            label_counts[beside] = len(entry.labels)
        parsed_images[image] = entry
    notes.insert(0, f"CVAT YOLO 1.1 export: {paired} label files read beside their images")
    if not names:
        top = max((lb.cls for e in parsed_images.values() for lb in e.labels), default=-1)
        names = [f"class{i}" for i in range(top + 1)]
    image_stems = {i.rsplit(".", 1)[0] for i in image_set}
    for txt in sorted(label_files - used - list_files):
        if listed is not None and txt == listed[0]:
            continue
        if any(p.lower() in CVAT_FOLDERS for p in txt.split("/")[:-1]):
            skipped.append((txt, "label file without a matching image", SKIP_NO_IMAGE))
        elif txt.rsplit(".", 1)[0] not in image_stems:
            skipped.append((txt, "not read: not part of a CVAT YOLO 1.1 export", SKIP_FILE))
    return Parsed(
        format="cvat-yolo",
        class_names=names,
        images=parsed_images,
        skipped=skipped,
        notes=notes,
        label_counts=label_counts,
    )


# --- LabelMe --------------------------------------------------------------------------------------


def is_labelme(name: str, read: Reader) -> bool:
    try:
        data = read(name, MAX_META_FILE_BYTES)
    except (KeyError, LabelFileError):
        return False
    # LabelMe writes version, flags, shapes, then imagePath (after shapes of any length).
    return b'"shapes"' in data[:4096] and b'"imagePath"' in data


def _labelme_image(json_name: str, doc: dict, images: list[str], by_base: dict) -> str | None:
    folder = posixpath.dirname(json_name)
    path = str(doc.get("imagePath") or "").replace("\\", "/")
    if path:
        exact = posixpath.normpath(posixpath.join(folder, path)).lstrip("/")
        if exact in by_base["__all__"]:
            return exact
        same = by_base.get(posixpath.basename(path).lower(), [])
        if len(same) == 1:
            return same[0]
        near = [i for i in same if posixpath.dirname(i) == folder]
        if len(near) == 1:
            return near[0]
    beside = by_base["__stems__"].get(json_name.rsplit(".", 1)[0].lower(), [])
    return beside[0] if len(beside) == 1 else None


def parse_labelme(
    images, jsons, read: Reader, *, task: str, classes: list[str], unread=()
) -> Parsed:
    """One LabelMe JSON per image: `shapes` (rectangle → box, polygon → polygon; a polygon is a
    box for tasks other than segment, as Ultralytics reads one), drawn in pixels of an image of
    imageWidth × imageHeight."""
    skipped: list[tuple[str, str, str]] = [
        (n, "not read: no layout Kestrel knows puts labels here", SKIP_LABEL_FILE) for n in unread
    ]
    by_base: dict = {"__all__": set(images), "__stems__": {}}
    for image in images:
        by_base.setdefault(posixpath.basename(image).lower(), []).append(image)
        by_base["__stems__"].setdefault(image.rsplit(".", 1)[0].lower(), []).append(image)
    parsed_images = {p: ParsedImage(p, split_from_path(p)) for p in images}
    raw: list[tuple[str, str, str, list[float], str]] = []
    label_counts: dict[str, int] = {}
    read_files = 0
    for json_name in sorted(jsons):
        try:
            doc = json.loads(_text(read, json_name, MAX_META_FILE_BYTES))
        except (LabelFileError, json.JSONDecodeError) as e:
            skipped.append((json_name, f"unreadable JSON ({e})", SKIP_LABEL_FILE))
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("shapes"), list):
            skipped.append((json_name, "not a LabelMe file (no shapes list)", SKIP_LABEL_FILE))
            continue
        image = _labelme_image(json_name, doc, images, by_base)
        if image is None:
            what = doc.get("imagePath") or "its image"
            skipped.append((json_name, f"{str(what)[:100]} is not in the upload", SKIP_NO_IMAGE))
            continue
        w, h = doc.get("imageWidth"), doc.get("imageHeight")
        if not (isinstance(w, int) and isinstance(h, int) and w > 0 and h > 0):
            skipped.append((json_name, "no valid imageWidth/imageHeight", SKIP_LABEL_FILE))
            continue
        parsed_images[image].declared_size = (w, h)
        label_counts[json_name] = 0
        read_files += 1
        for n, shape in enumerate(doc["shapes"], 1):
            where = f"{json_name} shape {n}"
            if not isinstance(shape, dict):
                skipped.append((where, "not a shape", SKIP_LABEL))
                continue
            label = str(shape.get("label") or "").strip()
            kind = shape.get("shape_type") or "polygon"
            try:
                points = [
                    v for p in shape.get("points") or [] for v in _finite([str(c) for c in p])
                ]
            except (ValueError, TypeError) as e:
                skipped.append((where, f"label {e}", SKIP_LABEL))
                continue
            if not label:
                skipped.append((where, "a shape without a label", SKIP_LABEL))
                continue
            if kind not in ("rectangle", "polygon"):
                skipped.append((where, f"{kind} shapes are not imported", SKIP_LABEL))
                continue
            norm = [v / (w if i % 2 == 0 else h) for i, v in enumerate(points)]
            if kind == "rectangle" and len(norm) != 4:
                skipped.append((where, "a rectangle needs 2 points", SKIP_LABEL))
                continue
            if kind == "polygon" and (len(norm) < 6 or len(norm) % 2):
                skipped.append((where, "a polygon needs 3 points or more", SKIP_LABEL))
                continue
            if not _in_unit(norm):
                skipped.append((where, f"{kind} of {label[:40]!r} outside the image", SKIP_LABEL))
                continue
            raw.append((image, label, kind, _clip(norm), json_name))
    names = list(classes)
    for name in sorted({r[1] for r in raw}):
        if name not in names:
            names.append(name)
    for image, label, kind, xy, json_name in raw:
        box = _poly_to_box(xy)
        if box[2] <= 0 or box[3] <= 0:
            skipped.append((image, f"{kind} of {label[:40]!r}: zero-area box", SKIP_LABEL))
            continue
        if kind == "polygon" and task == Task.SEGMENT:
            parsed = ParsedLabel(names.index(label), LabelKind.POLYGON, xy)
        else:
            parsed = ParsedLabel(names.index(label), LabelKind.BOX, box)
        parsed_images[image].labels.append(parsed)
        label_counts[json_name] += 1
    return Parsed(
        format="labelme",
        label_counts=label_counts,
        class_names=names,
        images=parsed_images,
        skipped=skipped,
        notes=[f"{read_files} LabelMe files read, each paired with the image its imagePath names"],
    )


# --- Ultralytics NDJSON ---------------------------------------------------------------------------

NDJSON_KEYS = {  # the annotation key Kestrel writes per task; on reading, any key is taken
    Task.DETECT: "boxes",
    Task.SEGMENT: "segments",
    Task.POSE: "pose",
    Task.OBB: "obb",
    Task.CLASSIFY: "classification",
}


def _kpt_shape(records: list[dict]) -> list[int] | None:
    """As ultralytics' _infer_ndjson_kpt_shape: the keypoint values after class + box."""
    lengths, samples = [], []
    for r in records:
        anns = r.get("annotations") if isinstance(r.get("annotations"), dict) else {}
        for ann in anns.get("pose", []) if isinstance(anns.get("pose"), list) else []:
            if isinstance(ann, list) and len(ann) > 5:
                lengths.append(len(ann) - 5)
                samples.append(ann[5:])
    if not lengths or len(set(lengths)) != 1:
        return None
    n = lengths[0]
    if n % 3 == 0 and all(v in (0, 1, 2) for s in samples for v in s[2::3]):
        return [n // 3, 3]
    if n % 2 == 0 and n % 3 != 0:
        return [n // 2, 2]
    return None


def parse_ndjson(
    images, ndjsons, names_all, read: Reader, *, task: str, classes: list[str]
) -> Parsed:
    """First line the dataset (task, class_names {id: name}, optionally path and kpt_shape),
    then one image a line: split, file, optional url, annotations {key: [[class, values...]]}.
    A local dataset's image is at <path>/images/<split>/<file> (Ultralytics' rule); a record
    whose file is not inside the upload is listed, and its URL is never fetched."""
    skipped: list[tuple[str, str, str]] = []
    notes: list[str] = []
    source = sorted(ndjsons, key=lambda n: (n.count("/"), n))[0]
    for other in ndjsons:
        if other != source:
            skipped.append((other, f"not read: one NDJSON dataset per upload ({source})",
                            SKIP_LABEL_FILE))  # fmt: skip
    try:
        lines = _text(read, source, MAX_META_FILE_BYTES).splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
    except (LabelFileError, json.JSONDecodeError) as e:
        skipped.append((source, f"unreadable NDJSON ({e})", SKIP_LABEL_FILE))
        records = []
    head = records[0] if records and isinstance(records[0], dict) else {}
    rows = [r for r in records[1:] if isinstance(r, dict)]
    raw_names = head.get("class_names") if isinstance(head.get("class_names"), dict) else {}
    try:
        keyed = {int(k): str(v) for k, v in raw_names.items()}
    except (TypeError, ValueError):
        skipped.append((source, "class_names keys must be class ids", SKIP_LABEL_FILE))
        keyed = {}
    names = [keyed.get(i, f"class{i}") for i in range(max(keyed) + 1)] if keyed else []
    names = names or list(classes)
    ds_task = str(head.get("task") or Task.DETECT)
    effective = task or ds_task
    kpt = head.get("kpt_shape")
    kpt_shape = kpt if isinstance(kpt, list) and len(kpt) == 2 else None
    if effective == Task.POSE and kpt_shape is None:
        kpt_shape = _kpt_shape(rows)
    base = posixpath.dirname(source)
    root = head.get("path") if isinstance(head.get("path"), str) else None
    image_set = set(images)
    by_base: dict[str, list[str]] = {}
    for image in images:
        by_base.setdefault(posixpath.basename(image).lower(), []).append(image)
    parsed_images: dict[str, ParsedImage] = {}
    for n, r in enumerate(rows, 2):
        where = f"{source}:{n}"
        file = r.get("file")
        split = SPLIT_NAMES.get(str(r.get("split", "")).lower())
        if not isinstance(file, str) or not file:
            skipped.append((where, "an image line without a file name", SKIP_LABEL))
            continue
        file = file.replace("\\", "/")
        tries = []
        if root is not None and split:
            tries.append(posixpath.join(base, root, "images", str(r.get("split")), file))
        tries += [
            posixpath.join(base, file),
            posixpath.join(base, "images", str(r.get("split")), file),
        ]
        tries = [posixpath.normpath(t).lstrip("/") for t in tries]
        image = next((t for t in tries if t in image_set), None)
        if image is None:
            same = by_base.get(posixpath.basename(file).lower(), [])
            image = same[0] if len(same) == 1 else None
        if image is None:
            reason = (
                "not in the upload: its URL is not fetched (put the image in the archive)"
                if r.get("url")
                else "not in the upload"
            )
            skipped.append((f"{where} {file[:200]}", reason, SKIP_NO_IMAGE))
            continue
        if split is None:
            skipped.append((image, f"split {str(r.get('split'))[:20]!r} is not train, val or test",
                            SKIP_IMAGE))  # fmt: skip
            continue
        entry = parsed_images.setdefault(image, ParsedImage(image, split))
        annotations = r.get("annotations") if isinstance(r.get("annotations"), dict) else {}
        for key, values in annotations.items():
            for m, ann in enumerate(values if isinstance(values, list) else [], 1):
                here = f"{where} {key} {m}"
                try:
                    if key == "classification":
                        cls = int(ann)
                        if cls < 0 or (names and cls >= len(names)):
                            raise ValueError(f"class id {cls} out of range")
                        entry.labels.append(ParsedLabel(cls, LabelKind.TAG, []))
                        continue
                    if effective == Task.CLASSIFY:
                        raise ValueError(f"{key} annotations in a classification dataset")
                    if not isinstance(ann, list):
                        raise ValueError("not a list of numbers")
                    entry.labels.append(
                        yolo_line(
                            " ".join(str(v) for v in ann),
                            task=effective,
                            n_classes=len(names) if names else 10**6,
                            kpt_shape=kpt_shape,
                        )
                    )
                except (ValueError, TypeError) as e:
                    skipped.append((here, f"label {e}", SKIP_LABEL))
    unlisted = [i for i in images if i not in parsed_images]
    for image in unlisted:
        parsed_images[image] = ParsedImage(image, split_from_path(image))
    notes.append(f"{len(rows)} image lines read from {source}")
    label_counts = {source: sum(len(e.labels) for e in parsed_images.values())}
    if unlisted:
        notes.append(f"{len(unlisted)} images not named in {source} imported without labels")
    if not names:
        top = max((lb.cls for e in parsed_images.values() for lb in e.labels), default=-1)
        names = [f"class{i}" for i in range(top + 1)]
    for other in names_all:
        low = other.lower()
        if other not in image_set and other not in ndjsons and low.endswith((".txt", ".json")):
            skipped.append((other, "not read: the NDJSON file holds the labels", SKIP_FILE))
    return Parsed(
        format="ndjson",
        class_names=names,
        images=parsed_images,
        skipped=skipped,
        task=ds_task if ds_task in Task.values else None,
        keypoint_shape=kpt_shape if effective == Task.POSE else None,
        notes=notes,
        label_counts=label_counts,
    )
