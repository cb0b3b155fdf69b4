"""The dataset health checks, as pure functions of what was read: the images' rows and decoded
bytes, the labels' rows, the classes. Each returns findings (kind, severity, message, image ids);
datasets.services.health reads the rows, runs these and stores what they find.

The images' rows are (id, filename, split, label_count, blob id, blob sha256, stored phash,
width, height, blob size), as datasets.services.health reads them.
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
TINY_VAL_SHARE = 0.05  # of the images in train and val

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
    STORED_DAMAGED = "stored_damaged"  # the stored file is missing, or not the bytes recorded
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
    # The rules on splits and classes (data_findings), which training applies to a version too.
    NO_LABELS = "no_labels"
    NO_TRAIN = "no_train"
    CLASS_NOT_IN_VAL = "class_not_in_val"
    TINY_VAL = "tiny_val"
    # Semantic masks and depth maps (map_findings, pixel_version_findings).
    NO_MASKS = "no_masks"
    MASK_SIZE = "mask_size"
    MASK_EMPTY = "mask_empty"
    MASK_MISSING = "mask_missing"
    CLASS_NOT_IN_MASKS = "class_not_in_masks"


# Within a severity, the report lists findings in this order: the ones that spoil most first.
KIND_ORDER = [
    Kind.NO_MASKS,
    Kind.NO_LABELS,
    Kind.NO_TRAIN,
    Kind.STORED_DAMAGED,
    Kind.UNREADABLE,
    Kind.LEAKAGE,
    Kind.LABEL_OUTSIDE,
    Kind.LABEL_MALFORMED,
    Kind.MASK_SIZE,
    Kind.NO_VAL,
    Kind.CLASS_NOT_IN_VAL,
    Kind.TINY_VAL,
    Kind.CLASS_EMPTY,
    Kind.CLASS_NOT_IN_MASKS,
    Kind.MASK_EMPTY,
    Kind.MASK_MISSING,
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
    damaged: bool = False  # the stored file is missing or not the bytes recorded (`error` says)


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
    damaged = [(row[0], row[1], decoded[row[4]].error) for row in images if decoded[row[4]].damaged]
    if damaged:
        findings.append(stored_damaged_finding(damaged))
    broken = [
        (row[0], row[1], decoded[row[4]].error)
        for row in images
        if decoded[row[4]].error and not decoded[row[4]].damaged
    ]
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

    # Grouped by blob: images sharing one (byte-identical copies) are health_duplicates'
    # finding, so a group here needs two different files, and crosses splits only where two
    # different files do.
    hashes = {row[4]: decoded[row[4]].phash for row in images if decoded[row[4]].phash is not None}
    images_of: dict[int, list[int]] = defaultdict(list)
    splits_of: dict[int, set] = defaultdict(set)
    for row in images:
        images_of[row[4]].append(row[0])
        splits_of[row[4]].add(row[2])
    held_out = {Split.VAL, Split.TEST}
    leaked, near = [], []
    for blobs in _groups(hashes, near_duplicate_pairs(hashes, NEAR_DUPLICATE_DISTANCE)):
        trained = {b for b in blobs if Split.TRAIN in splits_of[b]}
        validated = {b for b in blobs if splits_of[b] & held_out}
        crosses = trained and validated and (len(trained) > 1 or validated != trained)
        group = sorted(i for b in blobs for i in images_of[b])
        (leaked if crosses else near).append(group)
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


def stored_damaged_finding(damaged: list[tuple[int, str, str]]) -> dict:
    """The finding on images whose stored file is missing or not the bytes their row records:
    (image id, filename, what is wrong) each. The health check finds them as it reads every
    image, `manage.py blobs_check --repair` when it cannot repair them."""
    examples = "; ".join(f"{name}: {why}" for _, name, why in damaged[:3])
    return _finding(
        Kind.STORED_DAMAGED,
        Severity.ERROR,
        f"{plural(len(damaged), 'image')} whose stored file is damaged or missing: "
        f"{'it is' if len(damaged) == 1 else 'they are'} not served and training cannot use "
        f"{'it' if len(damaged) == 1 else 'them'}{_shown(len(damaged))}. {examples}. Importing "
        f"the original files again (into any dataset) repairs them.",
        (image_id for image_id, _, _ in damaged),
    )


def label_findings(
    *,
    task: str,
    keypoint_shape,
    images: list[tuple],
    labels: Iterable[tuple],
    tally: "DataTally",
) -> list[dict]:
    """Labels outside the image, malformed, of a kind the task does not train on, tiny; images
    without labels. `labels`: (image id, class id, kind, data) rows, each also counted in
    `tally` (whose images are `images`) for the split and class rules (data_findings)."""
    size = {row[0]: (row[7], row[8]) for row in images}
    expected_kind = TASK_LABEL_KIND.get(task)
    dims = None
    if isinstance(keypoint_shape, list) and len(keypoint_shape) == 2:
        dims = keypoint_shape[1]
    p = LabelProblems()
    for image_id, class_id, kind, data in labels:
        tally.label(image_id, class_id, kind)
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


# --- semantic masks and depth maps ------------------------------------------------------------


def _map_words(task: str) -> tuple[str, str]:
    """(singular, plural) of what a pixel task's images carry."""
    return ("depth map", "depth maps") if task == Task.DEPTH else ("mask", "masks")


