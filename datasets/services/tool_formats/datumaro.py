"""Datumaro's own export ("Datumaro 1.0", as Datumaro and CVAT write it).

annotations/<subset>.json: categories.label.labels (the classes; a skeleton's points name it
their parent), categories.points (keypoint names), and items with an id, an image (or media)
{path, size [h, w]} and annotations in pixels: label, bbox (a rotation attribute turns it),
polygon, polyline, ellipse, mask (COCO RLE), points, skeleton. The subset is the split. The
claim reads the first few KB of annotations/*.json only: Datumaro's categories are an object,
COCO's a list. Shapes become the task's labels as shapes.py says.
"""

import math
import posixpath
import re

from datasets.models import Task
from datasets.services import masks
from datasets.services.formats import SKIP_LABEL_FILE, SKIP_NO_IMAGE
from datasets.services.tool_formats.common import (
    dict_or_empty,
    image_size,
    json_head,
    list_or_empty,
    load_json,
    split_word,
)
from datasets.services.tool_formats.shapes import Collector, Shape, num, nums

# Datumaro's annotation types Kestrel reads (captions, cuboids... are refused)
_DATUMARO_TYPES = {"label", "bbox", "polygon", "polyline", "ellipse", "mask", "points", "skeleton"}
_DATUMARO_HEAD = re.compile(r'"dm_format_version"|"categories"\s*:\s*\{')
_COCO_HEAD = re.compile(r'"images"\s*:\s*\[')


def claim_datumaro(names, read) -> list[str]:
    """annotations/<subset>.json whose categories are an object (COCO's are a list)."""
    found = []
    for name in names:
        parts = name.lower().split("/")
        if len(parts) < 2 or parts[-2] != "annotations" or not parts[-1].endswith(".json"):
            continue
        head = json_head(read, name)
        if _DATUMARO_HEAD.search(head) and not _COCO_HEAD.search(head):
            found.append(name)
    return found


def _datumaro_categories(doc: dict) -> tuple[list, set[int], dict[int, list[str]]]:
    """Label names by id, the ids that are parts of a skeleton (not classes), and each
    skeleton's (or points label's) keypoint names by label id."""
    cats = doc.get("categories") if isinstance(doc.get("categories"), dict) else {}
    label_cat = cats.get("label") if isinstance(cats.get("label"), dict) else {}
    labels = label_cat.get("labels") if isinstance(label_cat.get("labels"), list) else []
    labels = [lb if isinstance(lb, dict) else {} for lb in labels]  # ids are places in the list
    label_names = [str(lb.get("name", f"class{i}")) for i, lb in enumerate(labels)]
    points_cat = cats.get("points") if isinstance(cats.get("points"), dict) else {}
    kpt_names: dict[int, list[str]] = {}
    for item in list_or_empty(points_cat.get("items")):
        if isinstance(item, dict) and isinstance(item.get("labels"), list):
            try:
                kpt_names[int(item.get("label_id"))] = [str(n) for n in item["labels"]]
            except (TypeError, ValueError, OverflowError):
                continue
    parts: set[int] = set()
    by_name = {n: i for i, n in enumerate(label_names)}
    from_parts: dict[int, list[str]] = {}
    for i, lb in enumerate(labels):
        parent = lb.get("parent")
        if isinstance(parent, str) and parent in by_name:  # a skeleton's point (CVAT)
            parts.add(i)
            from_parts.setdefault(by_name[parent], []).append(label_names[i])
    for skeleton, order in from_parts.items():
        kpt_names.setdefault(skeleton, order)  # the points categories' order first
    return label_names, parts, kpt_names


