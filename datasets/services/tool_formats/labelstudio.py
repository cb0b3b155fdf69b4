"""Label Studio's JSON and JSON-MIN exports.

The structures are Label Studio's (docs: guide/export.md, guide/task_format.md, the tags' pages;
its converter: label_studio_sdk/converter/converter.py, utils.py, brush.py, exports/yolo.py):

- JSON ("label-studio"): a list of tasks `{id, data: {image: path}, annotations: [{result,
  was_cancelled, ...}], predictions, drafts, file_upload}`. Each result is `{type, value,
  original_width, original_height, id, parentID, from_name, to_name}`, its numbers in percent
  (0–100) of the image; a rectangle's `rotation` turns it clockwise about its top-left corner,
  in pixels (utils.py::convert_annotation_to_yolo_obb).
- JSON-MIN ("label-studio-min"): one flat record per annotation: the task's data, its id, one key
  per control tag of the labelling config (named by its `name=`) holding its results' values
  (with original_width/original_height), then annotator, annotation_id, created_at, updated_at,
  lead_time (converter.py::convert_to_json_min). A single choice or text is written as a bare
  string (utils.py::prettify_result), so shapes are told apart by their values' keys.

Image paths are Label Studio's: `/data/upload/<project>/<8 hex>-<name>` for uploads,
`/data/local-files/?d=<path>` for local storage, or a URL; they are matched to the upload's files.

Here: the claim, and the two layouts read into labelstudio_regions.py's TaskReader, which finds
each task's image with labelstudio_match.py and groups keypoints with labelstudio_pose.py.
"""

import json
import math
from collections import Counter

from datasets.models import Task
from datasets.services.formats import (
    MAX_META_FILE_BYTES,
    SKIP_LABEL,
    SKIP_LABEL_FILE,
    LabelFileError,
    Parsed,
    Reader,
    _text,
)
from datasets.services.tool_formats.common import MAX_PEEKED, json_not_per_image, list_or_empty
from datasets.services.tool_formats.labelstudio_match import (
    MIN_META_KEYS,
    Result,
    as_list,
    image_key_of,
    is_task,
    looks_like_image_ref,
    min_type,
    peek,
)
from datasets.services.tool_formats.labelstudio_pose import order_rule
from datasets.services.tool_formats.labelstudio_regions import TaskReader

# --- recognising ---------------------------------------------------------------------------------


def claim_label_studio(names: list[str], read: Reader) -> list[str]:
    """The upload's Label Studio JSON and JSON-MIN files. Only the shallowest MAX_PEEKED JSON
    files not named like an image are opened to decide (an upload of 100,000 LabelMe files is
    not read once more here); when one is Label Studio's, the others are looked at too (its
    target storages write one task a file)."""
    candidates = json_not_per_image(names)
    if not any(peek(n, read) for n in candidates[:MAX_PEEKED]):
        return []
    return [n for n in sorted(candidates) if peek(n, read)]


# --- reading -------------------------------------------------------------------------------------


def _size(result: dict) -> tuple[int, int] | None:
    w, h = result.get("original_width"), result.get("original_height")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in (w, h)):
        return None
    if not (math.isfinite(w) and math.isfinite(h) and w > 0 and h > 0):
        return None
    return (int(w), int(h)) if int(w) == w and int(h) == h else None


def _ident(value) -> str | None:
    """A result's id, parentID, or a relation's end, as a key (None if it is not one)."""
    ok = isinstance(value, str | int) and not isinstance(value, bool)
    return str(value) if ok and str(value) else None


# --- the two layouts -----------------------------------------------------------------------------


