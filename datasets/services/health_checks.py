"""The dataset health checks, as pure functions of what was read: the images' rows and decoded
bytes, the labels' rows, the classes. Each returns findings (kind, severity, message, image ids);
datasets.services.health reads the rows, runs these and stores what they find.

The images' rows are (id, filename, split, label_count, blob id, blob sha256, stored phash,
width, height), as datasets.services.health reads them.
"""

import math
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from PIL import Image as PILImage

from datasets.models import LabelKind, Severity, Split, Task

MAX_IMAGE_IDS = 1000  # per finding; the message says the total
NEAR_DUPLICATE_DISTANCE = 4  # Hamming distance between 64-bit hashes
EDGE_TOLERANCE = 0.01  # a box may stick out of the image by 1 % of its size, as rounding does
POINT_EPSILON = 1e-6
TINY_BOX_PX = 2
TINY_BOX_AREA = 0.0001  # of the image
IMBALANCE_RATIO = 10

# The one label kind that belongs to each task; anything else is drawn but not trained on.
TASK_LABEL_KIND = {
    Task.DETECT: LabelKind.BOX,
    Task.SEGMENT: LabelKind.POLYGON,
    Task.POSE: LabelKind.KEYPOINTS,
    Task.OBB: LabelKind.OBB,
    Task.CLASSIFY: LabelKind.TAG,
}


class Kind:
    """What each check calls its findings (HealthFinding.kind)."""

    UNREADABLE = "unreadable"
    LEAKAGE = "leakage"
    NEAR_DUPLICATE = "near_duplicate"
    LABEL_OUTSIDE = "label_outside"
    LABEL_MALFORMED = "label_malformed"
    LABEL_KIND = "label_kind"
    TINY_BOX = "tiny_box"
    CLASS_IMBALANCE = "class_imbalance"
    CLASS_EMPTY = "class_empty"
    UNLABELLED = "unlabelled"
    NO_VAL = "no_val"


# Within a severity, the report lists findings in this order: the ones that spoil most first.
KIND_ORDER = [
    Kind.UNREADABLE,
    Kind.LEAKAGE,
    Kind.LABEL_OUTSIDE,
    Kind.LABEL_MALFORMED,
    Kind.NO_VAL,
    Kind.CLASS_EMPTY,
    Kind.CLASS_IMBALANCE,
    Kind.NEAR_DUPLICATE,
    Kind.LABEL_KIND,
    Kind.TINY_BOX,
    Kind.UNLABELLED,
]
SEVERITY_ORDER = {Severity.ERROR: 0, Severity.WARNING: 1, Severity.INFO: 2}


# --- perceptual hash --------------------------------------------------------------------------


def dhash(img: PILImage.Image) -> int:
    """64-bit difference hash: is each of 8×8 cells darker than its right neighbour.

    Pure Pillow and integer comparisons, so every worker (with or without numpy) computes the
    same bits for the same bytes, which matters because the hash is stored on the shared Blob.
    Brightening, re-encoding or resizing a photo moves it by a few bits; distinct photos differ
    by about half of them.
    """
    cells = img.convert("L").resize((9, 8), PILImage.Resampling.BOX).tobytes()
    bits = 0
    for row in range(8):
        base = row * 9
        for col in range(8):
            bits = (bits << 1) | (cells[base + col] < cells[base + col + 1])
    return bits


def hash_to_db(value: int) -> int:
    """Unsigned 64-bit → the signed range of a BigIntegerField."""
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclass(frozen=True)
class DecodeResult:
    blob_id: int
    phash: int | None  # unsigned; None when unreadable
    error: str = ""