def _datumaro_points(ann: dict) -> list[tuple[float, float, float]]:
    xy = nums(ann.get("points") or [])
    if len(xy) % 2:
        raise ValueError("points need x and y each")
    vis = ann.get("visibility") if isinstance(ann.get("visibility"), list) else []
    out = []
    for k in range(len(xy) // 2):
        v = vis[k] if k < len(vis) else 2
        v = float(v) if isinstance(v, (int, float)) and v in (0, 1, 2) else 2.0
        out.append((xy[2 * k], xy[2 * k + 1], v))
    return out


def _skeleton_points(ann: dict, n: int) -> list[tuple[float, float, float]]:
    """A skeleton written as one list of points (Datumaro's test assets): x, y, visibility
    for each point of the skeleton, or x, y pairs beside a visibility list."""
    values = nums(ann["points"])
    if len(values) == 2 * n or (not n and isinstance(ann.get("visibility"), list)):
        return _datumaro_points(ann)
    if len(values) % 3 or (n and len(values) != 3 * n):
        raise ValueError(f"a skeleton of {n} points with {len(values)} values")
    return [
        (x, y, v if v in (0, 1, 2) else 2.0)
        for x, y, v in zip(values[0::3], values[1::3], values[2::3], strict=True)
    ]


def _datumaro_shape(ann: dict, label_names, kpt_names, size) -> Shape:
    """One Datumaro annotation → a Shape; ValueError with the reason otherwise."""
    kind = str(ann.get("type"))
    attrs = ann.get("attributes") if isinstance(ann.get("attributes"), dict) else {}
    if kind == "label":
        return Shape("tag")
    if kind == "bbox":
        bbox = nums(ann.get("bbox") or [])
        if len(bbox) != 4:
            raise ValueError("a bbox needs x, y, width, height")
        x, y, w, h = bbox
        rotation = attrs.get("rotation")
        angle = math.radians(num(rotation)) if rotation not in (None, "", 0) else 0.0
        if angle % (2 * math.pi):
            return Shape("rbox", [x + w / 2, y + h / 2, w, h, angle])
        return Shape("box", [x, y, x + w, y + h])
    if kind in ("polygon", "polyline"):
        return Shape(kind, nums(ann.get("points") or []))
    if kind == "ellipse":
        pts = nums(ann.get("points") or [])
        if len(pts) != 4:
            raise ValueError("an ellipse needs the corners of its box")
        x1, y1, x2, y2 = pts
        rotation = attrs.get("rotation")
        angle = math.radians(num(rotation)) if rotation not in (None, "", 0) else 0.0
        return Shape(
            "ellipse", [(x1 + x2) / 2, (y1 + y2) / 2, abs(x2 - x1) / 2, abs(y2 - y1) / 2, angle]
        )
    if kind == "mask":
        rle = ann.get("rle")
        if not isinstance(rle, dict):
            raise ValueError("a mask without its rle")
        mask = masks.coco_rle_decode(rle)
        if size is not None and (mask.shape[1], mask.shape[0]) != size:
            raise ValueError(
                f"mask of {mask.shape[1]}×{mask.shape[0]} on a {size[0]}×{size[1]} image"
            )
        return Shape("mask", (mask, 0, 0))
    if kind == "points":
        return Shape("keypoints", (None, _datumaro_points(ann)))
    if kind == "skeleton":
        order = kpt_names.get(ann.get("label_id"))
        elements = [e for e in list_or_empty(ann.get("elements")) if isinstance(e, dict)]
        if not elements and isinstance(ann.get("points"), list):
            return Shape("keypoints", (None, _skeleton_points(ann, len(order or []))))
        if not order:
            ids = [e.get("label_id") for e in elements]
            order = [
                label_names[i] for i in ids if isinstance(i, int) and 0 <= i < len(label_names)
            ]
        kpts = [(0.0, 0.0, 0.0)] * len(order)
        for e in elements:
            lid = e.get("label_id")
            name = (
                label_names[lid] if isinstance(lid, int) and 0 <= lid < len(label_names) else None
            )
            found = _datumaro_points(e)
            if name in order and found:
                kpts[order.index(name)] = found[0]
        return Shape("keypoints", (None, kpts))
    raise ValueError(f"{kind[:30]} annotations are not imported")


def parse_datumaro(images, files, read, *, task, classes, names):
    """annotations/<subset>.json: categories.label.labels (the classes, a skeleton's parts
    excepted), items with id, image {path, size [h, w]} and annotations in pixels. The subset
    is the split; an item's image is images/<subset>/<path>, images/<path>, or found by its
    path or id anywhere in the upload. Annotations of one object share a group (a COCO object
    read by Datumaro is a polygon and its bbox): each object is imported once, as the shape the
    task wants."""
    out = Collector("datumaro", images, classes, task)
    grouped_twice = 0
    subsets = []
    for ann_file in sorted(files):
        doc = load_json(read, ann_file, out.skipped, "Datumaro")
        if doc is None:
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("items"), list):
            out.skip(ann_file, "not a Datumaro file (no items list)", SKIP_LABEL_FILE)
            continue
        out.label_counts[ann_file] = 0
        label_names, parts, kpt_names = _datumaro_categories(doc)
        for i, name in enumerate(label_names):
            if i not in parts:
                out.declare(name)
        subset = posixpath.basename(ann_file).rsplit(".", 1)[0]
        split = split_word(subset)
        subsets.append(subset)
        if split is None and subset.lower() != "default":
            out.notes.append(
                f"{ann_file}: subset {subset!r} names no split: its images keep the split "
                "of their folders (train where none does)"
            )
        low = ann_file.lower()
        root = ann_file[: low.rfind("annotations/")]
        folders = [f"{root}images/{subset}/", f"{root}images/", root]
        for n, item in enumerate(doc["items"]):
            if not isinstance(item, dict):
                continue
            item_id = str(item.get("id", ""))
            where = f"{ann_file} item {item_id[:100] or n}"
            media = item.get("image") if isinstance(item.get("image"), dict) else None
            media = media or (item.get("media") if isinstance(item.get("media"), dict) else {})
            path = media.get("path") if isinstance(media.get("path"), str) else ""
            image = out.index.find(path, folders) if path else None
            image = image or (out.index.find_stem(item_id, folders) if item_id else None)
            if image is None:
                out.skip(
                    f"{ann_file} item {(path or item_id)[:200]}",
                    "its image is not in the upload",
                    SKIP_NO_IMAGE,
                )
                continue
            hw = media.get("size")
            size = image_size(hw[1], hw[0]) if isinstance(hw, list) and len(hw) == 2 else None
            anns = [a for a in list_or_empty(item.get("annotations")) if isinstance(a, dict)]
            if size is None:  # a mask is drawn on the whole image: its size is the image's
                for a in anns:
                    rle = dict_or_empty(a.get("rle")) if a.get("type") == "mask" else {}
                    rle_size = rle.get("size")
                    if isinstance(rle_size, list) and len(rle_size) == 2:
                        size = image_size(rle_size[1], rle_size[0])
                        break
            out.take(image, split, size)
            grouped_twice += _datumaro_item(
                out, image, anns, label_names, kpt_names, where, ann_file, size
            )
    if subsets:
        out.notes.insert(0, f"Datumaro subsets read: {', '.join(subsets)}")
    if grouped_twice:
        out.notes.append(
            f"{grouped_twice} annotations describing an object another one of its group "
            "already gave were not imported twice"
        )
    return out.finish()


