"""VGG Image Annotator (VIA) 1.x and 2.x: a project (_via_img_metadata, _via_attributes...) or
its annotation export ({"<file name><size>": {filename, size, regions}}), one JSON file for a
whole dataset.

The claim peeks at the JSON files not named like an image (those are one file per image:
LabelMe's, Supervisely's), the shallowest first. VIA gives no image size: labels stay in pixels
for the import to normalise. Shapes become the task's labels as shapes.py says.
"""

import posixpath
import re
from collections import Counter

from datasets.models import Task
from datasets.services.formats import SKIP_LABEL_FILE, SKIP_NO_IMAGE
from datasets.services.tool_formats.common import (
    MAX_PEEKED,
    dict_or_empty,
    folder_split,
    json_head,
    json_not_per_image,
    load_json,
    named_split,
)
from datasets.services.tool_formats.shapes import Collector, Shape, num, nums

_VIA_PROJECT = re.compile(r'"_via_(img_metadata|settings|image_id_list|data_format_version)"')
_FIRST_VALUE_OBJECT = re.compile(r'^\s*\{\s*"(?:[^"\\]|\\.)*"\s*:\s*\{')
# Attribute names that say "the class", best first (compared without case, spaces, _ or -).
_CLASS_ATTRIBUTES = (
    "class",
    "classname",
    "label",
    "labelname",
    "name",
    "type",
    "category",
    "objectclass",
    "objecttype",
    "object",
)


def _is_via(head: str) -> bool:
    if _VIA_PROJECT.search(head):
        return True
    return bool(_FIRST_VALUE_OBJECT.match(head)) and '"filename"' in head and '"regions"' in head


def claim_via(names, read) -> list[str]:
    """A VIA project (_via_img_metadata...) or its annotation export ({"<file><size>":
    {filename, size, regions}}), among the JSON files not named like an image."""
    return [n for n in json_not_per_image(names)[:MAX_PEEKED] if _is_via(json_head(read, n))]


def _class_attribute(keys: Counter) -> tuple[str | None, str]:
    """The attribute that holds the class, and how it was chosen (for the note)."""
    if len(keys) == 1:
        key = next(iter(keys))
        return key, f"the class is the region attribute {key!r} (the only one)"

    def plain(k: str) -> str:
        return re.sub(r"[\s_\-]+", "", k.lower())

    for wanted in _CLASS_ATTRIBUTES:
        for key in sorted(keys, key=lambda k: -keys[k]):
            if plain(key) == wanted:
                others = ", ".join(repr(k) for k in sorted(keys) if k != key)
                return key, f"the class is the region attribute {key!r} ({others} not read)"
    for key in sorted(keys, key=lambda k: -keys[k]):
        if "class" in plain(key) or "label" in plain(key):
            others = ", ".join(repr(k) for k in sorted(keys) if k != key)
            return key, f"the class is the region attribute {key!r} ({others} not read)"
    return None, ""


def _attribute_class(value) -> str:
    """A region attribute's value → a class name: text, a dropdown or radio option's id, or the
    one ticked box of a checkbox attribute ({"cat": true})."""
    if isinstance(value, dict):
        ticked = [str(k) for k, v in value.items() if v]
        if len(ticked) != 1:
            raise ValueError(f"{len(ticked)} options ticked where the class needs one")
        return ticked[0]
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value).strip()
    raise ValueError("its class attribute is not text")


def _via_shape(sa: dict) -> Shape:
    name = str(sa.get("name") or "")
    if name == "rect":
        x, y, w, h = (num(sa.get(k)) for k in ("x", "y", "width", "height"))
        return Shape("box", [x, y, x + w, y + h])
    if name == "polygon":
        xs, ys = nums(sa.get("all_points_x")), nums(sa.get("all_points_y"))
        if len(xs) != len(ys):
            raise ValueError("all_points_x and all_points_y differ in length")
        return Shape("polygon", [v for pair in zip(xs, ys, strict=True) for v in pair])
    if name == "circle":
        cx, cy, r = (num(sa.get(k)) for k in ("cx", "cy", "r"))
        return Shape("ellipse", [cx, cy, r, r, 0.0])
    if name == "ellipse":
        cx, cy, rx, ry = (num(sa.get(k)) for k in ("cx", "cy", "rx", "ry"))
        return Shape("ellipse", [cx, cy, rx, ry, num(sa.get("theta") or 0)])
    if name == "point":
        raise ValueError("a lone point is not imported (it is no box, polygon or skeleton)")
    if name == "polyline":
        xs, ys = nums(sa.get("all_points_x")), nums(sa.get("all_points_y"))
        if len(xs) != len(ys):
            raise ValueError("all_points_x and all_points_y differ in length")
        return Shape("polyline", [v for pair in zip(xs, ys, strict=True) for v in pair])
    raise ValueError(f"{name[:30] or 'untyped'} regions are not imported")


def _via_regions(entry: dict) -> list[dict]:
    regions = entry.get("regions")
    if isinstance(regions, dict):  # VIA 1.x: {"0": region, "1": region}
        regions = [regions[k] for k in sorted(regions, key=lambda k: (len(k), k))]
    return [r for r in regions if isinstance(r, dict)] if isinstance(regions, list) else []


