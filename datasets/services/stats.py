"""Dataset statistics for the statistics page, from aggregate queries and a sample of shapes."""

import math
from statistics import median

from django.db.models import Count, F, Max, Min, Sum

from datasets.models import (
    PIXEL_TASKS,
    Dataset,
    DatasetClass,
    Image,
    Label,
    LabelKind,
    PixelMap,
    Split,
    Task,
)

MAX_BOXES = 20_000  # shapes read for the size charts
SCATTER_POINTS = 2_000  # of those, drawn as points (the histogram uses all)
MAX_IMAGE_SIZES = 500  # distinct width×height pairs listed, most common first
CHART_CLASSES = 50  # classes drawn in the chart (the table lists all)
# Box size as the side of a square of the same area, in px. 32 and 96 are COCO's small/large.
SIZE_EDGES = [0, 8, 16, 32, 64, 96, 128, 256, 512]
LABELS_PER_IMAGE_EDGES = [0, 1, 2, 3, 6, 11, 21, 51]


def _bin_label(edges: list[int], i: int, unit: str = "") -> str:
    low = edges[i]
    if i == len(edges) - 1:
        return f"≥ {low}{unit}"
    high = edges[i + 1] - (0 if unit else 1)
    if unit:
        return f"{low}–{edges[i + 1]}{unit}"
    return str(low) if high == low else f"{low}–{high}"


def _bin_index(edges: list[int], value: float) -> int:
    for i in range(len(edges) - 1, -1, -1):
        if value >= edges[i]:
            return i
    return 0


def shape_size_px(kind: str, data, width: int, height: int) -> tuple[float, float] | None:
    """Width and height in pixels of one shape, or None when it has no size (tags, bad data)."""
    try:
        nums = [float(v) for v in data]
    except (TypeError, ValueError):
        return None
    if kind in (LabelKind.BOX, LabelKind.KEYPOINTS) and len(nums) >= 4:
        return abs(nums[2]) * width, abs(nums[3]) * height
    if kind == LabelKind.POLYGON and len(nums) >= 6:
        xs, ys = nums[0::2], nums[1::2]
        return (max(xs) - min(xs)) * width, (max(ys) - min(ys)) * height
    if kind == LabelKind.OBB and len(nums) == 8:
        xs, ys = nums[0::2], nums[1::2]
        side_a = math.hypot((xs[1] - xs[0]) * width, (ys[1] - ys[0]) * height)
        side_b = math.hypot((xs[2] - xs[1]) * width, (ys[2] - ys[1]) * height)
        return side_a, side_b
    return None


def _box_stats(dataset: Dataset, max_boxes: int) -> dict:
    shapes = Label.objects.filter(image__dataset=dataset).exclude(kind=LabelKind.TAG)
    total = shapes.count()
    step = max(1, math.ceil(total / max_boxes)) if max_boxes else 1
    if step > 1:
        # Every step-th label by id: spread over the whole dataset, unlike the first N.
        shapes = shapes.annotate(sample=F("id") % step).filter(sample=0)
    rows = shapes.values_list("kind", "data", "image__blob__width", "image__blob__height")
    sizes = []
    for kind, data, width, height in rows[:max_boxes]:
        size = shape_size_px(kind, data, width, height)
        if size is not None:
            sizes.append(size)

    counts = [0] * len(SIZE_EDGES)
    coco = {"small": 0, "medium": 0, "large": 0}
    for w, h in sizes:
        side = math.sqrt(max(w * h, 0.0))
        counts[_bin_index(SIZE_EDGES, side)] += 1
        coco["small" if side < 32 else "medium" if side < 96 else "large"] += 1
    every = max(1, math.ceil(len(sizes) / SCATTER_POINTS))
    return {
        "total": total,
        "sampled": len(sizes),
        "histogram": [
            {"bin": _bin_label(SIZE_EDGES, i, " px"), "boxes": n} for i, n in enumerate(counts)
        ],
        "coco": coco,
        "median_width": round(median(w for w, _ in sizes), 1) if sizes else None,
        "median_height": round(median(h for _, h in sizes), 1) if sizes else None,
        "scatter": [[round(w, 1), round(h, 1)] for w, h in sizes[::every]],
    }