def _datumaro_item(out, image, anns, label_names, kpt_names, where, ann_file, size) -> int:
    """The annotations of one item; returns how many were left out as another shape of an
    object already imported (a group's bbox beside its polygon)."""
    shapes: list[tuple[int, str, Shape, int]] = []  # (label id, where, shape, group)
    for k, ann in enumerate(anns):
        here = f"{where} annotation {ann.get('id', k)}"
        kind = str(ann.get("type"))[:30]
        if kind not in _DATUMARO_TYPES:
            out.skip(here, f"{kind} annotations are not imported")
            continue
        lid = ann.get("label_id")
        if not isinstance(lid, int) or not 0 <= lid < len(label_names):
            out.skip(here, f"{str(ann.get('type'))[:30]} with an unknown label id {lid!r}")
            continue
        try:
            shape = _datumaro_shape(ann, label_names, kpt_names, size)
        except ValueError as e:
            out.skip(here, f"{label_names[lid][:40]!r}: {e}")
            continue
        group = ann.get("group") if isinstance(ann.get("group"), int) else 0
        shapes.append((lid, here, shape, group if shape.kind != "tag" else 0))
    clusters: dict[tuple[int, int], list[int]] = {}
    for i, (lid, _, _, group) in enumerate(shapes):
        if group:
            clusters.setdefault((group, lid), []).append(i)
    dropped: set[int] = set()
    task = out.task
    for members in clusters.values():
        if len(members) < 2:
            continue
        kinds = {i: shapes[i][2].kind for i in members}
        boxes = [i for i in members if kinds[i] in ("box", "rbox")]
        outlines = [i for i in members if kinds[i] in ("polygon", "mask", "ellipse")]
        points = [i for i in members if kinds[i] == "keypoints"]
        if task == Task.POSE and points:
            if boxes and shapes[boxes[0]][2].kind == "box":
                for i in points:  # the group's box is the keypoints' box
                    shapes[i][2].geo = (shapes[boxes[0]][2].geo, shapes[i][2].geo[1])
            keep = points
        elif task == Task.SEGMENT and outlines:
            keep = outlines + points
        elif boxes:
            keep = boxes[:1] + points
        else:
            keep = members
        dropped |= set(members) - set(keep)
    for i, (lid, here, shape, _) in enumerate(shapes):
        if i not in dropped:
            out.add(image, label_names[lid], shape, ann_file, here)
    return len(dropped)