def _json_tasks(reader: TaskReader, file: str, tasks: list, said: Counter) -> None:
    for n, item in enumerate(tasks, 1):
        if not isinstance(item, dict) or not is_task(item):
            reader.skipped.append(
                (f"{file} task #{n}", "not a Label Studio task (no data and annotations)",
                 SKIP_LABEL)
            )  # fmt: skip
            continue
        which = f"task {_ident(item.get('id')) or f'#{n}'}"
        place = f"{file} {which}"
        said["tasks"] += 1
        said["predictions"] += len(list_or_empty(item.get("predictions")))
        said["drafts"] += len(list_or_empty(item.get("drafts")))
        annotations = [a for a in list_or_empty(item.get("annotations") or item.get("completions"))
                       if isinstance(a, dict)]  # fmt: skip
        done = [a for a in annotations if not (a.get("was_cancelled") or a.get("skipped"))]
        said["cancelled"] += len(annotations) - len(done)
        if len(done) > 1:
            said["several"] += 1
        results = []
        for m, r in enumerate(list_or_empty(done[0].get("result")) if done else [], 1):
            if not isinstance(r, dict):
                continue
            rid = _ident(r.get("id"))
            value = r.get("value") if isinstance(r.get("value"), dict) else {}
            if r.get("type") == "relation":
                value = {"from_id": _ident(r.get("from_id")), "to_id": _ident(r.get("to_id"))}
            results.append(
                Result(
                    type=str(r.get("type") or "?").lower(),
                    value=value,
                    where=f"{place} result {rid or m}",
                    size=_size(r),
                    id=_ident(rid),
                    parent=_ident(r.get("parentID")),
                    from_name=str(r.get("from_name") or ""),
                    image_rotation=_rotation(r),
                )
            )
        data = item["data"]
        reader.read_task(file, which, _task_image(data), item.get("file_upload"), results, data)


def _task_image(data: dict):
    """The image path of a task's data: the key holding one, else `image` (Label Studio's own
    examples write paths without a suffix, "/image1")."""
    key = image_key_of([data]) or "image"
    return data.get(key)


def _rotation(r: dict) -> float:
    v = r.get("image_rotation") or 0
    return float(v) % 360 if isinstance(v, int | float) and not isinstance(v, bool) else 0.0


def _min_records(reader: TaskReader, file: str, records: list, said: Counter, notes) -> None:
    rows = [r for r in records if isinstance(r, dict)]
    image_key = image_key_of(rows)
    if image_key is None:
        reader.skipped.append((file, "taken for Label Studio JSON-MIN, but no key of its "
                               "records holds an image path", SKIP_LABEL_FILE))  # fmt: skip
        return
    texts = sorted(
        {
            k
            for r in rows
            for k, v in r.items()
            if isinstance(v, str) and k not in MIN_META_KEYS and not looks_like_image_ref(v)
        }
    )
    has_choices = any(min_type(v) == "choices" for r in rows for v in r.values())
    choice_key = None
    if texts and reader.task == Task.CLASSIFY and not has_choices and len(texts) == 1:
        choice_key = texts[0]
        notes.append(
            f"{file}: image classes read from its text field {choice_key!r} (JSON-MIN writes a "
            "single choice as plain text)"
        )
    elif texts:
        notes.append(
            f"{file}: text fields {', '.join(texts)[:120]} not read (JSON-MIN writes a single "
            "choice or text as plain text: Kestrel reads one as the image class only in a "
            "classify dataset, and only where it is the one text field)"
        )
    unread: set[str] = set()
    seen: set = set()
    for n, record in enumerate(records, 1):
        if not isinstance(record, dict):
            reader.skipped.append((f"{file} record {n}", "not a JSON-MIN record", SKIP_LABEL))
            continue
        tid = _ident(record.get("id"))
        which = f"task {tid}" if tid is not None else f"record {n}"
        place = f"{file} {which}"
        if tid is not None and tid in seen:
            said["several"] += 1  # one record per annotation: the first (the newest) is read
            continue
        seen.add(tid)
        said["tasks"] += 1
        results = []
        for key, value in record.items():
            if key in MIN_META_KEYS or key == image_key:
                continue
            if isinstance(value, str):
                if key == choice_key:
                    results.append(Result("choices", {"choices": [value]}, f"{place} {key}"))
                continue
            items = as_list(value)
            for m, item in enumerate(items, 1):
                kind = min_type(item)
                if kind is None:
                    if isinstance(item, dict) and "original_width" in item:
                        kind = "unknown"
                    else:
                        unread.add(key)
                        continue
                results.append(
                    Result(
                        type=kind,
                        value=item,
                        where=f"{place} {key}" + (f" {m}" if len(items) > 1 else ""),
                        size=_size(item),
                        id=_ident(item.get("id")),
                        parent=_ident(item.get("parentID")),
                        from_name=key,
                        image_rotation=_rotation(item),
                    )
                )
        reader.read_task(file, which, record.get(image_key), None, results)
    if unread:
        notes.append(
            f"{file}: fields {', '.join(sorted(unread))[:120]} not read: they hold no Label "
            "Studio result"
        )


