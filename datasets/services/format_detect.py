"""Recognise what an upload holds (from its entry names, and a peek at small files) and hand
it to the parser of its layout: formats.py's (YOLO, COCO, VOC, classification folders) or
formats_layouts.py's (CVAT, Label Studio, LabelMe, Ultralytics NDJSON, ...)."""

from datasets.models import Task
from datasets.services import formats_layouts as layouts
from datasets.services.formats import (
    SKIP_LABEL_FILE,
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


def detect_and_parse(names: list[str], read: Reader, *, task: str, classes: list[str]) -> Parsed:
    """Recognise the format from the entry names and parse it. `classes` are the dataset's."""
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
        return layouts.parse_ndjson(images, ndjson, names, read, task=task, classes=classes)
    cvat = layouts.cvat_root(names, read)
    if cvat is not None:
        return layouts.parse_cvat(images, txts, cvat, read, task=task, classes=classes)
    if task == Task.CLASSIFY and not yolo_labels and not jsons and not xmls:
        return parse_classification_folders(
            images, classes, txts=txts, data_yaml=data_yaml, read=read
        )
    if data_yaml is not None or yolo_labels:
        return parse_yolo(images, txts, data_yaml, read, task=task, classes=classes, jsons=jsons)
    labelme = [n for n in jsons if layouts.is_labelme(n, read)]
    if labelme:
        unread = [n for n in txts + jsons + xmls if n not in labelme]
        return layouts.parse_labelme(
            images, labelme, read, task=task, classes=classes, unread=unread
        )
    coco = [n for n in jsons if _is_coco(n, read)]
    if coco:
        return parse_coco(images, coco, read, task=task, classes=classes)
    if xmls:
        return parse_voc(images, xmls, read, classes=classes, txts=txts)
    # Label files in a layout Kestrel does not know: listed, never dropped in silence.
    unread = [n for n in txts + jsons + xmls if n not in yamls]
    return Parsed(
        format="images",
        class_names=list(classes),
        images={n: ParsedImage(n, split_from_path(n)) for n in images},
        skipped=[
            (n, "not read: no layout Kestrel knows puts labels here", SKIP_LABEL_FILE)
            for n in unread
        ],
    )