def near_duplicate_pairs(hashes: dict[int, int], max_distance: int) -> list[tuple[int, int]]:
    """Pairs of keys whose hashes differ by at most `max_distance` bits.

    Pigeonhole: split the 64 bits into max_distance + 1 bands; two hashes that close agree
    exactly on at least one band, so only keys sharing a band value are compared. Equal hashes
    are grouped first, so a thousand blank images make one bucket entry, not a million pairs.
    """
    by_hash: dict[int, list[int]] = defaultdict(list)
    for key, value in hashes.items():
        by_hash[value].append(key)
    pairs: list[tuple[int, int]] = []
    for keys in by_hash.values():
        pairs.extend((keys[0], other) for other in keys[1:])

    bands = max_distance + 1
    widths = [64 // bands + (1 if i < 64 % bands else 0) for i in range(bands)]
    unique = list(by_hash)
    seen: set[tuple[int, int]] = set()
    shift = 0
    for width in widths:
        mask = (1 << width) - 1
        buckets: dict[int, list[int]] = defaultdict(list)
        for value in unique:
            buckets[(value >> shift) & mask].append(value)
        for bucket in buckets.values():
            for i, a in enumerate(bucket):
                for b in bucket[i + 1 :]:
                    pair = (a, b) if a < b else (b, a)
                    if pair in seen or (a ^ b).bit_count() > max_distance:
                        continue
                    seen.add(pair)
                    pairs.append((by_hash[a][0], by_hash[b][0]))
        shift += width
    return pairs


def _groups(keys: Iterable[int], pairs: list[tuple[int, int]]) -> list[list[int]]:
    """Connected groups (union-find) of size ≥ 2."""
    parent = {k: k for k in keys}

    def find(k: int) -> int:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for a, b in pairs:
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    members: dict[int, list[int]] = defaultdict(list)
    for k in parent:
        members[find(k)].append(k)
    return sorted((sorted(g) for g in members.values() if len(g) > 1), key=lambda g: g[0])


# --- label geometry ---------------------------------------------------------------------------


@dataclass
class LabelProblems:
    outside: Counter = field(default_factory=Counter)  # image id -> labels
    malformed: Counter = field(default_factory=Counter)
    tiny: Counter = field(default_factory=Counter)
    wrong_kind: Counter = field(default_factory=Counter)  # kind -> labels
    wrong_kind_images: set = field(default_factory=set)
    per_class: Counter = field(default_factory=Counter)  # class id -> labels
    class_images: dict = field(default_factory=lambda: defaultdict(set))


def _numbers(data) -> list[float] | None:
    if not isinstance(data, list):
        return None
    out = []
    for v in data:
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            return None
        out.append(float(v))
    return out


def _in_range(v: float, tol: float) -> bool:
    return -tol <= v <= 1 + tol


def _box_problem(cx: float, cy: float, w: float, h: float) -> bool:
    """Ultralytics drops a whole label file with a value outside 0..1; edges get a tolerance."""
    if not all(_in_range(v, POINT_EPSILON) for v in (cx, cy, w, h)):
        return True
    return not (
        _in_range(cx - w / 2, EDGE_TOLERANCE)
        and _in_range(cx + w / 2, EDGE_TOLERANCE)
        and _in_range(cy - h / 2, EDGE_TOLERANCE)
        and _in_range(cy + h / 2, EDGE_TOLERANCE)
    )


def _is_tiny(w_px: float, h_px: float, area: float) -> bool:
    return w_px < TINY_BOX_PX or h_px < TINY_BOX_PX or area < TINY_BOX_AREA


def label_geometry(
    kind: str, data, width: int, height: int, keypoint_dims: int | None
) -> tuple[str, bool]:
    """('ok' | 'outside' | 'malformed', tiny?) for one label on an image of width×height px."""
    nums = _numbers(data)
    if nums is None:
        return "malformed", False
    if kind == LabelKind.TAG:
        return "ok", False
    if kind == LabelKind.BOX or kind == LabelKind.KEYPOINTS:
        if len(nums) < 4:
            return "malformed", False
        cx, cy, w, h = nums[:4]
        if w <= 0 or h <= 0:
            return "malformed", False
        outside = _box_problem(cx, cy, w, h)
        if kind == LabelKind.KEYPOINTS:
            rest = nums[4:]
            dims = keypoint_dims or (3 if len(rest) % 3 == 0 else 2)
            if dims not in (2, 3) or len(rest) % dims:
                return "malformed", False
            for i in range(0, len(rest), dims):
                x, y = rest[i], rest[i + 1]
                visible = dims == 2 or rest[i + 2] > 0
                # an unlabelled keypoint is written as 0,0,0; only placed points must be inside
                if visible and not (_in_range(x, EDGE_TOLERANCE) and _in_range(y, EDGE_TOLERANCE)):
                    outside = True
        return ("outside" if outside else "ok"), _is_tiny(w * width, h * height, w * h)
    if kind == LabelKind.POLYGON:
        if len(nums) < 6 or len(nums) % 2:
            return "malformed", False
        xs, ys = nums[0::2], nums[1::2]
        outside = not all(_in_range(v, EDGE_TOLERANCE) for v in nums)
        w, h = max(xs) - min(xs), max(ys) - min(ys)
        return ("outside" if outside else "ok"), _is_tiny(w * width, h * height, w * h)
    if kind == LabelKind.OBB:
        if len(nums) != 8:
            return "malformed", False
        xs, ys = nums[0::2], nums[1::2]
        # Rotated boxes cut by a tile's edge keep corners past it (DOTA tiles do, by several
        # per cent) and train fine; a box whose centre is outside does not belong to the image.
        outside = not (
            _in_range(sum(xs) / 4, POINT_EPSILON) and _in_range(sum(ys) / 4, POINT_EPSILON)
        )
        side_a = math.hypot((xs[1] - xs[0]) * width, (ys[1] - ys[0]) * height)
        side_b = math.hypot((xs[2] - xs[1]) * width, (ys[2] - ys[1]) * height)
        area = side_a * side_b / (width * height) if width and height else 0.0
        return ("outside" if outside else "ok"), _is_tiny(side_a, side_b, area)
    return "malformed", False


# --- the checks -------------------------------------------------------------------------------


def _kind_label(kind: str) -> str:
    return LabelKind(kind).label.lower() if kind in LabelKind.values else kind


def _ids(ids: Iterable[int]) -> list[int]:
    return list(ids)[:MAX_IMAGE_IDS]


def plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else plural or word + 's'}"


