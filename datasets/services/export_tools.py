"""Export a dataset, or one frozen version of it, in a labelling tool's own format, so a team
can send its images back to the tool it labels in: CVAT for images 1.1 (XML) and Label Studio
JSON.

Both read the manifest as export.py's formats do, and write each label in the shape its task
trains on, chosen as the YOLO export chooses it (export.py's `_yolo_values`): a polygon in a
detect dataset goes as its box, a box in a segment dataset as its rectangle, and a shape the
task cannot hold (a box in a pose dataset) is left out. Images are named as in the other
exports (the names they came with, made safe and unique: export.py's `_image_names`).

CVAT: a project export as CVAT writes one (cvat/apps/dataset_manager/formats/cvat.py,
`dump_as_cvat_annotation` with ProjectData; bindings.py for the meta), because only a project
export carries each image's subset: one task per split (Train, Validation, Test, the names
CVAT's task form offers), images in images/<subset>/<file>, coordinates in pixels with two
decimals. Boxes are <box>, oriented boxes <box rotation> (clockwise degrees about the box's
centre), polygons <polygon>, keypoints a <skeleton> of <points> named 1..k (a skeleton label
with k sublabels in the meta; absent points outside="1", occluded ones occluded="1"), image
classes <tag>. A CVAT skeleton has no box, so a pose label's box is not in this export.

Label Studio: the JSON export (a list of tasks), images in images/<split>/<file> and each task's
data.image at /data/upload/1/<file>, where Label Studio keeps uploaded files. Regions are in
percent of the image: rectanglelabels (rotation in clockwise degrees about the top-left
corner, label_studio_sdk/converter/utils.py::convert_annotation_to_yolo_obb), polygonlabels,
keypointlabels (one region per keypoint, named kp0..kp<k-1> as in the COCO export, each with
the parentID of its object's rectangle) and choices for image classes. Control tags are named
"label" (rectangles, polygons), "keypoint" and "choice", all pointing at the object "image".
"""

import json
import math
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO
from xml.sax.saxutils import escape, quoteattr

from core.errors import ServiceError
from datasets.models import PIXEL_TASKS, LabelKind, Split, Task


@dataclass(frozen=True)
class ExportHelpers:
    """What these writers use of export.py, handed in by its export_run: importing export.py
    here would make an import cycle (tests/test_architecture.py)."""

    image_names: Callable[[list[dict]], list[str]]
    splits_present: Callable[[list[dict]], list[str]]
    write_blob: Callable[[zipfile.ZipFile, str, str], None]
    write_text: Callable[[zipfile.ZipFile, str, str], None]
    # (task, kind, data) → the numbers of the label in the shape its task trains on, or None
    task_values: Callable[[str, str, list[float]], list[float] | None]


CVAT_SUBSETS = {Split.TRAIN: "Train", Split.VAL: "Validation", Split.TEST: "Test"}
CVAT_LABEL_TYPES = {
    Task.DETECT: "rectangle",
    Task.OBB: "rectangle",
    Task.SEGMENT: "polygon",
    Task.POSE: "skeleton",
    Task.CLASSIFY: "tag",
}
# CVAT's meta gives every label a colour (#rrggbb); classes take these in turn.
CVAT_COLOURS = (
    "#33ddff", "#fa3253", "#34d1b7", "#ff007c", "#ff6037", "#ddff33", "#24b353", "#b83df5",
    "#66ff66", "#32b7fa", "#ffcc33", "#83e070", "#fafa37", "#5986b3", "#8c78f0", "#ff6a4d",
)  # fmt: skip
CVAT_XML_NAME = "annotations.xml"
LABEL_STUDIO_NAME = "tasks.json"
LABEL_STUDIO_UPLOADS = "/data/upload/1/"  # where Label Studio serves the files of project 1
LABEL_STUDIO_POINT_SIZE = 1.0  # a keypoint's drawn size, percent of the image width
_FLUSH_AT = 1 << 20


