"""Recognise what an upload holds (from its entry names, and a peek at small files) and hand
it to the parser of its layout: formats.py's (YOLO, COCO, VOC, classification folders),
formats_layouts.py's (CVAT YOLO 1.1, LabelMe, Ultralytics NDJSON), a labelling tool's own
export (tool_formats/: CVAT XML, Label Studio, Datumaro, Supervisely, VIA, CreateML, KITTI, Open
Images), or, for semantic and depth datasets, pixel_formats.py's (masks and depth maps).

Then the importer's rule, the same for every format: a file that looks like labels (XML, JSON,
TXT, CSV) and gave no label is in the report, with the format it was taken for and why nothing
came of it. Nothing that looks like labels is passed over in silence.
"""

import bisect
import json
import posixpath
from collections.abc import Callable

from defusedxml import ElementTree
from defusedxml.common import DefusedXmlException

from datasets.models import PIXEL_TASKS, Task
from datasets.services import formats_layouts as layouts
from datasets.services.formats import (
    LABEL_LOOKING_SUFFIXES,
    MAX_LABEL_FILE_BYTES,
    SKIP_EMPTY,
    SKIP_FILE,
    SKIP_LABEL_FILE,
    LabelFileError,
    Parsed,
    ParsedImage,
    Reader,
    _find_data_yaml,
    _is_coco,
    parse_classification_folders,
    parse_coco,
    parse_voc,
    parse_yolo,
    split_from_path,
)
from datasets.services.images import looks_like_image
from datasets.services.import_report import FORMAT_TITLES
from datasets.services.pixel_formats import parse_pixel
from datasets.services.tool_formats import (
    createml,
    cvat,
    datumaro,
    kitti,
    labelstudio,
    openimages,
    supervisely,
    via,
)

# A labelling tool's export of its own kind: claim(names, read) → the files that are its
# annotations (empty: not this format); parse(images, files, read, *, task, classes, names).
# Tried in this order, before the folder layouts; the first that claims files parses them.
Claim = Callable[[list[str], Reader], list[str]]
TOOL_FORMATS: list[tuple[Claim, Callable[..., Parsed]]] = [
    (cvat.claim_cvat_xml, cvat.parse_cvat_xml),
    (labelstudio.claim_label_studio, labelstudio.parse_label_studio),
    (datumaro.claim_datumaro, datumaro.parse_datumaro),
    (supervisely.claim_supervisely, supervisely.parse_supervisely),
    (via.claim_via, via.parse_via),
    (createml.claim_createml, createml.parse_createml),
    (kitti.claim_kitti, kitti.parse_kitti),
    (openimages.claim_openimages, openimages.parse_openimages),
]


class _Tracked:
    """The parser's reader, remembering which files the parser read."""

    def __init__(self, read: Reader):
        self._read = read
        self.names: set[str] = set()

    def __call__(self, name: str, limit: int) -> bytes:
        self.names.add(name)
        return self._read(name, limit)


def detect_and_parse(names: list[str], read: Reader, *, task: str, classes: list[str]) -> Parsed:
    """Recognise the format from the entry names and parse it. `classes` are the dataset's."""
    tracked = _Tracked(read)
    if task in PIXEL_TASKS:
        # A semantic or depth dataset's upload holds maps (masks/, depth/, gtFine/,
        # SegmentationClass/): labels of other kinds have nowhere to go.
        parsed = parse_pixel(names, tracked, task=task, classes=classes)
    else:
        parsed = _parse(names, read, tracked, task=task, classes=classes)
    _no_silent_label_file(parsed, names, tracked.names, read)
    return parsed


def _parse(names, read: Reader, tracked: _Tracked, *, task: str, classes: list[str]) -> Parsed:
    lower = {n: n.lower() for n in names}
    yamls = [n for n in names if lower[n].endswith((".yaml", ".yml"))]
    txts = [n for n in names if lower[n].endswith(".txt")]
    jsons = [n for n in names if lower[n].endswith(".json")]
    xmls = [n for n in names if lower[n].endswith(".xml")]
    images = [n for n in names if looks_like_image(n)]

    data_yaml = _find_data_yaml(yamls, read)
    yolo_labels = any("/labels/" in f"/{lower[t]}" for t in txts)
    ndjson = [n for n in names if lower[n].endswith(".ndjson")]
    if ndjson:
        return layouts.parse_ndjson(images, ndjson, names, tracked, task=task, classes=classes)
    for claim, parse in TOOL_FORMATS:
        files = claim(names, read)
        if files:
            return parse(images, files, tracked, task=task, classes=classes, names=names)
    cvat_root = layouts.cvat_root(names, read)
    if cvat_root is not None:
        return layouts.parse_cvat(images, txts, cvat_root, tracked, task=task, classes=classes)
    if task == Task.CLASSIFY and not yolo_labels and not jsons and not xmls:
        return parse_classification_folders(
            images, classes, txts=txts, data_yaml=data_yaml, read=tracked
        )
    if data_yaml is not None or yolo_labels:
        return parse_yolo(images, txts, data_yaml, tracked, task=task, classes=classes, jsons=jsons)
    labelme = [n for n in jsons if layouts.is_labelme(n, read)]
    if labelme:
        return layouts.parse_labelme(images, labelme, tracked, task=task, classes=classes)
    coco = [n for n in jsons if _is_coco(n, read)]
    if coco:
        return parse_coco(images, coco, tracked, task=task, classes=classes)
    if xmls:
        return parse_voc(images, xmls, tracked, classes=classes, txts=txts)
    return Parsed(
        format="images",
        class_names=list(classes),
        images={n: ParsedImage(n, split_from_path(n)) for n in images},
    )


