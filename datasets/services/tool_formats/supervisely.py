"""Supervisely's project export.

meta.json (the classes, with their shapes and a graph's nodes in template order, and the tag
metas) beside <dataset>/ann/<image name>.json files (size, objects in pixels, the image's tags),
the image being <dataset>/img/<image name>. The claim needs a meta.json with a "classes" list
above <dataset>/ann/ folders. Shapes become the task's labels as shapes.py says.
"""

import base64
import binascii
import io
import posixpath
import re
import zlib
from collections import Counter

import numpy as np
from PIL import Image as PILImage

from datasets.models import Task
from datasets.services import masks
from datasets.services.formats import SKIP_FILE, SKIP_LABEL_FILE, SKIP_NO_IMAGE, SPLIT_NAMES
from datasets.services.tool_formats.common import (
    folder_split,
    image_size,
    json_head,
    list_or_empty,
    load_json,
    split_word,
)
from datasets.services.tool_formats.shapes import Collector, Shape, bounds, num, nums, xy_pairs

# A Supervisely bitmap's PNG, decompressed, is refused past this size.
MAX_BITMAP_BYTES = 64 * 1024 * 1024


_SLY_SIDE_FILES = {
    "key_id_map.json": "Supervisely's ids of objects on its server",
    "obj_class_to_machine_color.json": "Supervisely's colours of its classes",
}
_SLY_SIDE_FOLDERS = {
    "meta": "Supervisely's image metadata",
    "img_info": "Supervisely's image records",
    "blob": "Supervisely's image blobs",
}
# geometryType → what Kestrel reads it as (classes of other shapes make no label)
_SLY_SHAPES = {"rectangle", "polygon", "bitmap", "alpha_mask", "graph", "oriented_bbox", "any"}


def _sly_roots(names: list[str]) -> dict[str, list[str]]:
    """Each folder holding a meta.json → the annotation files of its datasets
    (<dataset>/ann/<image>.json, nested datasets too)."""
    metas = sorted(
        (n for n in names if posixpath.basename(n).lower() == "meta.json"),
        key=lambda n: (n.count("/"), n),
    )
    roots: dict[str, list[str]] = {}
    for meta in metas:
        root = posixpath.dirname(meta) + "/" if "/" in meta else ""
        if any(root.startswith(r) for r in roots):  # a deeper meta.json of a project found
            continue
        roots[root] = []
    for name in names:
        low = name.lower()
        parts = low.split("/")
        if not low.endswith(".json") or len(parts) < 3 or parts[-2] != "ann":
            continue
        root = max((r for r in roots if name.startswith(r)), key=len, default=None)
        if root is not None and name.count("/") - root.count("/") >= 2:
            roots[root].append(name)
    return {r: anns for r, anns in roots.items() if anns}


def claim_supervisely(names, read) -> list[str]:
    """meta.json (with its classes) and the <dataset>/ann/*.json files below it."""
    found = []
    for root, anns in _sly_roots(names).items():
        meta = f"{root}meta.json"
        meta = next((n for n in names if n.lower() == meta.lower()), meta)
        head = json_head(read, meta)
        if head.startswith("{") and re.search(r'"classes"\s*:\s*\[', head):
            found += [meta, *anns]
    return found


def _sly_meta(doc) -> tuple[list[dict], dict[str, list[str]], dict[str, dict]]:
    """Classes in order, each graph class's node ids in template order (and their names),
    and tag metas by name."""
    classes = [
        c for c in list_or_empty(doc.get("classes")) if isinstance(c, dict) and c.get("title")
    ]
    nodes: dict[str, list[str]] = {}
    for c in classes:
        config = c.get("geometry_config") if isinstance(c.get("geometry_config"), dict) else {}
        if isinstance(config.get("nodes"), dict):
            nodes[str(c["title"])] = [str(k) for k in config["nodes"]]
    tags = list_or_empty(doc.get("tags"))
    tag_metas = {str(t["name"]): t for t in tags if isinstance(t, dict) and t.get("name")}
    return classes, nodes, tag_metas


def _sly_bitmap(data: str, size: tuple[int, int] | None) -> np.ndarray:
    """Supervisely's bitmap: base64 of a zlib-compressed PNG (or of a bare PNG) → a bool mask
    (its alpha where it has one, else its set pixels), as Bitmap.base64_2_data reads it."""
    try:
        raw = base64.b64decode(data)
    except (binascii.Error, ValueError, TypeError):
        raise ValueError("bitmap data is not base64") from None
    try:
        inflate = zlib.decompressobj()
        png = inflate.decompress(raw, MAX_BITMAP_BYTES)
        if inflate.unconsumed_tail:
            raise ValueError("bitmap too large")
    except zlib.error:
        png = raw
    try:
        with PILImage.open(io.BytesIO(png)) as im:
            w, h = im.size
            if w * h > masks.MAX_MASK_PIXELS or (size and (w > size[0] or h > size[1])):
                raise ValueError(f"bitmap of {w}×{h} is larger than its image")
            if im.mode in ("RGBA", "LA", "PA") or "transparency" in im.info:
                return np.asarray(im.convert("RGBA"))[:, :, 3] > 0
            if im.mode in ("P", "1", "L", "I", "I;16"):
                return np.asarray(im) > 0
            return np.asarray(im.convert("RGB")).any(axis=-1)
    except (OSError, SyntaxError, PILImage.DecompressionBombError):
        raise ValueError("bitmap data is not a PNG") from None