def _refuse_pixel_tasks(manifest: dict, tool: str) -> None:
    """Semantic masks and depth maps are per-pixel: these writers put shapes and tags, so a
    version of either task would leave the tool with bare images and no labels at all."""
    if manifest["task"] not in PIXEL_TASKS:
        return
    what = "depth maps" if manifest["task"] == Task.DEPTH else "semantic masks"
    raise ServiceError(
        f"The {tool} export has no place for {what} (it writes shapes and tags); export this "
        "dataset as YOLO (Ultralytics' masks/ or depth/ folders, which train as they are) or "
        "NDJSON."
    )


def _keypoint_dims(manifest: dict) -> tuple[int, int]:
    shape = manifest.get("keypoint_shape") or [0, 3]
    return int(shape[0]), int(shape[1])


def _keypoints(data: list[float], dims: int) -> Iterator[tuple[float, float, int]]:
    """(x, y, visibility) of each keypoint of a keypoints label, visibility 0 absent,
    1 occluded, 2 visible; with two numbers per point, a point at the origin is absent."""
    points = data[4:]
    for i in range(0, len(points) - dims + 1, dims):
        x, y = points[i], points[i + 1]
        v = int(points[i + 2]) if dims == 3 else (2 if (x or y) else 0)
        yield x, y, v


def _rotated_box(corners: list[float]) -> tuple[float, float, float, float, float, float, float]:
    """The rotated rectangle of four corners (pixels): its top-left corner, centre, width,
    height and clockwise angle in degrees, its width running from the first corner to the
    second. Four corners that are not a rectangle get the box around them turned as their
    first edge is (the nearest a rotated box comes to them)."""
    xs, ys = corners[0::2], corners[1::2]
    theta = math.atan2(ys[1] - ys[0], xs[1] - xs[0])
    c, s = math.cos(theta), math.sin(theta)
    # Each corner along the box's own axes: u along its first edge, v a quarter turn clockwise.
    us = [x * c + y * s for x, y in zip(xs, ys, strict=True)]
    vs = [-x * s + y * c for x, y in zip(xs, ys, strict=True)]
    u0, u1, v0, v1 = min(us), max(us), min(vs), max(vs)
    uc, vc = (u0 + u1) / 2, (v0 + v1) / 2
    degrees = math.degrees(theta) % 360
    return (
        u0 * c - v0 * s,
        u0 * s + v0 * c,
        uc * c - vc * s,
        uc * s + vc * c,
        u1 - u0,
        v1 - v0,
        0.0 if degrees >= 360 else degrees,
    )


def _task_shapes(
    task: str, labels: list[dict], helpers: ExportHelpers
) -> list[tuple[int, list[float]]]:
    """(class, numbers) of each label in the shape its task trains on, as the YOLO export
    writes them: a box (cx, cy, w, h), a polygon, four corners or keypoints."""
    shapes = []
    for lb in labels:
        values = helpers.task_values(task, lb["kind"], lb["data"])
        if values is not None:
            shapes.append((lb["class"], values))
    return shapes


def _tags(labels: list[dict]) -> list[int]:
    return sorted({lb["class"] for lb in labels if lb["kind"] == LabelKind.TAG})


# --- CVAT for images 1.1 ------------------------------------------------------------------------


def _px(value: float) -> str:
    return f"{round(value, 2) + 0.0:.2f}"  # + 0.0: never "-0.00"


class _XmlWriter:
    """Elements written as CVAT's XmlAnnotationWriter writes them (two-space indent, every
    element opened and closed on its own line, none self-closed), into a binary stream."""

    def __init__(self, out: IO[bytes]):
        self.out = out
        self.level = 0
        self.pending: list[str] = []
        self.size = 0

    def _write(self, text: str) -> None:
        self.pending.append(text)
        self.size += len(text)
        if self.size >= _FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        self.out.write("".join(self.pending).encode())
        self.pending.clear()
        self.size = 0

    def _indent(self) -> None:
        self._write("\n" + "  " * self.level)

    def start_document(self) -> None:
        self._write('<?xml version="1.0" encoding="utf-8"?>\n<annotations>')
        self.level = 1

    def end_document(self) -> None:
        self.level = 0
        self._indent()
        self._write("</annotations>\n")
        self.flush()

    def open(self, tag: str, attrs: dict[str, str] | None = None) -> None:
        self._indent()
        attributes = "".join(f" {k}={quoteattr(v)}" for k, v in (attrs or {}).items())
        self._write(f"<{tag}{attributes}>")
        self.level += 1

    def close(self, tag: str) -> None:
        self.level -= 1
        self._indent()
        self._write(f"</{tag}>")

    def leaf(self, tag: str, text: str = "") -> None:
        self._indent()
        self._write(f"<{tag}>{escape(text)}</{tag}>")

    def empty(self, tag: str, attrs: dict[str, str] | None = None) -> None:
        self.open(tag, attrs)
        self.close(tag)