def _set_keys(dicts) -> Counter:
    """How many times each attribute is set (not empty) in these attribute objects."""
    return Counter(k for d in dicts for k, v in d.items() if v not in (None, "", {}))


class _ViaClasses:
    """How one VIA file names its regions' classes: the one attribute its regions set, or the
    one named like a class among several; with no attribute at all, one class for all."""

    def __init__(self, out: Collector, via_file: str, regions: list[dict], region_defs: dict):
        keys = _set_keys(dict_or_empty(r.get("region_attributes")) for r in regions)
        self.attr, how = _class_attribute(keys)
        self.single = None
        if self.attr is not None:
            out.notes.append(f"{via_file}: {how}")
            options = dict_or_empty(region_defs.get(self.attr)).get("options")
            if out.task != Task.CLASSIFY and isinstance(options, dict):
                for option in options:  # a dropdown's or radio's options: the class order
                    out.declare(str(option))
        elif regions and not keys:
            self.single = out.classes[0] if len(out.classes) == 1 else "object"
            out.notes.append(
                f"{via_file}: its {len(regions)} regions have no attribute: all read as one "
                f"class, {self.single!r}"
            )
        elif regions:
            shown = ", ".join(repr(k) for k in sorted(keys)[:6])
            out.notes.append(
                f"{via_file}: its regions' attributes ({shown}) name no class: Kestrel reads "
                "the one attribute, or one called class, label, name or type"
            )

    def of(self, region: dict) -> str:
        if self.single is not None:
            return self.single
        if self.attr is None:
            raise ValueError("no region attribute names its class")
        value = dict_or_empty(region.get("region_attributes")).get(self.attr)
        if value in (None, "", {}):
            raise ValueError(f"no {self.attr!r} attribute (its class)")
        return _attribute_class(value)


def parse_via(images, files, read, *, task, classes, names):
    """VIA 2's project (_via_img_metadata, _via_attributes) or annotation export, and VIA 1's
    (regions as an object): per image filename and regions, each a shape_attributes (rect,
    polygon, circle, ellipse, polyline in pixels) and region_attributes. The class is the one region
    attribute the file uses, or among several the one named class / label / name / type; a file
    whose regions have no attribute at all is one class (the dataset's only class, else
    "object"). In a classification dataset the file attributes give the image's class. VIA
    gives no image size: labels stay in pixels for the import."""
    out = Collector("via", images, classes, task)
    for via_file in sorted(files):
        doc = load_json(read, via_file, out.skipped, "VIA")
        if doc is None:
            continue
        project = isinstance(doc, dict) and any(str(k).startswith("_via_") for k in doc)
        metadata = doc.get("_via_img_metadata") if project else doc
        if not isinstance(metadata, dict):
            what = "a VIA project without _via_img_metadata" if project else "not a VIA file"
            out.skip(via_file, f"{what} (no object of images)", SKIP_LABEL_FILE)
            continue
        out.label_counts[via_file] = 0
        region_defs = dict_or_empty(dict_or_empty(doc.get("_via_attributes")).get("region"))
        entries = [(k, v, _via_regions(v)) for k, v in metadata.items() if isinstance(v, dict)]
        all_regions = [r for _, _, regions in entries for r in regions]
        out.notes.append(
            f"{via_file}: {len(entries)} images and {len(all_regions)} regions read as VIA"
        )
        namer = _ViaClasses(out, via_file, all_regions, region_defs)
        file_attr = None
        if out.task == Task.CLASSIFY:
            keys = _set_keys(dict_or_empty(e.get("file_attributes")) for _, e, _ in entries)
            file_attr, how = _class_attribute(keys)
            if file_attr is not None:
                out.notes.append(f"{via_file}: {how.replace('region', 'file')}")
        file_split = named_split(via_file)
        folder = posixpath.dirname(via_file)
        folders = [f"{folder}/", ""] if folder else [""]
        for key, entry, regions in entries:
            filename = str(entry.get("filename") or entry.get("fileref") or "")
            image = out.index.find(filename, folders) if filename else None
            if image is None:
                what = f"{via_file} {filename[:200] or key[:200]}"
                out.skip(what, "its image is not in the upload", SKIP_NO_IMAGE)
                continue
            out.take(image, file_split or folder_split(image), None)
            file_attrs = dict_or_empty(entry.get("file_attributes"))
            if file_attr is not None and file_attrs.get(file_attr) not in (None, "", {}):
                here = f"{via_file} {filename[:200]} file attributes"
                try:
                    cls = _attribute_class(file_attrs[file_attr])
                except ValueError as e:
                    out.skip(here, f"image class: {e}")
                else:
                    out.add(image, cls, Shape("tag"), via_file, here)
            for n, region in enumerate(regions, 1):
                where = f"{via_file} {filename[:200]} region {n}"
                try:
                    cls = namer.of(region)
                    shape_attributes = region.get("shape_attributes")
                    if not isinstance(shape_attributes, dict):
                        raise ValueError("no shape_attributes")
                    shape = _via_shape(shape_attributes)
                except ValueError as e:
                    out.skip(where, f"region {e}")
                    continue
                out.add(image, cls, shape, via_file, where)
    return out.finish()
