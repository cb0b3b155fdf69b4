"""What an import did not import, said first and impossible to misread.

The import (datasets/services/ingest.py) lists every entry it left out as (file, reason, kind),
the kinds of datasets/services/formats.py. Here they are grouped by kind, counted, and the most
common reasons named; the page shows the groups first, each expandable to its files, and the
whole list is kept beside the import as JSON for download. An import that found labels and
imported none of them is a warning, not a success.
"""

import json
from collections import Counter

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage

from datasets.services.formats import (
    SKIP_EMPTY,
    SKIP_FILE,
    SKIP_IMAGE,
    SKIP_LABEL,
    SKIP_LABEL_FILE,
    SKIP_NO_IMAGE,
    SKIP_NO_MASK,
)

# What the report and the README call each format.
FORMAT_TITLES = {
    "yolo": "Ultralytics YOLO",
    "coco": "COCO",
    "voc": "Pascal VOC",
    "cvat-yolo": "CVAT YOLO 1.1",
    "cvat-images": "CVAT for images 1.1",
    "cvat-video": "CVAT for video 1.1",
    "label-studio": "Label Studio JSON",
    "label-studio-min": "Label Studio JSON-MIN",
    "labelme": "LabelMe",
    "ndjson": "Ultralytics NDJSON",
    "datumaro": "Datumaro",
    "supervisely": "Supervisely",
    "via": "VGG Image Annotator (VIA)",
    "createml": "CreateML",
    "kitti": "KITTI",
    "openimages": "Open Images CSV",
    "classification-folders": "classification folders",
    "yolo-semantic": "Ultralytics semantic masks",
    "cityscapes": "Cityscapes",
    "voc-segmentation": "Pascal VOC segmentation masks",
    "mask-folders": "image and mask folders",
    "yolo-depth": "Ultralytics depth maps",
    "depth-folders": "image and depth map folders",
    "images": "images only",
}


def format_title(fmt: str) -> str:
    return FORMAT_TITLES.get(fmt, fmt)


EMPTY_CLASS = "empty_class"
# In the order the page shows them: what loses labels first.
KIND_TITLES = {
    SKIP_NO_IMAGE: "Label files that matched no image",
    SKIP_LABEL_FILE: "Label files not read",
    SKIP_LABEL: "Labels refused",
    SKIP_EMPTY: "Label files with no labels",
    SKIP_IMAGE: "Images not imported",
    SKIP_NO_MASK: "Images without a mask or depth map (imported unlabelled)",
    EMPTY_CLASS: "Classes with no labels",
    SKIP_FILE: "Other files not used",
}
LABEL_KINDS = (SKIP_NO_IMAGE, SKIP_LABEL_FILE, SKIP_LABEL, SKIP_EMPTY)
FILES_SHOWN = 50  # per group on the page; the download has them all
REASONS_SHOWN = 8


def not_imported(skipped: list[tuple[str, str, str]], *, empty_classes: list[str]) -> list[dict]:
    """The groups, in KIND_TITLES' order, each with its count, its commonest reasons and its
    first files; kinds with nothing in them are left out."""
    by_kind: dict[str, list[tuple[str, str]]] = {}
    for file, reason, kind in skipped:
        by_kind.setdefault(kind if kind in KIND_TITLES else SKIP_FILE, []).append((file, reason))
    if empty_classes:
        by_kind[EMPTY_CLASS] = [
            (name, "created, but no label of it was imported") for name in empty_classes
        ]
    groups = []
    for kind, title in KIND_TITLES.items():
        entries = by_kind.get(kind)
        if not entries:
            continue
        reasons = Counter(reason for _, reason in entries)
        groups.append(
            {
                "kind": kind,
                "title": title,
                "count": len(entries),
                "reasons": [
                    {"reason": r, "count": n} for r, n in reasons.most_common(REASONS_SHOWN)
                ],
                "files": [{"file": f, "reason": r} for f, r in entries[:FILES_SHOWN]],
            }
        )
    return groups


def labels_found(skipped: list[tuple[str, str, str]], labels_imported: int) -> int:
    """Label files and labels the import saw: those it imported and those it left out."""
    return labels_imported + sum(1 for _, _, kind in skipped if kind in LABEL_KINDS)


def warning_for(*, images_imported: int, labels_imported: int, found: int) -> str:
    """The page header's warning, or "" when nothing needs one."""
    if found and not labels_imported:
        what = (
            f"{found:,} label file{'s' if found != 1 else ''} or label{'s' if found != 1 else ''}"
        )
        return (
            f"Images were imported, but none of the {what} found: see what was not imported below."
            if images_imported
            else f"Nothing was imported: none of the images, and none of the {what} found."
        )
    if not images_imported:
        return "No image was imported: see what was not imported below."
    if not labels_imported:
        return (
            f"No labels: the upload held no label file, so all {images_imported:,} "
            f"image{'s' if images_imported != 1 else ''} are imported unlabelled."
        )
    return ""


REPORTS_DIR = "reports/imports"


def report_key(import_id: int) -> str:
    return f"{REPORTS_DIR}/{import_id}.json"


def import_reports_collect_garbage() -> int:
    """Delete the kept reports of imports that are gone (with their dataset or workspace).
    Returns how many. Run by the periodic garbage collection, beside the blobs'."""
    from datasets.models import Import

    try:
        _, names = default_storage.listdir(REPORTS_DIR)
    except FileNotFoundError:
        return 0
    ids = {int(name[:-5]): name for name in names if name.endswith(".json") and name[:-5].isdigit()}
    keys, alive = list(ids), set()
    for start in range(0, len(keys), 1000):
        wanted = keys[start : start + 1000]
        alive.update(Import.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    gone = [ids[pk] for pk in ids if pk not in alive]
    for name in gone:
        default_storage.delete(f"{REPORTS_DIR}/{name}")
    return len(gone)


def full_report_save(import_id: int, report: dict, skipped: list[tuple[str, str, str]]) -> None:
    """The report with every entry left out, for the download (the database keeps the first
    ones only)."""
    whole = {
        **report,
        "skipped": [{"file": f, "reason": r, "kind": k} for f, r, k in skipped],
    }
    key = report_key(import_id)
    default_storage.delete(key)
    default_storage.save(key, ContentFile(json.dumps(whole, ensure_ascii=False).encode()))


def full_report(imp) -> dict:
    """What the download serves: the whole report when it was kept, else the database's."""
    key = report_key(imp.pk)
    if default_storage.exists(key):
        with default_storage.open(key, "rb") as f:
            return json.load(f)
    return dict(imp.report or {})