def _skeleton_svg(points: int) -> str:
    """CVAT's drawing of a skeleton label: one node per keypoint, on a circle (Kestrel keeps no
    edges between keypoints). CVAT reads the sublabel names from data-label-name."""
    nodes = []
    for i in range(points):
        angle = 2 * math.pi * i / max(points, 1)
        cx, cy = 50 + 40 * math.sin(angle), 50 - 40 * math.cos(angle)
        nodes.append(
            f'<circle r="1.5" stroke="black" fill="#b3b3b3" cx="{cx:.3f}" cy="{cy:.3f}" '
            f'stroke-width="0.1" data-type="element node" data-element-id="{i + 1}" '
            f'data-node-id="{i + 1}" data-label-name="{i + 1}"></circle>'
        )
    return "".join(nodes)


def _cvat_label(xml: _XmlWriter, name: str, colour: str, kind: str, *, parent="", svg="") -> None:
    xml.open("label")
    xml.leaf("name", name)
    xml.leaf("color", colour)
    xml.leaf("type", kind)
    xml.empty("attributes")
    if parent:
        xml.leaf("parent", parent)
    if svg:
        xml.leaf("svg", svg)
    xml.close("label")


def _cvat_meta(xml: _XmlWriter, manifest: dict, counts: dict[str, int]) -> None:
    task = manifest["task"]
    points, _ = _keypoint_dims(manifest)
    xml.open("meta")
    xml.open("project")
    xml.leaf("id", "1")
    xml.leaf("name", manifest["dataset"])
    xml.leaf("bugtracker")
    xml.open("tasks")
    for task_id, (split, size) in enumerate(counts.items(), start=1):
        xml.open("task")
        xml.leaf("id", str(task_id))
        xml.leaf("name", f"{manifest['dataset']} ({CVAT_SUBSETS[split]})")
        xml.leaf("size", str(size))
        xml.leaf("mode", "annotation")
        xml.leaf("overlap", "0")
        xml.leaf("bugtracker")
        xml.leaf("subset", CVAT_SUBSETS[split])
        xml.leaf("start_frame", "0")
        xml.leaf("stop_frame", str(size - 1))
        xml.leaf("frame_filter")
        xml.leaf("owner")
        xml.leaf("assignee")
        xml.close("task")
    xml.close("tasks")
    xml.leaf("subsets", "\n".join(CVAT_SUBSETS[split] for split in counts))
    xml.leaf("owner")
    xml.leaf("assignee")
    xml.open("labels")
    for i, name in enumerate(manifest["classes"]):
        colour = CVAT_COLOURS[i % len(CVAT_COLOURS)]
        svg = _skeleton_svg(points) if task == Task.POSE else ""
        _cvat_label(xml, name, colour, CVAT_LABEL_TYPES[task], svg=svg)
        if task == Task.POSE:
            for k in range(points):
                _cvat_label(xml, str(k + 1), "#b3b3b3", "points", parent=name)
    xml.close("labels")
    xml.close("project")
    xml.close("meta")


