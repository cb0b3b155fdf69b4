"""Export a dataset, or exactly one version of it, as a YOLO, COCO or Ultralytics NDJSON zip
built in a temp file.

Both formats read a manifest (the live one for a dataset, the frozen one for a version), so a
version's export never changes when the dataset does. Image files inside the archive keep the
names they came with (made safe and unique: `_image_names`), their extension that of the bytes
stored.
"""

import json
import re
import shutil
import tempfile
import unicodedata
import zipfile
from collections.abc import Iterable, Iterator
from typing import IO

import yaml
from django.core.files.storage import default_storage

from core.errors import ServiceError
from datasets.models import PIXEL_TASKS, Blob, Dataset, DatasetVersion, LabelKind, Split, Task
from datasets.services.versions import manifest_build, version_manifest_load

FORMATS = ("yolo", "coco", "ndjson", "cvat", "label-studio")
EXTENSIONS = {
    "image/jpeg": ".jpg",
    "image/png": ".png",
    "image/webp": ".webp",
    "image/bmp": ".bmp",
    "image/tiff": ".tif",
}
_STEM_LENGTH = 16
_LOOKUP_BATCH = 1000
_COPY_CHUNK = 1 << 20


def _manifest_for(dataset: Dataset | None, version: DatasetVersion | None) -> dict:
    if (dataset is None) == (version is None):
        raise ValueError("Export either a dataset or a version.")
    if version is not None:
        return version_manifest_load(version)
    return manifest_build(dataset=dataset)