# --- the rule: never a silent label file ---------------------------------------------------------

_NOT_LABELS = ("readme", "license", "licence", "changelog", "credits")


def _no_silent_label_file(parsed: Parsed, names: list[str], read_by_parser, read: Reader) -> None:
    """Every file that looks like labels and gave none gets a line in the report: the format
    it was taken for and why nothing came of it."""
    title = FORMAT_TITLES.get(parsed.format, parsed.format)
    mentioned = sorted(file for file, _, _ in parsed.skipped)

    def is_mentioned(name: str) -> bool:
        # Entries name a file, or a place in it ("labels/a.txt:3", "x.json annotation 7").
        i = bisect.bisect_left(mentioned, name)
        return i < len(mentioned) and mentioned[i].startswith(name)

    for name in names:
        low = name.lower()
        if not low.endswith(LABEL_LOOKING_SUFFIXES) or looks_like_image(name):
            continue
        count = parsed.label_counts.get(name)
        if count or is_mentioned(name):
            continue
        if count == 0:
            parsed.skipped.append((name, f"read as {title}: it holds no label", SKIP_EMPTY))
        elif name in read_by_parser:
            continue  # read for class names or splits (classes.txt, an ImageSets list)
        elif posixpath.basename(low).startswith(_NOT_LABELS):
            parsed.skipped.append((name, "not read: a text for people, not labels", SKIP_FILE))
        else:
            why = _why_not_read(name, read, title)
            parsed.skipped.append((name, why, SKIP_LABEL_FILE))


def _why_not_read(name: str, read: Reader, title: str) -> str:
    """What the file looked like, for a file no format took: its XML root, its JSON's shape,
    its first line."""
    if title == FORMAT_TITLES["images"]:
        lead = "not read: no format Kestrel reads matched the upload"
    else:
        lead = f"not read: the upload was read as {title}, and this file is not part of it"
    try:
        data = read(name, MAX_LABEL_FILE_BYTES * 256)
    except (LabelFileError, KeyError) as e:
        return f"{lead} ({e})"
    low = name.lower()
    seen = ""
    if low.endswith(".xml"):
        try:
            root = ElementTree.fromstring(data)
            seen = f"its root element is <{str(root.tag)[:40]}>"
        except (ElementTree.ParseError, DefusedXmlException):
            seen = "it is not well-formed XML"
    elif low.endswith((".json", ".ndjson")):
        try:
            doc = json.loads(data.decode("utf-8-sig"))
            if isinstance(doc, dict):
                keys = ", ".join(sorted(str(k) for k in doc)[:6])
                seen = f"a JSON object with keys {keys or '(none)'}"
            elif isinstance(doc, list):
                first = doc[0] if doc and isinstance(doc[0], dict) else {}
                keys = ", ".join(sorted(str(k) for k in first)[:6])
                seen = f"a JSON list of {len(doc)}" + (f" objects with keys {keys}" if keys else "")
            else:
                seen = "a JSON value that is not an object or a list"
        except (UnicodeDecodeError, ValueError):
            seen = "it is not valid JSON"
    else:
        text = data[:2000].decode("utf-8", "replace").strip().splitlines()
        seen = f"its first line is {text[0][:60]!r}" if text else "it is empty"
        if text and low.endswith(".txt") and _yolo_like(text[0]):
            seen += (
                " (YOLO label lines: Kestrel reads them from a labels/ folder beside images/, "
                "or with a data.yaml)"
            )
    return f"{lead}: {seen}"


def _yolo_like(line: str) -> bool:
    parts = line.split()
    if len(parts) < 5 or not parts[0].isdigit():
        return False
    try:
        return all(0 <= float(v) <= 1 for v in parts[1:])
    except ValueError:
        return False
