"""Apple CreateML's object detection JSON (Roboflow names it _annotations.createml.json).

A list of {"image": name, "annotations": [{"label", "coordinates": {x, y, width, height}}]}, the
box's centre and size in pixels of an image whose size the file does not give: the import
normalises them. The claim peeks at the JSON files not named like an image, the shallowest
first, and turns Label Studio's lists down.
"""

import posixpath
import re

from datasets.services.formats import SKIP_LABEL, SKIP_LABEL_FILE, SKIP_NO_IMAGE
from datasets.services.tool_formats.common import (
    MAX_PEEKED,
    folder_split,
    json_head,
    json_not_per_image,
    load_json,
    named_split,
)
from datasets.services.tool_formats.shapes import Collector, Shape, num

_LIST_OF_OBJECTS = re.compile(r"^\s*\[\s*\{")
_LABEL_STUDIO_KEYS = re.compile(r'"(data|result|predictions|completions|annotator)"\s*:')
_CREATEML_IMAGE = re.compile(r'"image"\s*:\s*"')
_CREATEML_ANNOTATIONS = re.compile(r'"annotations"\s*:\s*\[\s*(\{|\])')


def _is_createml(head: str) -> bool:
    """A list of {"image": "...", "annotations": [{"label", "coordinates"}]}; Label Studio's
    tasks (data, annotations with result) and JSON-MIN (image with label keys, no
    annotations) are not."""
    if not _LIST_OF_OBJECTS.match(head) or _LABEL_STUDIO_KEYS.search(head):
        return False
    if not _CREATEML_IMAGE.search(head):
        return False
    m = _CREATEML_ANNOTATIONS.search(head)
    return bool(m) and ('"coordinates"' in head or m.group(1) == "]")


def claim_createml(names, read) -> list[str]:
    """Apple CreateML's object detection JSON (Roboflow names it _annotations.createml.json),
    among the JSON files not named like an image."""
    return [n for n in json_not_per_image(names)[:MAX_PEEKED] if _is_createml(json_head(read, n))]


def parse_createml(images, files, read, *, task, classes, names):
    """A list of {"image": name, "annotations": [{"label", "coordinates": {x, y, width,
    height}}]}: x, y the box's centre, all in pixels of an image whose size the file does not
    give (the import normalises them). The split: the file's name or folder, else the image's."""
    out = Collector("createml", images, classes, task)
    for cm_file in sorted(files):
        doc = load_json(read, cm_file, out.skipped, "CreateML")
        if doc is None:
            continue
        if not isinstance(doc, list):
            out.skip(cm_file, "not a CreateML file (not a list of images)", SKIP_LABEL_FILE)
            continue
        out.label_counts[cm_file] = 0
        file_split = named_split(cm_file)
        folder = posixpath.dirname(cm_file)
        folders = [f"{folder}/", ""] if folder else [""]
        n_images = 0
        for n, entry in enumerate(doc):
            if not isinstance(entry, dict):
                out.skip(f"{cm_file} entry {n + 1}", "not an object", SKIP_LABEL)
                continue
            ref = entry.get("image") if isinstance(entry.get("image"), str) else ""
            image = out.index.find(ref, folders) if ref else None
            if image is None:
                out.skip(
                    f"{cm_file} {ref[:200] or f'entry {n + 1}'}",
                    "its image is not in the upload",
                    SKIP_NO_IMAGE,
                )
                continue
            n_images += 1
            out.take(image, file_split or folder_split(image), None)
            anns = entry.get("annotations")
            for k, ann in enumerate(anns if isinstance(anns, list) else []):
                where = f"{cm_file} {ref[:200]} annotation {k + 1}"
                if not isinstance(ann, dict):
                    out.skip(where, "not an object")
                    continue
                coords = ann.get("coordinates")
                try:
                    if not isinstance(coords, dict):
                        raise ValueError("no coordinates")
                    x, y, w, h = (num(coords.get(c)) for c in ("x", "y", "width", "height"))
                except ValueError as e:
                    out.skip(where, f"annotation {e}")
                    continue
                label = ann.get("label")
                cls = str(label) if isinstance(label, (str, int)) else ""
                out.add(
                    image,
                    cls,
                    Shape("box", [x - w / 2, y - h / 2, x + w / 2, y + h / 2]),
                    cm_file,
                    where,
                )
        out.notes.append(f"{cm_file}: {n_images} images read as CreateML")
    return out.finish()