def _cvat_shapes(
    xml: _XmlWriter, task: str, img: dict, shapes: list, names: list[str], dims: int
) -> None:
    width, height = img["width"], img["height"]
    for cls, values in shapes:
        label = {"label": names[cls], "source": "manual"}
        if task == Task.DETECT:
            cx, cy, w, h = values
            box = {"xtl": cx - w / 2, "ytl": cy - h / 2, "xbr": cx + w / 2, "ybr": cy + h / 2}
            px = {k: _px(v * (width if k[0] == "x" else height)) for k, v in box.items()}
            xml.empty("box", {**label, "occluded": "0", **px, "z_order": "0"})
        elif task == Task.OBB:
            corners = [v * (width if i % 2 == 0 else height) for i, v in enumerate(values)]
            _, _, cx, cy, w, h, degrees = _rotated_box(corners)
            attrs = {
                **label,
                "occluded": "0",
                "xtl": _px(cx - w / 2),
                "ytl": _px(cy - h / 2),
                "xbr": _px(cx + w / 2),
                "ybr": _px(cy + h / 2),
            }
            rotation = _px(degrees)
            if rotation not in ("0.00", "360.00"):  # CVAT leaves out a rotation of 0
                attrs["rotation"] = rotation
            xml.empty("box", {**attrs, "z_order": "0"})
        elif task == Task.SEGMENT:
            points = ";".join(
                f"{_px(x * width)},{_px(y * height)}"
                for x, y in zip(values[0::2], values[1::2], strict=True)
            )
            xml.empty("polygon", {**label, "occluded": "0", "points": points, "z_order": "0"})
        elif task == Task.POSE:
            xml.open("skeleton", {**label, "z_order": "0"})
            for k, (x, y, v) in enumerate(_keypoints(values, dims), start=1):
                xml.empty(
                    "points",
                    {
                        "label": str(k),
                        "source": "manual",
                        "outside": "1" if v == 0 else "0",
                        "occluded": "1" if v == 1 else "0",
                        "points": f"{_px(x * width)},{_px(y * height)}",
                    },
                )
            xml.close("skeleton")
    if task == Task.CLASSIFY:
        for cls in _tags(img["labels"]):
            xml.empty("tag", {"label": names[cls], "source": "manual"})