def _sly_shape(obj: dict, nodes_order: list[str] | None, holes: Counter, size) -> Shape:
    kind = str(obj.get("geometryType") or obj.get("shape") or "")
    points = obj.get("points") if isinstance(obj.get("points"), dict) else {}
    if kind == "rectangle":
        xy = xy_pairs(points.get("exterior"))
        if len(xy) != 4:
            raise ValueError("a rectangle needs 2 points")
        return Shape("sly-rect", bounds(xy))
    if kind == "polygon":
        if any(isinstance(h, list) and h for h in list_or_empty(points.get("interior"))):
            holes["polygons with holes read as their outline (holes are not kept)"] += 1
        return Shape("polygon", xy_pairs(points.get("exterior")))
    if kind in ("bitmap", "alpha_mask"):
        bitmap = obj.get(kind) if isinstance(obj.get(kind), dict) else obj.get("bitmap")
        if not isinstance(bitmap, dict) or not isinstance(bitmap.get("data"), str):
            raise ValueError("a bitmap without its data")
        origin = nums(bitmap.get("origin") or [0, 0])
        if len(origin) != 2:
            raise ValueError("a bitmap's origin is not [x, y]")
        return Shape("mask", (_sly_bitmap(bitmap["data"], size), origin[0], origin[1]))
    if kind == "oriented_bbox":
        raw = obj.get("points")
        raw = raw.get("exterior") if isinstance(raw, dict) else raw
        xy = xy_pairs(raw)
        if len(xy) != 4:
            raise ValueError("an oriented box needs 2 points")
        x1, y1, x2, y2 = bounds(xy)
        angle = num(obj.get("angle") or 0)
        return Shape("rbox", [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1, angle])
    if kind == "graph":
        nodes = obj.get("nodes") if isinstance(obj.get("nodes"), dict) else {}
        order = nodes_order or list(nodes)
        kpts = []
        for node_id in order:
            node = nodes.get(node_id)
            if not isinstance(node, dict) or not isinstance(node.get("loc"), list):
                kpts.append((0.0, 0.0, 0.0))
                continue
            loc = nums(node["loc"])
            if len(loc) != 2:
                raise ValueError("a node's loc is not [x, y]")
            kpts.append((loc[0], loc[1], 1.0 if node.get("disabled") else 2.0))
        return Shape("keypoints", (None, kpts))
    if kind == "point":
        raise ValueError("a lone point is not imported (it is no box, polygon or skeleton)")
    if kind in ("line", "polyline"):
        return Shape("polyline", xy_pairs(points.get("exterior")))
    raise ValueError(f"{kind[:30] or 'untyped'} objects are not imported")


def _sly_tags(tags, tag_metas: dict) -> tuple[list[str], list[str]]:
    """An image's tags → the classes they name, and the tags that name none. A tag without
    a value is its name; a one-of tag's value (value_type oneof_string) is the chosen class;
    older exports list bare names."""
    named, other = [], []
    for t in tags if isinstance(tags, list) else []:
        if isinstance(t, str):
            named.append(t)
        elif isinstance(t, dict) and t.get("name"):
            name, value = str(t["name"]), t.get("value")
            kind = (tag_metas.get(name) or {}).get("value_type")
            if value in (None, ""):
                named.append(name)
            elif kind == "oneof_string" and isinstance(value, str):
                named.append(value)
            else:
                other.append(name)
    return named, other