def export_filename(*, dataset: Dataset, fmt: str, version: DatasetVersion | None = None) -> str:
    """A download name made only of safe characters."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", dataset.name).strip("-.") or "dataset"
    suffix = f"-v{version.number}" if version is not None else ""
    return f"{stem[:60]}{suffix}-{fmt}.zip"


def _content_types(shas: list[str]) -> dict[str, str]:
    types: dict[str, str] = {}
    for start in range(0, len(shas), _LOOKUP_BATCH):
        batch = shas[start : start + _LOOKUP_BATCH]
        types.update(Blob.objects.filter(sha256__in=batch).values_list("sha256", "content_type"))
    return types


def _image_names(images: list[dict]) -> list[str]:
    """Each image's archive file name, in the manifest's order: the name it came with, so a
    team can match an export to its own files. Made safe as a file name (no folders, control
    characters or "..") with the extension of its stored content type, and unique within its
    split: labels, masks and depth maps are `<stem>.txt` / `<stem>.png` beside it and a team may
    unpack on a case-insensitive disk, so two stems that differ only in case or extension clash,
    and the later one (the manifest is sorted by hash: always the same) gets "-2", "-3"."""
    types = _content_types(list({img["sha256"] for img in images}))
    wanted = [_safe_image_name(img, types.get(img["sha256"], "")) for img in images]
    # Stems kept as they came are reserved first, so "a-2.jpg" keeps its name even where a
    # second "a.jpg" sorts before it.
    taken = {(img["split"], _stem_key(stem)) for img, (stem, _) in zip(images, wanted, strict=True)}
    seen: set[tuple[str, str]] = set()
    names = []
    for img, (stem, ext) in zip(images, wanted, strict=True):
        key = (img["split"], _stem_key(stem))
        if key in seen:
            n = 2
            while (img["split"], _stem_key(f"{stem}-{n}")) in taken:
                n += 1
            stem = f"{stem}-{n}"
            key = (img["split"], _stem_key(stem))
            taken.add(key)
        seen.add(key)
        names.append(stem + ext)
    return names


# Extensions that name each stored content type; the first is the one given to a name that has
# none of them (a PNG uploaded as "scan.jpg" is exported as "scan.png").
_TYPE_EXTENSIONS = {
    "image/jpeg": (".jpg", ".jpeg", ".jpe"),
    "image/png": (".png",),
    "image/webp": (".webp",),
    "image/bmp": (".bmp",),
    "image/tiff": (".tif", ".tiff"),
}
_IMAGE_EXTENSIONS = {ext for exts in _TYPE_EXTENSIONS.values() for ext in exts}
_UNSAFE = re.compile(r'[\x00-\x1f\x7f-\x9f<>:"/\\|?*\u200e\u200f\u202a-\u202e\u2066-\u2069]')
_WINDOWS_RESERVED = {"con", "prn", "aux", "nul"} | {
    f"{d}{i}" for d in ("com", "lpt") for i in range(10)
}
_STEM_BYTES = 150  # a file name's 255-byte limit, less room for "-123" and an extension


def _safe_image_name(img: dict, content_type: str) -> tuple[str, str]:
    """(stem, extension) of the name the image came with, safe on any disk."""
    name = unicodedata.normalize("NFC", str(img.get("filename") or ""))
    name = re.split(r"[/\\]", name)[-1]  # a folder in the name is never a folder in the export
    stem, dot, ext = name.rpartition(".")
    if not dot or f".{ext.lower()}" not in _IMAGE_EXTENSIONS:
        stem, ext = name, ""
    exts = _TYPE_EXTENSIONS.get(content_type, (".jpg",))
    extension = f".{ext}" if f".{ext.lower()}" in exts else exts[0]
    stem = _UNSAFE.sub("_", stem)
    stem = re.sub(r"\.{2,}", ".", stem).strip(" .")
    stem = stem.encode()[:_STEM_BYTES].decode(errors="ignore").rstrip(" .")
    if not stem:
        stem = img["sha256"][:_STEM_LENGTH]
    elif stem.lower() in _WINDOWS_RESERVED:
        stem += "_"
    return stem, extension


def _stem_key(stem: str) -> str:
    return stem.casefold()


def _num(value: float) -> str:
    return format(float(value), ".10g")


def _write_blob(zf: zipfile.ZipFile, arcname: str, sha256: str) -> None:
    key = Blob(sha256=sha256).storage_key
    info = zipfile.ZipInfo(arcname, date_time=(2000, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED  # images are compressed already
    with default_storage.open(key, "rb") as src, zf.open(info, "w", force_zip64=True) as dst:
        shutil.copyfileobj(src, dst, _COPY_CHUNK)


def _write_text(zf: zipfile.ZipFile, arcname: str, text: str) -> None:
    info = zipfile.ZipInfo(arcname, date_time=(2000, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, text)


def _splits_present(images: Iterable[dict]) -> list[str]:
    present = {img["split"] for img in images}
    return [s for s in Split.values if s in present]


# --- YOLO ---------------------------------------------------------------------------------------


def _box_of_points(points: list[float]) -> list[float]:
    xs, ys = points[0::2], points[1::2]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    return [(x0 + x1) / 2, (y0 + y1) / 2, x1 - x0, y1 - y0]


def _corners_of_box(box: list[float]) -> list[float]:
    cx, cy, w, h = box[:4]
    x0, y0, x1, y1 = cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2
    return [x0, y0, x1, y0, x1, y1, x0, y1]


def _yolo_values(task: str, kind: str, data: list[float]) -> list[float] | None:
    """The numbers after the class id in an Ultralytics label line, or None to leave it out.

    Shapes of another kind are converted where the task's format can hold them (a box becomes a
    rectangle polygon for segment), so every line of one file has the task's layout.
    """
    if task == Task.DETECT:
        if kind in (LabelKind.BOX, LabelKind.KEYPOINTS):
            return data[:4]
        if kind in (LabelKind.POLYGON, LabelKind.OBB) and len(data) >= 4:
            return _box_of_points(data)
    elif task == Task.SEGMENT:
        if kind == LabelKind.POLYGON:
            return data
        if kind == LabelKind.OBB:
            return data
        if kind in (LabelKind.BOX, LabelKind.KEYPOINTS):
            return _corners_of_box(data)
    elif task == Task.OBB:
        if kind == LabelKind.OBB:
            return data
        if kind in (LabelKind.BOX, LabelKind.KEYPOINTS):
            return _corners_of_box(data)
    elif task == Task.POSE:
        if kind == LabelKind.KEYPOINTS:
            return data
    return None


def _safe_folder(name: str, used: set[str]) -> str:
    folder = re.sub(r"[^\w .-]+", "_", name).strip(" .") or "class"
    base, n = folder, 2
    while folder.lower() in used:
        folder, n = f"{base}_{n}", n + 1
    used.add(folder.lower())
    return folder


def _data_yaml(manifest: dict, splits: list[str]) -> str:
    # No `path:` key: Ultralytics then resolves the folders next to this file. (`path: .` would
    # be taken relative to the working directory of whoever trains.)
    doc: dict = {}
    for split in ("train", "val", "test"):
        if split in splits:
            doc[split] = f"images/{split}"
    if "val" not in doc and "train" in doc:
        doc["val"] = "images/train"  # Ultralytics needs a val set; train stands in for it
    doc["names"] = dict(enumerate(manifest["classes"]))
    if manifest["task"] == Task.SEMANTIC:
        # PNG masks of class indexes (255 = ignore) under masks/, mirroring images/.
        doc["masks_dir"] = "masks"
    elif manifest["task"] == Task.DEPTH:
        # 16-bit PNGs under depth/, mirroring images/; this value is one metre.
        doc["names"] = {0: "depth"}
        doc["depth_scale"] = manifest.get("depth_scale") or 1000
    if manifest["task"] == Task.POSE and manifest.get("keypoint_shape"):
        doc["kpt_shape"] = list(manifest["keypoint_shape"])
    header = f"# {manifest['dataset']}: {manifest['task']} dataset exported by Kestrel\n"
    return header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


class ZipSink:
    """Where a YOLO layout is written: into a zip (an export) or a folder (a training run)."""

    def __init__(self, zf: zipfile.ZipFile):
        self.zf = zf

    def blob(self, arcname: str, sha256: str) -> None:
        _write_blob(self.zf, arcname, sha256)

    def text(self, arcname: str, text: str) -> None:
        _write_text(self.zf, arcname, text)


def yolo_layout_write(sink, manifest: dict) -> None:
    """The manifest as Ultralytics reads it: data.yaml, images/<split>/, labels/<split>/ (or
    images/<split>/<class>/ for classification), written through `sink`."""
    images = manifest["images"]
    task = manifest["task"]
    names = _image_names(images)
    splits = _splits_present(images)
    if task == Task.CLASSIFY:
        # Ultralytics reads a classification dataset from its folders alone (train/<class>/...
        # under images/) and numbers the classes by sorted folder name; no data.yaml.
        used: set[str] = set()
        folders = [_safe_folder(name, used) for name in manifest["classes"]]
        for img, name in zip(images, names, strict=True):
            tags = sorted(lb["class"] for lb in img["labels"] if lb["kind"] == LabelKind.TAG)
            if not tags:
                continue  # an image without a class has no folder to go in
            arc = f"images/{img['split']}/{folders[tags[0]]}/{name}"
            sink.blob(arc, img["sha256"])
        return
    sink.text("data.yaml", _data_yaml(manifest, splits))
    if task in PIXEL_TASKS:
        # Ultralytics pairs images/<split>/x.jpg with masks/<split>/x.png (semantic) or
        # depth/<split>/x.png (depth). An image without its map has nothing to learn from.
        folder = "masks" if task == Task.SEMANTIC else "depth"
        for img, name in zip(images, names, strict=True):
            if "mask" not in img:
                continue
            stem = name.rsplit(".", 1)[0]
            sink.blob(f"images/{img['split']}/{name}", img["sha256"])
            sink.blob(f"{folder}/{img['split']}/{stem}.png", img["mask"])
        return
    for img, name in zip(images, names, strict=True):
        stem = name.rsplit(".", 1)[0]
        sink.blob(f"images/{img['split']}/{name}", img["sha256"])
        lines = []
        for lb in img["labels"]:
            values = _yolo_values(task, lb["kind"], lb["data"])
            if values is not None:
                lines.append(" ".join([str(lb["class"]), *(_num(v) for v in values)]))
        sink.text(f"labels/{img['split']}/{stem}.txt", "".join(f"{ln}\n" for ln in lines))


def _yolo_write(zf: zipfile.ZipFile, manifest: dict) -> None:
    yolo_layout_write(ZipSink(zf), manifest)


# --- COCO ---------------------------------------------------------------------------------------


def _polygon_area(xs: list[float], ys: list[float]) -> float:
    n = len(xs)
    twice = sum(xs[i] * ys[(i + 1) % n] - xs[(i + 1) % n] * ys[i] for i in range(n))
    return abs(twice) / 2


def _coco_annotation(lb: dict, width: int, height: int, dims: int) -> dict | None:
    kind, data = lb["kind"], lb["data"]
    ann: dict = {"category_id": lb["class"] + 1, "iscrowd": 0}
    if kind in (LabelKind.BOX, LabelKind.KEYPOINTS):
        cx, cy, w, h = data[:4]
        ann["bbox"] = [(cx - w / 2) * width, (cy - h / 2) * height, w * width, h * height]
        ann["area"] = ann["bbox"][2] * ann["bbox"][3]
        if kind == LabelKind.KEYPOINTS:
            points = data[4:]
            keypoints = []
            for i in range(0, len(points), dims):
                x, y = points[i] * width, points[i + 1] * height
                v = points[i + 2] if dims == 3 else (2 if (points[i] or points[i + 1]) else 0)
                keypoints += [x, y, v]
            ann["keypoints"] = keypoints
            ann["num_keypoints"] = sum(1 for v in keypoints[2::3] if v > 0)
        return ann
    if kind in (LabelKind.POLYGON, LabelKind.OBB) and len(data) >= 6:
        xs = [x * width for x in data[0::2]]
        ys = [y * height for y in data[1::2]]
        ann["segmentation"] = [[v for pair in zip(xs, ys, strict=True) for v in pair]]
        x0, y0 = min(xs), min(ys)
        ann["bbox"] = [x0, y0, max(xs) - x0, max(ys) - y0]
        ann["area"] = _polygon_area(xs, ys)
        return ann
    return None


def _coco_documents(manifest: dict, names: list[str]) -> Iterator[tuple[str, dict]]:
    task = manifest["task"]
    shape = manifest.get("keypoint_shape") or [0, 3]
    points, dims = int(shape[0]), int(shape[1])
    categories = []
    for i, name in enumerate(manifest["classes"]):
        category = {"id": i + 1, "name": name, "supercategory": ""}
        if task == Task.POSE:
            category["keypoints"] = [f"kp{k}" for k in range(points)]
            category["skeleton"] = []
        categories.append(category)
    image_id = ann_id = 0
    for split in _splits_present(manifest["images"]):
        doc = {
            "info": {"description": f"{manifest['dataset']} ({task}), exported by Kestrel"},
            "images": [],
            "annotations": [],
            "categories": categories,
        }
        for img, name in zip(manifest["images"], names, strict=True):
            if img["split"] != split:
                continue
            image_id += 1
            doc["images"].append(
                {
                    "id": image_id,
                    "file_name": name,
                    "width": img["width"],
                    "height": img["height"],
                }
            )
            for lb in img["labels"]:
                ann = _coco_annotation(lb, img["width"], img["height"], dims)
                if ann is None:
                    continue
                ann_id += 1
                doc["annotations"].append({"id": ann_id, "image_id": image_id, **ann})
        yield split, doc


def _coco_write(zf: zipfile.ZipFile, manifest: dict) -> None:
    if manifest["task"] in PIXEL_TASKS:
        what = "depth maps" if manifest["task"] == Task.DEPTH else "semantic masks"
        raise ServiceError(
            f"COCO has no place for {what} (its annotations are shapes and instances); export "
            "this dataset as YOLO (Ultralytics' masks/ or depth/ folders, which train as they "
            "are) or NDJSON."
        )
    if manifest["task"] == Task.CLASSIFY:
        raise ServiceError(
            "COCO has no place for image classes; export a classification dataset as YOLO "
            "(one folder per class)."
        )
    names = _image_names(manifest["images"])
    for split, doc in _coco_documents(manifest, names):
        _write_text(zf, f"annotations/instances_{split}.json", json.dumps(doc))
    for img, name in zip(manifest["images"], names, strict=True):
        _write_blob(zf, f"images/{img['split']}/{name}", img["sha256"])


# --- Ultralytics NDJSON ---------------------------------------------------------------------------

NDJSON_NAME = "dataset.ndjson"
_NDJSON_KEYS = {
    Task.DETECT: "boxes",
    Task.SEGMENT: "segments",
    Task.POSE: "pose",
    Task.OBB: "obb",
}


def _ndjson_lines(manifest: dict, names: list[str]) -> Iterator[str]:
    """The Ultralytics Platform's dataset format, as ultralytics/data/converter.py reads it:
    the dataset line, then one line per image. `path: .` makes Ultralytics look for each image
    at images/<split>/<file> next to the NDJSON file, which is where this zip puts it."""
    task = manifest["task"]
    head: dict = {
        "type": "dataset",
        "task": task,
        "name": manifest["dataset"],
        "class_names": {str(i): n for i, n in enumerate(manifest["classes"])},
    }
    if task != Task.CLASSIFY:
        head["path"] = "."
    if task == Task.POSE and manifest.get("keypoint_shape"):
        head["kpt_shape"] = list(manifest["keypoint_shape"])
    if task == Task.DEPTH:
        head["depth_scale"] = manifest.get("depth_scale") or 1000
    yield json.dumps(head)
    for img, name in zip(manifest["images"], names, strict=True):
        if task in PIXEL_TASKS and "mask" not in img:
            continue  # nothing to learn from (as the YOLO layout, yolo_layout_write)
        record = {
            "type": "image",
            "file": name,
            "split": img["split"],
            "width": img["width"],
            "height": img["height"],
            "annotations": {} if task in PIXEL_TASKS else ndjson_annotations(task, img["labels"]),
        }
        if task in PIXEL_TASKS:
            record[_NDJSON_MAP_KEY[task]] = {"file": _map_name(name)}
        yield json.dumps(record)


# Where a semantic mask / depth map goes in an NDJSON record, and its folder in the zip.
# Depth is Ultralytics' own record shape (converter.py, `_convert_ndjson_to_yolo`): `depth` is
# an object beside the image and the dataset line carries `depth_scale`; the stock converter
# fetches `depth.url` into depth/<split>/<stem>.png, the same layout this zip holds, so a
# record served with URLs (a platform export) converts as it is, while this zip's records name
# their files (`depth.file`, under depth/<split>/). Semantic is this file's own extension:
# stock Ultralytics (8.4) has no NDJSON semantic record; its converter writes an empty label
# file per image and ignores `mask`, so train semantic models from the YOLO export (data.yaml
# with masks_dir), which stock `yolo` reads unchanged.
_NDJSON_MAP_KEY = {Task.SEMANTIC: "mask", Task.DEPTH: "depth"}
_NDJSON_MAP_FOLDER = {Task.SEMANTIC: "masks", Task.DEPTH: "depth"}


def _map_name(image_name: str) -> str:
    return image_name.rsplit(".", 1)[0] + ".png"


def ndjson_annotations(task: str, labels: list[dict]) -> dict:
    """An image's manifest labels as an NDJSON record's `annotations` (also the NDJSON that
    stock ultralytics downloads for a ul:// dataset, datasets/platform_export.py)."""
    if task == Task.CLASSIFY:
        tags = sorted(lb["class"] for lb in labels if lb["kind"] == LabelKind.TAG)
        return {"classification": tags[:1]} if tags else {}
    rows = []
    for lb in labels:
        values = _yolo_values(task, lb["kind"], lb["data"])
        if values is not None:
            rows.append([lb["class"], *(round(float(v), 10) for v in values)])
    return {_NDJSON_KEYS[task]: rows} if rows else {}


def _ndjson_write(zf: zipfile.ZipFile, manifest: dict) -> None:
    names = _image_names(manifest["images"])
    _write_text(zf, NDJSON_NAME, "".join(f"{line}\n" for line in _ndjson_lines(manifest, names)))
    task = manifest["task"]
    for img, name in zip(manifest["images"], names, strict=True):
        if task in PIXEL_TASKS:
            if "mask" not in img:
                continue
            folder = _NDJSON_MAP_FOLDER[task]
            _write_blob(zf, f"{folder}/{img['split']}/{_map_name(name)}", img["mask"])
        _write_blob(zf, f"images/{img['split']}/{name}", img["sha256"])


# --- entry points -------------------------------------------------------------------------------


def _export(writer, dataset: Dataset | None, version: DatasetVersion | None) -> IO[bytes]:
    manifest = _manifest_for(dataset, version)
    out = tempfile.TemporaryFile(suffix=".zip")  # noqa: SIM115 - handed to the caller open
    try:
        with zipfile.ZipFile(out, "w", allowZip64=True) as zf:
            writer(zf, manifest)
    except BaseException:
        out.close()
        raise
    out.seek(0)
    return out


def export_yolo(
    *, dataset: Dataset | None = None, version: DatasetVersion | None = None
) -> IO[bytes]:
    """An Ultralytics YOLO dataset zip, open at offset 0; closing it deletes it."""
    return _export(_yolo_write, dataset, version)


def export_coco(
    *, dataset: Dataset | None = None, version: DatasetVersion | None = None
) -> IO[bytes]:
    """A COCO zip (annotations/instances_<split>.json + images/<split>/), open at offset 0."""
    return _export(_coco_write, dataset, version)


def export_ndjson(
    *, dataset: Dataset | None = None, version: DatasetVersion | None = None
) -> IO[bytes]:
    """An Ultralytics NDJSON zip (dataset.ndjson + images/<split>/), open at offset 0."""
    return _export(_ndjson_write, dataset, version)


def export_formats(*, task: str) -> tuple[str, ...]:
    """The formats that can hold a dataset of `task`, in the order pages offer them: masks and
    depth maps go only where Ultralytics reads them (YOLO folders, NDJSON); COCO has no place
    for image classes. export_run refuses the others with the reason."""
    if task in PIXEL_TASKS:
        return ("yolo", "ndjson")
    if task == Task.CLASSIFY:
        return tuple(f for f in FORMATS if f != "coco")
    return FORMATS


def export_run(
    *, fmt: str, dataset: Dataset | None = None, version: DatasetVersion | None = None
) -> IO[bytes]:
    if fmt == "yolo":
        return export_yolo(dataset=dataset, version=version)
    if fmt == "coco":
        return export_coco(dataset=dataset, version=version)
    if fmt == "ndjson":
        return export_ndjson(dataset=dataset, version=version)
    if fmt in ("cvat", "label-studio"):
        # Labelling tools' formats: their writers take this module's helpers as arguments.
        from datasets.services.export_tools import WRITERS, ExportHelpers

        helpers = ExportHelpers(
            image_names=_image_names,
            splits_present=_splits_present,
            write_blob=_write_blob,
            write_text=_write_text,
            task_values=_yolo_values,
        )
        writer = WRITERS[fmt]
        return _export(lambda zf, manifest: writer(zf, manifest, helpers), dataset, version)
    raise ServiceError(
        f"Export formats are {', '.join(FORMATS[:-1])} and {FORMATS[-1]}, not “{fmt[:20]}”."
    )