def map_findings(
    *,
    task: str,
    images: list[tuple],
    maps: dict[int, tuple[int, int, dict]],
    classes: list[tuple],
    tally: "DataTally",
) -> list[dict]:
    """The checks of a semantic or depth dataset, from each map's size and stats (no pixel is
    decoded): maps not the size of their image (Ultralytics refuses the pair), semantic masks
    without a class pixel and classes in no mask, depth maps without a reading, and images
    without a map (export and training leave them out). `maps`: image id → (width, height,
    stats); `classes`: (id, name, index). Each mapped image is counted in `tally` (with the
    classes its mask holds), so the split and class rules (data_findings) see what trains."""
    one, many = _map_words(task)
    wrong_size, empty, missing = [], [], []
    class_of_index = {index: pk for pk, _, index in classes}
    for row in images:
        image_id = row[0]
        if image_id not in maps:
            missing.append(image_id)
            continue
        width, height, stats = maps[image_id]
        if (width, height) != (row[7], row[8]):
            wrong_size.append((image_id, f"{width}×{height} for {row[7]}×{row[8]}"))
        if task == Task.SEMANTIC:
            present = [int(k) for k in (stats or {}) if str(k).isdigit()]
            if not present:
                empty.append(image_id)
            for index in present:
                tally.label(image_id, class_of_index.get(index, f"value {index}"), "mask")
        else:
            if not (stats or {}).get("valid"):
                empty.append(image_id)
            else:
                tally.label(image_id, None, "mask")

    findings = []
    if not maps:
        findings.append(
            _finding(
                Kind.NO_MASKS,
                Severity.ERROR,
                f"No image has a {one}: a model has nothing to learn from. Import {many} "
                f"(or draw them), then save a version to train on.",
            )
        )
    if wrong_size:
        examples = "; ".join(why for _, why in wrong_size[:3])
        findings.append(
            _finding(
                Kind.MASK_SIZE,
                Severity.ERROR,
                f"{plural(len(wrong_size), one, many)} not the size of "
                f"{'its' if len(wrong_size) == 1 else 'their'} image ({examples}); "
                "training cannot pair pixels with labels"
                f"{_shown(len(wrong_size))}.",
                (image_id for image_id, _ in wrong_size),
            )
        )
    if empty:
        what = (
            "no class pixel (every pixel is “ignore”)"
            if task == Task.SEMANTIC
            else "no valid reading (every pixel is 0)"
        )
        findings.append(
            _finding(
                Kind.MASK_EMPTY,
                Severity.WARNING,
                f"{plural(len(empty), one, many)} with {what}: training learns nothing from "
                f"{'it' if len(empty) == 1 else 'them'}{_shown(len(empty))}.",
                empty,
            )
        )
    if task == Task.SEMANTIC and maps:
        never = [name for pk, name, _ in classes if not tally.per_class[pk]]
        if never:
            findings.append(
                _finding(
                    Kind.CLASS_NOT_IN_MASKS,
                    Severity.WARNING,
                    f"{plural(len(never), 'class', 'classes')} in no mask: {_names(never)}. "
                    "A model cannot learn a class it never sees; draw it in some masks or "
                    "remove it.",
                )
            )
    if missing and maps:
        findings.append(
            _finding(
                Kind.MASK_MISSING,
                Severity.WARNING,
                f"{plural(len(missing), 'image')} without a {one}: export and training leave "
                f"{'it' if len(missing) == 1 else 'them'} out{_shown(len(missing))}.",
                missing,
            )
        )
    return findings