def dataset_stats(*, dataset: Dataset, max_boxes: int = MAX_BOXES) -> dict:
    """Everything the statistics page shows, in a fixed number of queries."""
    images = Image.objects.filter(dataset=dataset).order_by()
    by_split = {
        row["split"]: row
        for row in images.values("split").annotate(images=Count("id"), labels=Sum("label_count"))
    }
    splits = [
        {
            "split": value,
            "name": label,
            "images": by_split.get(value, {}).get("images", 0),
            "labels": by_split.get(value, {}).get("labels") or 0,
        }
        for value, label in Split.choices
    ]
    classes = [
        {"index": index, "name": name, "labels": labels, "images": with_class}
        for index, name, labels, with_class in DatasetClass.objects.filter(dataset=dataset)
        .annotate(n_labels=Count("labels"), n_images=Count("labels__image", distinct=True))
        .order_by("index")
        .values_list("index", "name", "n_labels", "n_images")
    ]

    size_rows = (
        images.values("blob__width", "blob__height")
        .annotate(n=Count("id"))
        .order_by("-n", "blob__width", "blob__height")
    )
    image_sizes = [
        {"width": row["blob__width"], "height": row["blob__height"], "images": row["n"]}
        for row in size_rows[:MAX_IMAGE_SIZES]
    ]
    ranges = images.aggregate(
        min_width=Min("blob__width"),
        max_width=Max("blob__width"),
        min_height=Min("blob__height"),
        max_height=Max("blob__height"),
    )

    per_image = [0] * len(LABELS_PER_IMAGE_EDGES)
    for row in images.values("label_count").annotate(n=Count("id")):
        per_image[_bin_index(LABELS_PER_IMAGE_EDGES, row["label_count"])] += row["n"]

    image_total = sum(s["images"] for s in splits)
    pixel = _pixel_stats(dataset, splits, classes) if dataset.task in PIXEL_TASKS else None
    return {
        "pixel": pixel,
        "image_total": image_total,
        "label_total": sum(s["labels"] for s in splits),
        "splits": splits,
        "classes": classes,
        "image_sizes": image_sizes,
        "image_sizes_more": max(0, _distinct_sizes(dataset) - len(image_sizes))
        if len(image_sizes) == MAX_IMAGE_SIZES
        else 0,
        "image_size_range": ranges,
        "labels_per_image": [
            {"bin": _bin_label(LABELS_PER_IMAGE_EDGES, i), "images": n}
            for i, n in enumerate(per_image)
        ],
        "boxes": _box_stats(dataset, max_boxes),
    }


def _pixel_stats(dataset: Dataset, splits: list[dict], classes: list[dict]) -> dict:
    """Semantic masks and depth maps, read from each map's stats (no pixel is decoded): the
    masks per split (which replace labels in the split table), and for semantic each class's
    share of the labelled pixels and the images it occurs in (which replace `classes`' label
    counts: there are no label rows); for depth the range of the readings, in metres."""
    maps = PixelMap.objects.filter(image__dataset=dataset).order_by()
    per_split = dict(maps.values_list("image__split").annotate(n=Count("id")))
    for split in splits:
        split["labels"] = per_split.get(split["split"], 0)
    out: dict = {"masks": sum(per_split.values()), "task": dataset.task}
    if dataset.task == Task.SEMANTIC:
        pixels: dict[int, int] = {}
        images: dict[int, int] = {}
        for stats in maps.values_list("stats", flat=True).iterator(chunk_size=2000):
            for key, n in (stats or {}).items():
                if key.isdigit() and isinstance(n, int) and n > 0:
                    pixels[int(key)] = pixels.get(int(key), 0) + n
                    images[int(key)] = images.get(int(key), 0) + 1
        total = sum(pixels.values())
        for c in classes:
            c["labels"] = c["images"] = images.get(c["index"], 0)
            c["pixels"] = pixels.get(c["index"], 0)
            c["share"] = round(100 * c["pixels"] / total, 2) if total else 0.0
        out["labelled_pixels"] = total
        # Values no class has (a class deleted since): counted, so the shares add up.
        known = {c["index"] for c in classes}
        out["unknown_pixels"] = sum(n for i, n in pixels.items() if i not in known)
        return out
    lows, medians, highs, empty = [], [], [], 0
    for stats in maps.values_list("stats", flat=True).iterator(chunk_size=2000):
        if not (stats or {}).get("valid"):
            empty += 1
            continue
        lows.append(stats["min"])
        medians.append(stats["median"])
        highs.append(stats["max"])
    out["depth"] = {
        "with_readings": len(medians),
        "without_readings": empty,
        "min": min(lows) if lows else None,
        "median": round(median(medians), 4) if medians else None,
        "max": max(highs) if highs else None,
        "scale": dataset.depth_scale or 1000,
    }
    return out


def _distinct_sizes(dataset: Dataset) -> int:
    return (
        Image.objects.filter(dataset=dataset)
        .order_by()
        .values("blob__width", "blob__height")
        .distinct()
        .count()
    )


def stats_chart_data(stats: dict) -> dict:
    """The compact part of the statistics that the page's charts draw (embedded as JSON)."""
    labelled = [c for c in stats["classes"] if c["labels"]]
    # Semantic: classes by their share of the labelled pixels (the chart's bars are %).
    measure = "share" if (stats.get("pixel") or {}).get("task") == Task.SEMANTIC else "labels"
    top = sorted(labelled, key=lambda c: (-c[measure], c["index"]))[:CHART_CLASSES]
    return {
        "measure": measure,
        "splits": [{"name": s["name"], "images": s["images"]} for s in stats["splits"]],
        "classes": [{"name": c["name"], "labels": c[measure]} for c in top],
        "classes_more": len(labelled) - len(top),
        "classes_empty": len(stats["classes"]) - len(labelled),
        "box_histogram": stats["boxes"]["histogram"],
        "box_scatter": stats["boxes"]["scatter"],
        "image_sizes": [[s["width"], s["height"], s["images"]] for s in stats["image_sizes"]],
        "labels_per_image": stats["labels_per_image"],
    }