def parse_label_studio(images, files, read: Reader, *, task, classes, names) -> Parsed:
    reader = TaskReader(images, task, classes)
    said: Counter = Counter()
    notes: list[str] = []
    kinds: Counter = Counter()
    read_files: list[str] = []
    for name in files:
        try:
            doc = json.loads(_text(read, name, MAX_META_FILE_BYTES))
        except (LabelFileError, ValueError) as e:
            reader.skipped.append((name, f"unreadable JSON ({e})", SKIP_LABEL_FILE))
            continue
        tasks = doc if isinstance(doc, list) else [doc]
        first = next((t for t in tasks if isinstance(t, dict)), {})
        read_files.append(name)
        if is_task(first):
            kinds["label-studio"] += 1
            _json_tasks(reader, name, tasks, said)
        else:
            kinds["label-studio-min"] += 1
            _min_records(reader, name, tasks, said, notes)
    class_names, counts, kpt_shape = reader.finish()
    label_counts = {name: counts.get(name, 0) for name in read_files}
    fmt = "label-studio" if kinds["label-studio"] else "label-studio-min"
    unnamed = [i for i in images if i not in reader.owner]
    lead = (
        f"{said['tasks']} Label Studio tasks read from {', '.join(read_files)[:200]}"
        if fmt == "label-studio"
        else f"{said['tasks']} Label Studio JSON-MIN records read from "
        f"{', '.join(read_files)[:200]}"
    )
    return Parsed(
        format=fmt,
        class_names=class_names,
        images=reader.parsed,
        skipped=reader.skipped,
        task=Task.POSE if kpt_shape else None,
        keypoint_shape=kpt_shape,
        notes=[lead, *notes, *_notes(reader, said, fmt, unnamed)],
        label_counts=label_counts,
    )


def _notes(reader: TaskReader, said: Counter, fmt: str, unnamed: list[str]) -> list[str]:
    out = []
    if reader.finder.matched:
        rules = "; ".join(f"{n} {rule}" for rule, n in reader.finder.matched.most_common())
        out.append(f"tasks' images matched to the upload's files: {rules}")
    if reader.finder.same_name:
        out.append(
            f"{reader.finder.same_name} images chosen among uploaded files of the same name by "
            "the folders of their Label Studio path"
        )
    if said["several"]:
        which = (
            "the first not cancelled annotation of each was read"
            if fmt == "label-studio"
            else "the first record of each (Label Studio writes the newest first) was read"
        )
        out.append(f"{said['several']} tasks had several annotations: {which}")
    if said["cancelled"]:
        out.append(f"{said['cancelled']} cancelled (skipped) annotations left out")
    if said["predictions"] or said["drafts"]:
        out.append(
            f"{said['predictions']} predictions and {said['drafts']} drafts left out: a model's "
            "suggestions and unsubmitted work are not labels"
        )
    if reader.said["clipped"]:
        out.append(
            f"{reader.said['clipped']} regions reaching past the image's edge cut at the edge"
        )
    if reader.said["no_size"]:
        out.append(
            f"{reader.said['no_size']} tasks have results without original_width/"
            "original_height: their percent coordinates were imported without checking the "
            "image's size"
        )
    for task, how in (
        ("detect", "the box around each"),
        ("segment", "polygons of their 4 corners"),
        ("pose", "the box around each"),
    ):
        if n := reader.said[f"rotated_{task}"]:
            out.append(
                f"{n} rotated rectangles imported as {how} (a {task} dataset has no rotated boxes)"
            )
    if reader.said["polygon_obb"]:
        out.append(
            f"{reader.said['polygon_obb']} polygons imported as the smallest rotated box around "
            "each"
        )
    if reader.said["masks"]:
        how = {
            Task.DETECT: "the box around each",
            Task.SEGMENT: f"{reader.said['mask_regions']} polygons (one per region)",
            Task.OBB: "the smallest rotated box around each one's largest region",
        }.get(reader.task, "labels")
        out.append(f"{reader.said['masks']} brush masks decoded and imported as {how}")
    if reader.poses.order:
        order = reader.poses.order
        out.append(f"keypoint order ({order_rule(order)}): {', '.join(order)[:300]}")
    if reader.said["kp_contained"]:
        out.append(
            f"{reader.said['kp_contained']} keypoints without a parentID put in the smallest "
            "rectangle that holds them"
        )
    if reader.said["kp_boxed"]:
        out.append(
            f"{reader.said['kp_boxed']} objects of keypoints without a rectangle: boxed around "
            "their keypoints, named after their keypoint tag"
        )
    if unnamed:
        out.append(f"{len(unnamed)} images no task names imported without labels")
    return out