def pixel_version_findings(*, task: str, images: int, masked: int) -> list["Finding"]:
    """A semantic or depth version's own rules: no map at all is an error (nothing to train
    on), images without one a warning (training leaves them out)."""
    one, many = _map_words(task)
    if not images:
        return []
    if not masked:
        return [
            Finding(
                Severity.ERROR,
                Kind.NO_MASKS,
                f"No image of this version has a {one}: a model has nothing to learn from. "
                f"Import {many} (or draw them), then save a version to train on.",
            )
        ]
    if masked < images:
        left = images - masked
        return [
            Finding(
                Severity.WARNING,
                Kind.MASK_MISSING,
                f"{plural(left, 'image')} of {images} {'has' if left == 1 else 'have'} no {one}: "
                f"training leaves {'it' if left == 1 else 'them'} out.",
            )
        ]
    return []


# --- the rules on splits and classes, one set for the health check and for training ------------


@dataclass(frozen=True)
class Finding:
    """One rule's verdict: `level` (Severity.ERROR blocks training, Severity.WARNING needs
    “Train anyway”), `code` (a Kind), `sentence` (what the health page and the training form
    both show), and the keys of the images it is about (image ids on the health check)."""

    level: str
    code: str
    sentence: str
    image_keys: tuple = ()

    def as_health(self) -> dict:
        """As a HealthFinding's fields."""
        return _finding(self.code, self.level, self.sentence, self.image_keys)


@dataclass
class DataTally:
    """What the split and class rules need, counted as training sees it: for classification
    only class tags count, and an image without one is not trained on. Fed one image and one
    label at a time (the health check streams its labels), by any keys: image ids and class
    ids on the health check, positions in a version's manifest."""

    task: str
    classes: list[tuple]  # (key, name), in the dataset's order
    split_of: dict = field(default_factory=dict)  # image key -> split
    labelled: set = field(default_factory=set)  # image keys with a label training uses
    labels: int = 0
    per_class: Counter = field(default_factory=Counter)  # class key -> labels
    class_images: dict = field(default_factory=lambda: defaultdict(set))
    split_classes: dict = field(default_factory=lambda: defaultdict(set))  # split -> class keys

    def image(self, key, split: str) -> None:
        self.split_of[key] = split

    def label(self, image_key, class_key, kind: str) -> None:
        """`kind` "mask": one class of a semantic mask (or a depth map, class None)."""
        if self.task == Task.CLASSIFY and kind != LabelKind.TAG:
            return
        split = self.split_of.get(image_key)
        if split is None:  # an image added since the images were read
            return
        self.labels += 1
        self.labelled.add(image_key)
        self.per_class[class_key] += 1
        self.class_images[class_key].add(image_key)
        self.split_classes[split].add(class_key)

    def split_images(self) -> Counter:
        """Images trained on, per split (every image, but for classification only tagged ones:
        an untagged detection image is a background and is trained on)."""
        if self.task == Task.CLASSIFY:
            return Counter(self.split_of[k] for k in self.labelled)
        return Counter(self.split_of.values())