def _shown(total: int) -> str:
    return f" (the first {MAX_IMAGE_IDS} are linked)" if total > MAX_IMAGE_IDS else ""


def _names(names: list[str], limit: int = 5) -> str:
    quoted = [f"“{n}”" for n in names[:limit]]
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(quoted) + more


def _finding(kind: str, severity: str, message: str, image_ids: Iterable[int] = ()) -> dict:
    if len(message) > 500:
        message = message[:499] + "…"
    return {"kind": kind, "severity": severity, "message": message, "image_ids": _ids(image_ids)}


def pixel_findings(images: list[tuple], decoded: dict[int, DecodeResult]) -> list[dict]:
    """Unreadable files, then near-duplicates and train/val leakage by perceptual hash.
    `decoded`: each image's blob id → what decoding its bytes gave."""
    findings = []
    broken = [(row[0], row[1], decoded[row[4]].error) for row in images if decoded[row[4]].error]
    if broken:
        examples = "; ".join(f"{name}: {why}" for _, name, why in broken[:3])
        findings.append(
            _finding(
                Kind.UNREADABLE,
                Severity.ERROR,
                f"{plural(len(broken), 'image')} cannot be decoded (missing, truncated or "
                f"corrupt) and will be skipped by training{_shown(len(broken))}. {examples}",
                (image_id for image_id, _, _ in broken),
            )
        )

    hashes = {row[0]: decoded[row[4]].phash for row in images if decoded[row[4]].phash is not None}
    split_of = {row[0]: row[2] for row in images}
    groups = _groups(hashes, near_duplicate_pairs(hashes, NEAR_DUPLICATE_DISTANCE))
    leaked, near = [], []
    for group in groups:
        splits = {split_of[i] for i in group}
        if Split.TRAIN in splits and splits & {Split.VAL, Split.TEST}:
            leaked.append(group)
        else:
            near.append(group)
    if leaked:
        ids = [i for g in leaked for i in g]
        findings.append(
            _finding(
                Kind.LEAKAGE,
                Severity.ERROR,
                f"Leakage: train and val/test share {plural(len(leaked), 'picture')} "
                f"({plural(len(ids), 'image')} that are the same or nearly the same picture), "
                f"so validation scores will look better than the model is{_shown(len(ids))}.",
                ids,
            )
        )
    if near:
        ids = [i for g in near for i in g]
        findings.append(
            _finding(
                Kind.NEAR_DUPLICATE,
                Severity.WARNING,
                f"Near-duplicates: {plural(len(ids), 'image')} in {plural(len(near), 'group')} "
                f"look the same as another image in the same split; copies add little but "
                f"weight{_shown(len(ids))}.",
                ids,
            )
        )
    return findings