def parse_supervisely(images, files, read, *, task, classes, names):
    """meta.json: the classes (title, shape; a graph's nodes in template order) and tags.
    <dataset>/ann/<image name>.json: size {height, width}, objects (classTitle, geometryType
    rectangle / polygon / bitmap / graph / oriented_bbox / line; lone points refused) and the
    image's tags. The image is <dataset>/img/<image name>. The split: an image tag named
    train/val/test, else the dataset folder's name, else the image's folders. In a
    classification dataset the image's tags are its classes."""
    out = Collector("supervisely", images, classes, task)
    metas = [f for f in files if posixpath.basename(f).lower() == "meta.json"]
    anns = sorted(f for f in files if f not in metas)
    meta_by_root: dict[str, tuple] = {}
    for meta in sorted(metas):
        doc = load_json(read, meta, out.skipped, "Supervisely meta")
        if not isinstance(doc, dict):
            if doc is not None:
                out.skip(meta, "not a Supervisely meta.json (not an object)", SKIP_LABEL_FILE)
            continue
        sly_classes, nodes, tag_metas = _sly_meta(doc)
        meta_by_root[posixpath.dirname(meta) + "/" if "/" in meta else ""] = (nodes, tag_metas)
        if out.task != Task.CLASSIFY:
            for c in sly_classes:
                if str(c.get("shape") or "any") in _SLY_SHAPES:
                    out.declare(str(c["title"]))
        out.notes.append(f"classes read from {meta} ({len(sly_classes)} classes)")
    holes: Counter = Counter()
    datasets: set[str] = set()
    tags_left: Counter = Counter()
    for ann_file in anns:
        root = max((r for r in meta_by_root if ann_file.startswith(r)), key=len, default=None)
        nodes, tag_metas = meta_by_root.get(root, ({}, {}))
        ds_folder = "/".join(ann_file.split("/")[:-2])
        datasets.add(ds_folder)
        image_name = posixpath.basename(ann_file)[: -len(".json")]
        # <dataset>/img/<image name>, else an image of that name (or stem) in the dataset
        image = out.index.find(image_name, [f"{ds_folder}/img/"], anywhere=False)
        if image is None:
            image = out.index.find(image_name, [f"{ds_folder}/"], anywhere=False)
        if image is None:
            image = out.index.find_stem(f"{ds_folder}/img/{image_name}", [""])
        if image is None:
            out.skip(ann_file, f"its image {image_name[:100]} is not in the upload", SKIP_NO_IMAGE)
            continue
        doc = load_json(read, ann_file, out.skipped, "Supervisely annotation")
        if doc is None:
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("objects", []), list):
            out.skip(ann_file, "not a Supervisely annotation (no objects list)", SKIP_LABEL_FILE)
            continue
        out.label_counts[ann_file] = 0
        size_doc = doc.get("size") if isinstance(doc.get("size"), dict) else {}
        size = image_size(size_doc.get("width"), size_doc.get("height"))
        tags, valued = _sly_tags(doc.get("tags"), tag_metas)
        split_tags = [t for t in tags if t.lower() in SPLIT_NAMES]
        class_tags = [t for t in tags if t.lower() not in SPLIT_NAMES]
        tags_left.update(valued)
        split = (
            SPLIT_NAMES[split_tags[-1].lower()]
            if split_tags
            else split_word(posixpath.basename(ds_folder)) or folder_split(image)
        )
        out.take(image, split, size)
        if out.task == Task.CLASSIFY:
            for t in class_tags:
                out.add(image, t, Shape("tag"), ann_file, f"{ann_file} tag {t[:60]}")
        else:
            tags_left.update(class_tags)
        for k, obj in enumerate(list_or_empty(doc.get("objects"))):
            if not isinstance(obj, dict):
                continue
            where = f"{ann_file} object {obj.get('id', k)}"
            title = str(obj.get("classTitle") or "")
            try:
                shape = _sly_shape(obj, nodes.get(title), holes, size)
            except ValueError as e:
                out.skip(where, f"{title[:40]!r}: {e}")
                continue
            if shape.kind == "sly-rect":
                # Supervisely's right and bottom are the last pixel inside the box.
                x1, y1, x2, y2 = shape.geo
                w, h = size if size else (x2 + 1, y2 + 1)
                shape = Shape("box", [x1, y1, min(x2 + 1, max(w, x2)), min(y2 + 1, max(h, y2))])
            out.add(image, title, shape, ann_file, where)
    if anns:
        out.notes.insert(
            0, f"Supervisely project: {len(anns)} annotation files in {len(datasets)} datasets"
        )
    for what, n in holes.items():
        out.notes.append(f"{n} {what}")
    if tags_left:
        shown = ", ".join(t for t, _ in tags_left.most_common(5))
        why = (
            "only a classification dataset takes image classes"
            if out.task != Task.CLASSIFY
            else "a tag with a value is a class only when it is one of a list (oneof_string)"
        )
        out.notes.append(f"image tags not imported ({shown}): {why}")
    read_files = set(files)
    for name in names:
        low = name.lower()
        base = posixpath.basename(low)
        parent = low.split("/")[-2] if "/" in low else ""
        if not low.endswith(".json") or name in read_files:
            continue
        if base in _SLY_SIDE_FILES:
            out.skip(name, f"not read: {_SLY_SIDE_FILES[base]}, no labels", SKIP_FILE)
        elif parent in _SLY_SIDE_FOLDERS and any(low.startswith(r.lower()) for r in meta_by_root):
            out.skip(name, f"not read: {_SLY_SIDE_FOLDERS[parent]}, no labels", SKIP_FILE)
    return out.finish()
