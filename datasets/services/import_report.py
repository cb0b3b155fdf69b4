"""What an import imported, then what it truly did not, impossible to misread.

The import (datasets/services/ingest.py) lists every entry it left out as (file, reason, kind),
the kinds of datasets/services/formats.py. Here they are grouped by kind, counted, and the most
common reasons named; the page shows them after what was imported, each expandable to its
files, and the whole list is kept beside the import as JSON for download. Declared classes that
got no label were not lost: they are one line of the summary, not a group of "not imported". An
import that found labels and imported none of them is a warning, not a success; one whose
images are all in the dataset already says so, and what became of their label files.
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


# Reports kept from before issue 33 list declared classes without labels as a group of "not
# imported"; they were never lost, so the page turns such a group into the summary's one line.
EMPTY_CLASS = "empty_class"
DUPLICATE = "duplicate"
ALREADY_IN_DATASET = "already in this dataset"  # the reason ingest gives a duplicate image
# In the order the page shows them, after what was imported: what loses labels first.
KIND_TITLES = {
    SKIP_NO_IMAGE: "Label files that matched no image",
    SKIP_LABEL_FILE: "Label files not read",
    SKIP_LABEL: "Labels refused",
    SKIP_EMPTY: "Label files with no labels",
    SKIP_IMAGE: "Images not imported",
    DUPLICATE: "Images already in this dataset (not imported again)",
    SKIP_NO_MASK: "Images without a mask or depth map (imported unlabelled)",
    SKIP_FILE: "Other files not used",
}
LABEL_KINDS = (SKIP_NO_IMAGE, SKIP_LABEL_FILE, SKIP_LABEL, SKIP_EMPTY)
UNREAD_LABEL_FILE_KINDS = (SKIP_NO_IMAGE, SKIP_LABEL_FILE)
FILES_SHOWN = 50  # per group on the page; the download has them all
REASONS_SHOWN = 8
CLASSES_KEPT = 200  # names of classes without labels kept in the report
CLASSES_NAMED = 10  # of them, named in the summary's line


def _kind_of(kind: str, reason: str) -> str:
    if kind == SKIP_IMAGE and reason == ALREADY_IN_DATASET:
        return DUPLICATE
    return kind if kind in KIND_TITLES else SKIP_FILE


def not_imported(skipped: list[tuple[str, str, str]]) -> list[dict]:
    """What the upload held and the import left out (files and labels), in KIND_TITLES' order,
    each group with its count, its commonest reasons and its first files; kinds with nothing in
    them are left out. Declared classes without labels are not here: nothing of them was lost
    (classes_without_labels_line)."""
    by_kind: dict[str, list[tuple[str, str]]] = {}
    for file, reason, kind in skipped:
        by_kind.setdefault(_kind_of(kind, reason), []).append((file, reason))
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


def classes_without_labels_line(names: list[str], count: int) -> str:
    """The summary's one line for the classes an import declared (a data.yaml's or COCO file's
    class list) that no imported label is of: "68 declared classes have no label yet: …"."""
    if not count:
        return ""
    shown = ", ".join(names[:CLASSES_NAMED])
    more = count - min(len(names), CLASSES_NAMED)
    tail = f" and {more:,} more" if more > 0 else ""
    if count == 1:
        return f"1 declared class has no label yet: {shown}."
    return f"{count:,} declared classes have no label yet: {shown}{tail}."


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def labels_found(skipped: list[tuple[str, str, str]], labels_imported: int) -> int:
    """Label files and labels the import saw: those it imported and those it left out."""
    return labels_imported + sum(1 for _, _, kind in skipped if kind in LABEL_KINDS)


def _unread_label_files(skipped: list[tuple[str, str, str]], *, one_image: bool) -> str:
    """What became of the label files not read, in words: "its label file was not read because
    …" (the commonest reason; a reason that does not say why is given in brackets)."""
    unread = [reason for _, reason, kind in skipped if kind in UNREAD_LABEL_FILE_KINDS]
    if not unread:
        return ""
    reason, n = Counter(unread).most_common(1)[0]
    why = (
        f"because {reason.removeprefix('not read: ')}"
        if reason.startswith("not read: ")
        else f"({reason})"
    )
    if len(unread) == 1:
        what = "its label file was" if one_image else "1 label file was"
    else:
        what = f"{_plural(len(unread), 'label file')} were"
    others = len(unread) - n
    also = f" ({others:,} more for other reasons, listed below)" if others else ""
    return f"{what} not read {why}{also}"


def warning_for(
    *,
    images_imported: int,
    labels_imported: int,
    skipped: list[tuple[str, str, str]],
    duplicate_labels: int = 0,
) -> str:
    """The page header's warning, or "" when nothing needs one. When nothing was imported
    because the images are already in the dataset, it says so first, and what became of their
    labels, instead of calling them images that were not imported."""
    found = labels_found(skipped, labels_imported)
    duplicates = sum(1 for _, reason, kind in skipped if _kind_of(kind, reason) == DUPLICATE)
    if duplicates and not images_imported:
        failed = sum(1 for _, reason, kind in skipped if _kind_of(kind, reason) == SKIP_IMAGE)
        head = f"{_plural(duplicates, 'image')} already in the dataset"
        if failed:
            head += f" and {_plural(failed, 'image')} not imported (see below)"
        if unread := _unread_label_files(skipped, one_image=duplicates == 1 and not failed):
            return f"{head}; {unread}."
        if duplicate_labels:
            it, their = ("it", "its") if duplicates == 1 else ("they", "their")
            labels = _plural(duplicate_labels, "label")
            return (
                f"{head}, so neither {it} nor {their} {labels} in the upload were imported again."
            )
        return f"{head}: nothing new was imported."
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