def label_findings(
    *,
    task: str,
    keypoint_shape,
    images: list[tuple],
    labels: Iterable[tuple],
    classes: list[tuple[int, str]],
) -> list[dict]:
    """Labels outside the image, malformed, of a kind the task does not train on, tiny; classes
    empty or rare; images without labels. `labels`: (image id, class id, kind, data) rows;
    `classes`: (id, name) of every class."""
    size = {row[0]: (row[7], row[8]) for row in images}
    expected_kind = TASK_LABEL_KIND.get(task)
    dims = None
    if isinstance(keypoint_shape, list) and len(keypoint_shape) == 2:
        dims = keypoint_shape[1]
    p = LabelProblems()
    for image_id, class_id, kind, data in labels:
        p.per_class[class_id] += 1
        p.class_images[class_id].add(image_id)
        if kind != expected_kind:
            p.wrong_kind[kind] += 1
            p.wrong_kind_images.add(image_id)
        if image_id not in size:  # added since the images were read; the next run sees it
            continue
        width, height = size[image_id]
        verdict, tiny = label_geometry(kind, data, width, height, dims)
        if verdict == "outside":
            p.outside[image_id] += 1
        elif verdict == "malformed":
            p.malformed[image_id] += 1
        if tiny:
            p.tiny[image_id] += 1

    findings = []
    if p.outside:
        n = sum(p.outside.values())
        findings.append(
            _finding(
                Kind.LABEL_OUTSIDE,
                Severity.ERROR,
                f"Labels outside the image: {plural(n, 'label')} on "
                f"{plural(len(p.outside), 'image')} (a coordinate below 0 or above 1, or an "
                f"edge more than {EDGE_TOLERANCE:.0%} past the border){_shown(len(p.outside))}.",
                sorted(p.outside),
            )
        )
    if p.malformed:
        n = sum(p.malformed.values())
        findings.append(
            _finding(
                Kind.LABEL_MALFORMED,
                Severity.ERROR,
                f"Malformed labels: {plural(n, 'label')} on {plural(len(p.malformed), 'image')} "
                f"(wrong number of coordinates, zero size, or not numbers)"
                f"{_shown(len(p.malformed))}.",
                sorted(p.malformed),
            )
        )
    if p.wrong_kind:
        kinds = ", ".join(f"{n} {_kind_label(k)}" for k, n in p.wrong_kind.most_common())
        findings.append(
            _finding(
                Kind.LABEL_KIND,
                Severity.WARNING,
                f"Labels a {Task(task).label.lower()} model does not train on: "
                f"{kinds} (expected {_kind_label(expected_kind)} labels), on "
                f"{plural(len(p.wrong_kind_images), 'image')}{_shown(len(p.wrong_kind_images))}.",
                sorted(p.wrong_kind_images),
            )
        )
    if p.tiny:
        n = sum(p.tiny.values())
        findings.append(
            _finding(
                Kind.TINY_BOX,
                Severity.WARNING,
                f"Tiny boxes: {plural(n, 'label')} on {plural(len(p.tiny), 'image')} under "
                f"{TINY_BOX_PX} px wide or high, or under {TINY_BOX_AREA:.2%} of the image; "
                f"often a stray click{_shown(len(p.tiny))}.",
                sorted(p.tiny),
            )
        )
    findings += _class_findings(classes, p)
    if task != Task.CLASSIFY:
        unlabelled = [row[0] for row in images if row[3] == 0]
        if unlabelled:
            findings.append(
                _finding(
                    Kind.UNLABELLED,
                    Severity.INFO,
                    f"Images without labels: {len(unlabelled)}. Training uses them as "
                    f"background, which is right only if they truly show nothing to find"
                    f"{_shown(len(unlabelled))}.",
                    unlabelled,
                )
            )
    return findings


def _class_findings(classes: list[tuple[int, str]], p: LabelProblems) -> list[dict]:
    if not classes:
        return []
    findings = []
    empty = [name for pk, name in classes if p.per_class[pk] == 0]
    if empty:
        findings.append(
            _finding(
                Kind.CLASS_EMPTY,
                Severity.WARNING,
                f"Classes without labels: {len(empty)} ({_names(empty)}). A model cannot "
                f"learn a class it never sees; label some or remove the class.",
            )
        )
    counted = sorted(((p.per_class[pk], name, pk) for pk, name in classes if p.per_class[pk]))
    if len(counted) >= 2:
        largest_n, largest_name, _ = counted[-1]
        threshold = largest_n / IMBALANCE_RATIO
        rare = [(n, name, pk) for n, name, pk in counted if n < threshold]
        if rare:
            smallest_n, smallest_name, _ = rare[0]
            ids = sorted({i for _, _, pk in rare for i in p.class_images[pk]})
            findings.append(
                _finding(
                    Kind.CLASS_IMBALANCE,
                    Severity.WARNING,
                    f"Classes are imbalanced: “{largest_name}” has {largest_n} labels, "
                    f"{largest_n / smallest_n:.0f}× as many as “{smallest_name}” "
                    f"({smallest_n}). Under a tenth of the largest: "
                    f"{_names([name for _, name, _ in rare])}. The linked images show the rare "
                    f"classes{_shown(len(ids))}.",
                    ids,
                )
            )
    return findings


def split_findings(images: list[tuple]) -> list[dict]:
    """No image in val."""
    if any(row[2] == Split.VAL for row in images):
        return []
    return [
        _finding(
            Kind.NO_VAL,
            Severity.WARNING,
            "No image is in the val split. Training measures progress on val images; move "
            "some (10–20 %) to val.",
        )
    ]