def cvat_write(zf: zipfile.ZipFile, manifest: dict, helpers: ExportHelpers) -> None:
    """annotations.xml and images/<subset>/<file>."""
    _refuse_pixel_tasks(manifest, "CVAT")
    images, task, classes = manifest["images"], manifest["task"], manifest["classes"]
    _, dims = _keypoint_dims(manifest)
    names = helpers.image_names(images)
    splits = helpers.splits_present(images)
    counts = {split: sum(1 for img in images if img["split"] == split) for split in splits}
    info = zipfile.ZipInfo(CVAT_XML_NAME, date_time=(2000, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    with zf.open(info, "w", force_zip64=True) as out:
        xml = _XmlWriter(out)
        xml.start_document()
        xml.leaf("version", "1.1")
        _cvat_meta(xml, manifest, counts)
        frame = 0
        for task_id, split in enumerate(splits, start=1):
            for img, name in zip(images, names, strict=True):
                if img["split"] != split:
                    continue
                attrs = {
                    "id": str(frame),
                    "name": name,
                    "subset": CVAT_SUBSETS[split],
                    "task_id": str(task_id),
                    "width": str(img["width"]),
                    "height": str(img["height"]),
                }
                frame += 1
                xml.open("image", attrs)
                shapes = _task_shapes(task, img["labels"], helpers)
                _cvat_shapes(xml, task, img, shapes, classes, dims)
                xml.close("image")
        xml.end_document()
    for img, name in zip(images, names, strict=True):
        helpers.write_blob(zf, f"images/{CVAT_SUBSETS[img['split']]}/{name}", img["sha256"])


# --- Label Studio JSON --------------------------------------------------------------------------


def _ls_region(kind: str, value: dict, region_id: str, img: dict, from_name: str) -> dict:
    return {
        "original_width": img["width"],
        "original_height": img["height"],
        "image_rotation": 0,
        "value": value,
        "id": region_id,
        "from_name": from_name,
        "to_name": "image",
        "type": kind,
        "origin": "manual",
    }


def _ls_results(
    task: str, img: dict, shapes: list, classes: list[str], dims: int, key: str
) -> list[dict]:
    results: list[dict] = []
    width, height = img["width"], img["height"]

    def region_id() -> str:
        return f"{key}-{len(results) + 1}"

    for cls, values in shapes:
        name = classes[cls]
        if task in (Task.DETECT, Task.POSE):
            cx, cy, w, h = values[:4]
            value = {
                "x": (cx - w / 2) * 100,
                "y": (cy - h / 2) * 100,
                "width": w * 100,
                "height": h * 100,
                "rotation": 0,
                "rectanglelabels": [name],
            }
            parent = region_id()
            results.append(_ls_region("rectanglelabels", value, parent, img, "label"))
            if task == Task.POSE:
                for k, (x, y, v) in enumerate(_keypoints(values, dims)):
                    if v == 0:
                        continue  # absent: Label Studio has no region for it
                    point = {
                        "x": x * 100,
                        "y": y * 100,
                        "width": LABEL_STUDIO_POINT_SIZE,
                        "keypointlabels": [f"kp{k}"],
                    }
                    if v == 1:
                        # As label_studio_sdk's COCO import marks a keypoint not seen.
                        point["hidden"] = True
                    region = _ls_region("keypointlabels", point, region_id(), img, "keypoint")
                    region["parentID"] = parent
                    results.append(region)
        elif task == Task.OBB:
            corners = [v * (width if i % 2 == 0 else height) for i, v in enumerate(values)]
            x, y, _, _, w, h, degrees = _rotated_box(corners)
            value = {
                "x": x / width * 100,
                "y": y / height * 100,
                "width": w / width * 100,
                "height": h / height * 100,
                "rotation": degrees,
                "rectanglelabels": [name],
            }
            results.append(_ls_region("rectanglelabels", value, region_id(), img, "label"))
        elif task == Task.SEGMENT:
            value = {
                "points": [
                    [x * 100, y * 100] for x, y in zip(values[0::2], values[1::2], strict=True)
                ],
                "closed": True,
                "polygonlabels": [name],
            }
            results.append(_ls_region("polygonlabels", value, region_id(), img, "label"))
    if task == Task.CLASSIFY:
        tags = _tags(img["labels"])
        if tags:
            results.append(
                {
                    "value": {"choices": [classes[c] for c in tags]},
                    "id": region_id(),
                    "from_name": "choice",
                    "to_name": "image",
                    "type": "choices",
                    "origin": "manual",
                }
            )
    return results


def label_studio_tasks(manifest: dict, names: list[str], helpers: ExportHelpers) -> list[dict]:
    """The manifest as Label Studio's JSON export: one task per image, its labels as one
    annotation (none for an image without labels)."""
    task, classes = manifest["task"], manifest["classes"]
    _, dims = _keypoint_dims(manifest)
    tasks = []
    for n, (img, name) in enumerate(zip(manifest["images"], names, strict=True), start=1):
        shapes = _task_shapes(task, img["labels"], helpers)
        results = _ls_results(task, img, shapes, classes, dims, key=f"k{n}")
        annotations = []
        if results:
            annotations.append(
                {
                    "id": n,
                    "result": results,
                    "was_cancelled": False,
                    "ground_truth": False,
                    "task": n,
                }
            )
        tasks.append(
            {
                "id": n,
                "annotations": annotations,
                "file_upload": name,
                "drafts": [],
                "predictions": [],
                "data": {"image": LABEL_STUDIO_UPLOADS + name},
                "meta": {},
                "project": 1,
            }
        )
    return tasks


def label_studio_write(zf: zipfile.ZipFile, manifest: dict, helpers: ExportHelpers) -> None:
    """tasks.json and images/<split>/<file>."""
    _refuse_pixel_tasks(manifest, "Label Studio")
    names = helpers.image_names(manifest["images"])
    tasks = label_studio_tasks(manifest, names, helpers)
    helpers.write_text(zf, LABEL_STUDIO_NAME, json.dumps(tasks))
    for img, name in zip(manifest["images"], names, strict=True):
        helpers.write_blob(zf, f"images/{img['split']}/{name}", img["sha256"])


WRITERS: dict[str, Callable[[zipfile.ZipFile, dict, ExportHelpers], None]] = {
    "cvat": cvat_write,
    "label-studio": label_studio_write,
}