def data_findings(tally: DataTally) -> list[Finding]:
    """The rules on labels, splits and classes. Errors: no labels at all, no train image, no
    val image (Ultralytics measures every epoch on val and stops without it). Warnings: classes
    trained on but absent from val, a tiny val split, classes without labels, imbalance."""
    if not tally.split_of:
        return []
    findings: list[Finding] = []
    if not tally.labels:
        findings.append(
            Finding(
                Severity.ERROR,
                Kind.NO_LABELS,
                "No labels at all: a model has nothing to learn from. Label some images "
                "(then save a version to train on).",
            )
        )
    counts = tally.split_images()
    train, val = counts[Split.TRAIN], counts[Split.VAL]
    what = "image with a class" if tally.task == Task.CLASSIFY else "image"
    if tally.labels and not train:
        findings.append(
            Finding(
                Severity.ERROR,
                Kind.NO_TRAIN,
                f"No {what} is in the train split, so there is nothing to train on. Move "
                "most of the images (80–90 %) to train, e.g. with auto-split.",
            )
        )
    if not val:
        findings.append(
            Finding(
                Severity.ERROR,
                Kind.NO_VAL,
                f"No {what} is in the val split. Training measures each epoch on val images "
                "and cannot run without them; move some (10–20 %) to val, e.g. with "
                "auto-split.",
            )
        )
    elif train and val < TINY_VAL_SHARE * (train + val):
        findings.append(
            Finding(
                Severity.WARNING,
                Kind.TINY_VAL,
                f"The val split is tiny: {plural(val, 'image')} against {train} in train "
                f"({val / (train + val):.1%}). Accuracy measured on so few images swings "
                "from epoch to epoch; 10–20 % in val is usual.",
            )
        )
    if val:
        findings += _not_in_val(tally)
    findings += _class_findings(tally)
    return findings


def _not_in_val(tally: DataTally) -> list[Finding]:
    """Trained on but absent from val: Ultralytics trains them and measures mAP over the
    classes val has (coco8, its own example, is like that), so this is a warning."""
    missing_keys = tally.split_classes[Split.TRAIN] - tally.split_classes[Split.VAL]
    missing = [name for key, name in tally.classes if key in missing_keys]
    if not missing:
        return []
    one = len(missing) == 1
    return [
        Finding(
            Severity.WARNING,
            Kind.CLASS_NOT_IN_VAL,
            f"{'A class has' if one else f'{len(missing)} classes have'} no labels in val: "
            f"{_names(missing)}. The model's accuracy on {'it' if one else 'them'} cannot be "
            f"measured (training still uses {'it' if one else 'them'}); to measure it, move "
            f"some of {'its' if one else 'their'} images to val.",
            tuple(sorted({k for key in missing_keys for k in tally.class_images[key]})),
        )
    ]


def _class_findings(tally: DataTally) -> list[Finding]:
    classes, per_class = tally.classes, tally.per_class
    if not classes or not tally.labels:
        return []
    findings = []
    empty = [name for pk, name in classes if per_class[pk] == 0]
    if empty:
        findings.append(
            Finding(
                Severity.WARNING,
                Kind.CLASS_EMPTY,
                f"Classes without labels: {len(empty)} ({_names(empty)}). A model cannot "
                f"learn a class it never sees; label some or remove the class.",
            )
        )
    counted = sorted(
        ((per_class[pk], name, i, pk) for i, (pk, name) in enumerate(classes) if per_class[pk])
    )
    if len(counted) >= 2:
        largest_n, largest_name, _, _ = counted[-1]
        threshold = largest_n / IMBALANCE_RATIO
        rare = [row for row in counted if row[0] < threshold]
        if rare:
            smallest_n, smallest_name, _, _ = rare[0]
            keys = sorted({k for *_, pk in rare for k in tally.class_images[pk]})
            findings.append(
                Finding(
                    Severity.WARNING,
                    Kind.CLASS_IMBALANCE,
                    f"Classes are imbalanced: “{largest_name}” has {largest_n} labels, "
                    f"{largest_n / smallest_n:.0f}× as many as “{smallest_name}” "
                    f"({smallest_n}). Under a tenth of the largest: "
                    f"{_names([row[1] for row in rare])}.",
                    tuple(keys),
                )
            )
    return findings


def findings_sorted(findings: Iterable[Finding]) -> list[Finding]:
    """Errors first, then warnings; within a level, the kinds that spoil most first."""
    rank = {kind: i for i, kind in enumerate(KIND_ORDER)}
    return sorted(findings, key=lambda f: (SEVERITY_ORDER.get(f.level, 9), rank.get(f.code, 99)))
