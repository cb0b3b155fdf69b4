"""Label Studio's results turned into Kestrel labels, task by task.

A result's numbers are percent (0–100) of the image; a rectangle's `rotation` turns it
clockwise about its top-left corner, in pixels of the image (original_width/original_height).
Rectangles, polygons, keypoints and brush masks (Label Studio's RLE, traced) become the task's
labels; choices are image classes; keypoints are grouped into objects by their parentID, a
relation, or the rectangle holding them, and ordered by the numbers their labels end in.
"""

import math
from collections import Counter

from datasets.models import LabelKind, Task
from datasets.services.formats import (
    OBB_TOLERANCE,
    SKIP_LABEL,
    SKIP_NO_IMAGE,
    ParsedImage,
    ParsedLabel,
    _clip,
    _poly_to_box,
    split_from_path,
)
from datasets.services.masks import label_studio_rle_decode, mask_box, mask_to_polygons
from datasets.services.tool_formats.common import in_image, min_area_corners, to_unit, turned
from datasets.services.tool_formats.labelstudio_match import Result, TaskImages, shape_of
from datasets.services.tool_formats.labelstudio_pose import Pose, Poses

# Label Studio lets a region reach past the image's edge (its SDK's test export has a box 1.6%
# past it): up to this share of the image it is cut at the edge, past it refused.
EDGE_TOLERANCE = 0.05
# The shape a result draws, by type; "labels" results take theirs from their value's keys.
SHAPES = {
    "rectanglelabels": "rectangle", "rectangle": "rectangle",
    "polygonlabels": "polygon", "polygon": "polygon",
    "keypointlabels": "keypoint", "keypoint": "keypoint",
    "brushlabels": "brush", "brush": "brush",
    "ellipselabels": "ellipse", "ellipse": "ellipse",
}  # fmt: skip
_WHAT = {"rectangle": "rectangle", "polygon": "polygon", "keypoint": "keypoint",
         "brush": "brush mask", "ellipse": "ellipse"}  # fmt: skip


def _number(value: dict, key: str, default: float | None = None) -> float:
    v = value.get(key, default)
    kind = type(v)  # exact types: bool is an int, and is no coordinate
    if kind is float and v - v == 0.0 or kind is int:  # v - v is NaN for NaN and infinities
        return float(v)
    raise ValueError(f"its {key} is not a number")


def _coordinate(v) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError("a point whose coordinates are not numbers")
    return float(v)


def _label_names(value: dict, key: str) -> list[str]:
    names = value.get(key)
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list):
        return []
    return [str(n).strip() for n in names if str(n).strip()]


class TaskReader:
    """The tasks of one upload turned into Kestrel labels for the dataset's task."""

    def __init__(self, images: list[str], task: str, classes: list[str]):
        self.task = task or Task.DETECT
        self.classes = list(classes)
        self.finder = TaskImages(images)
        self.parsed = {p: ParsedImage(p, split_from_path(p)) for p in images}
        self.owner: dict[str, str] = {}  # image → the task whose labels it has
        # (file, image, class name, kind, data): classes are numbered once all are known
        self.found: list[tuple[str, str, str, str, list[float]]] = []
        self.skipped: list[tuple[str, str, str]] = []
        self.said: Counter = Counter()  # what the notes count
        self.poses = Poses(self.skipped, self.said)

    # tasks

    def read_task(
        self, file: str, which: str, ref, file_upload, results: list[Result], data_keys=()
    ) -> None:
        """One task (or JSON-MIN record), `which` naming it ("task 12"), and its results."""
        place = f"{file} {which}"
        if not isinstance(ref, str) or not ref.strip():
            keys = ", ".join(sorted(str(k) for k in (data_keys or []))[:6]) or "none"
            self.skipped.append((place, f"no image path in its data (keys: {keys})", SKIP_NO_IMAGE))
            return
        image, why = self.finder.find(ref, file_upload)
        if image is None:
            self.skipped.append((place, f"its image {ref.strip()[:200]} {why}", SKIP_NO_IMAGE))
            return
        if image in self.owner:
            if not results:
                return
            self.skipped.append(
                (
                    place,
                    f"its image {image} is also {self.owner[image]}'s: only that task's labels "
                    "are read",
                    SKIP_LABEL,
                )
            )
            return
        self.owner[image] = which
        sizes = [r.size for r in results if r.size]
        size = sizes[0] if sizes else None
        if size is not None:
            self.parsed[image].declared_size = size
        elif any(r.type in SHAPES or r.type == "labels" for r in results):
            self.said["no_size"] += 1
        # A <Rectangle> (or <Polygon>...) beside a <Labels> tag: two results of one id, the
        # "labels" one carrying the shape too (as exports/yolo.py reads them).
        by_id = {r.id: r for r in results if r.type == "labels" and r.id}
        bare = {r.id for r in results if r.type in SHAPES and r.type == SHAPES[r.type] and r.id}
        rects: list[Pose] = []
        points: list[tuple[Result, str, float, float]] = []
        choices: list[tuple[Result, list[str]]] = []
        relations: list[Result] = []
        for r in results:
            try:
                if r.image_rotation:
                    raise ValueError(
                        f"drawn on the image turned {r.image_rotation:g}° in Label Studio: "
                        "not imported"
                    )
                if r.size and size and r.size != size:
                    raise ValueError(
                        f"drawn on a {r.size[0]}×{r.size[1]} image, and this task's other "
                        f"results on {size[0]}×{size[1]}"
                    )
                if r.type == "relation":
                    relations.append(r)
                    continue
                if r.type == "choices":
                    choices.append((r, self._choices(r)))
                    continue
                shape, names = self._shape(r, bare, by_id)
                if shape is None:
                    continue  # the same region as a "labels" result read on its own
                self._region(file, image, r, shape, names, r.size or size, rects, points)
            except ValueError as e:
                self.skipped.append((r.where, str(e), SKIP_LABEL))
        if self.task == Task.POSE:
            used = self.poses.group(file, image, rects, points, relations)
            relations = [r for r in relations if id(r) not in used]
        for r in relations:
            self.skipped.append((r.where, "relations between regions are not imported", SKIP_LABEL))
        self._image_class(file, image, choices)

    def _shape(self, r: Result, bare, by_id) -> tuple[str | None, list[str]]:
        """The shape a result draws and its label names; ValueError if it is no shape."""
        if r.type in SHAPES:
            shape = SHAPES[r.type]
            if r.type != shape:
                names = _label_names(r.value, r.type)
            elif r.id in by_id:
                other = by_id[r.id]
                if shape_of(other.value):
                    return None, []
                names = _label_names(other.value, "labels")
            else:
                names = []
            if not names:
                raise ValueError(f"a {_WHAT[shape]} without a label")
            return shape, names
        if r.type == "labels":
            shape = shape_of(r.value)
            if shape is None:
                if r.id in bare:
                    return None, []
                raise ValueError("text spans (labels) are not imported: Kestrel labels images")
            names = _label_names(r.value, "labels")
            if not names:
                raise ValueError(f"a {_WHAT[shape]} without a label")
            return shape, names
        if r.type == "textarea":
            raise ValueError("text (textarea) is not imported: Kestrel has no text labels")
        if r.type.startswith("video") or r.type in ("timelinelabels", "timeserieslabels"):
            raise ValueError(f"{r.type} results are not imported: Kestrel labels images")
        raise ValueError(f"{r.type} results are not imported: not a shape Kestrel has")

    def _choices(self, r: Result) -> list[str]:
        if shape_of(r.value):
            raise ValueError("a choice made for a region (an attribute of it): not imported")
        names = list(dict.fromkeys(_label_names(r.value, "choices")))
        if not names:
            raise ValueError("choices without a choice")
        if self.task != Task.CLASSIFY:
            raise ValueError(
                f"an image class ({', '.join(names)[:60]}): image classes are imported into a "
                f"classify dataset (this one is {self.task})"
            )
        return names

    def _image_class(self, file: str, image: str, choices) -> None:
        names = list(dict.fromkeys(n for _, ns in choices for n in ns))
        if len(names) == 1:
            self.found.append((file, image, names[0], LabelKind.TAG, []))
        elif len(names) > 1:
            for r, _ in choices:
                self.skipped.append(
                    (
                        r.where,
                        f"several image classes ({', '.join(names)[:80]}): an image of a "
                        "classify dataset has one",
                        SKIP_LABEL,
                    )
                )

    def _region(self, file, image, r: Result, shape, names, size, rects, points) -> None:
        what = _WHAT[shape]
        task = self.task
        if task == Task.CLASSIFY:
            raise ValueError(f"a {what}: a classify dataset takes image classes (choices) only")
        if shape == "ellipse":
            raise ValueError("ellipses are not imported: Kestrel has no ellipse labels")
        if shape == "keypoint":
            if task != Task.POSE:
                raise ValueError(
                    f"a keypoint ({names[0][:40]}): keypoints are imported into a pose dataset "
                    f"(this one is {task})"
                )
            x, y = _number(r.value, "x") / 100, _number(r.value, "y") / 100
            if not in_image([x, y], EDGE_TOLERANCE):
                raise ValueError(f"keypoint {names[0][:40]!r} outside the image")
            x, y = self._cut([x, y])
            points.append((r, names[0], x, y))
            return
        if task == Task.POSE and shape != "rectangle":
            raise ValueError(f"a {what}: a pose dataset takes rectangles and keypoints")
        if shape == "rectangle":
            corners, rotated = self._rectangle(r.value, size)
            if task == Task.OBB:
                kept = [(LabelKind.OBB, corners)]
            else:
                norm = self._cut(corners)
                box = _poly_to_box(norm)
                if box[2] <= 0 or box[3] <= 0:
                    raise ValueError("a rectangle with no area inside the image")
                if rotated:
                    self.said[f"rotated_{task}"] += 1
                if task == Task.POSE:
                    xs, ys = norm[0::2], norm[1::2]
                    around = (min(xs), min(ys), max(xs), max(ys))
                    rects += [Pose(image, file, r.where, n, box, around, r.id) for n in names]
                    return
                if task == Task.SEGMENT and rotated:
                    kept = [(LabelKind.POLYGON, norm)]
                else:
                    kept = [(LabelKind.BOX, box)]
        elif shape == "polygon":
            kept = [self._polygon(r.value, size)]
        else:
            kept = self._brush(r.value, size)
        for name in names:
            for kind, data in kept:
                self.found.append((file, image, name, kind, data))

    def _cut(self, norm: list[float]) -> list[float]:
        if min(norm) >= 0.0 and max(norm) <= 1.0:
            return norm  # the common case, inside the image
        kept = _clip(norm)
        if any(abs(a - b) > 1e-9 for a, b in zip(norm, kept, strict=True)):
            self.said["clipped"] += 1
        return kept

    def _rectangle(self, value: dict, size) -> tuple[list[float], bool]:
        """The four corners, normalised (top-left, top-right, bottom-right, bottom-left), and
        whether the rectangle is turned (by other than a multiple of 90°)."""
        x, y = _number(value, "x"), _number(value, "y")
        w, h = _number(value, "width"), _number(value, "height")
        rotation = _number(value, "rotation", 0.0) % 360
        if w <= 0 or h <= 0:
            raise ValueError("a rectangle with no width or height")
        if rotation == 0:
            x1, y1, x2, y2 = x / 100, y / 100, (x + w) / 100, (y + h) / 100
            corners = [x1, y1, x2, y1, x2, y2, x1, y2]
        else:
            if size is None:
                raise ValueError(
                    "a rotated rectangle without original_width/original_height: its rotation "
                    "is in pixels of the image"
                )
            iw, ih = size
            px, py, pw, ph = x / 100 * iw, y / 100 * ih, w / 100 * iw, h / 100 * ih
            # Turned about its top-left corner (utils.py::convert_annotation_to_yolo_obb).
            offsets = [(0.0, 0.0), (pw, 0.0), (pw, ph), (0.0, ph)]
            corners = to_unit(turned(px, py, offsets, math.radians(rotation)), iw, ih)
        tolerance = OBB_TOLERANCE if self.task == Task.OBB else EDGE_TOLERANCE
        if not in_image(corners, tolerance):
            raise ValueError("a rectangle outside the image")
        return corners, rotation % 90 != 0

    def _polygon(self, value: dict, size) -> tuple[str, list[float]]:
        pts = value.get("points")
        if not isinstance(pts, list) or not all(isinstance(p, list) and len(p) == 2 for p in pts):
            raise ValueError("a polygon whose points are not [x, y] pairs")
        if len(pts) < 3:
            raise ValueError("a polygon needs 3 points or more")
        norm = [_coordinate(v) / 100 for p in pts for v in p]
        if not in_image(norm, EDGE_TOLERANCE):
            raise ValueError("a polygon outside the image")
        norm = self._cut(norm)
        box = _poly_to_box(norm)
        if box[2] <= 0 or box[3] <= 0:
            raise ValueError("a polygon with no area")
        if self.task == Task.SEGMENT:
            return LabelKind.POLYGON, norm
        if self.task == Task.OBB:
            self.said["polygon_obb"] += 1
            return LabelKind.OBB, _obb_around(norm, size)
        return LabelKind.BOX, box

    def _brush(self, value: dict, size) -> list[tuple[str, list[float]]]:
        if size is None:
            raise ValueError(
                "a brush mask without original_width/original_height: it cannot be decoded"
            )
        if value.get("format", "rle") != "rle":
            raise ValueError(f"a brush mask in format {str(value.get('format'))[:20]!r}, not rle")
        mask = label_studio_rle_decode(value.get("rle"), *size)
        w, h = size
        found = mask_box(mask)
        if found is None:
            raise ValueError("an empty brush mask")
        self.said["masks"] += 1
        if self.task == Task.DETECT:
            x1, y1, x2, y2 = found
            return [(LabelKind.BOX, _poly_to_box([x1 / w, y1 / h, x2 / w, y2 / h]))]
        polygons = mask_to_polygons(mask)
        if not polygons:
            raise ValueError("a brush mask with no region of 4 pixels or more")
        if self.task == Task.OBB:
            corners = min_area_corners(polygons[0])
            return [(LabelKind.OBB, to_unit(corners, w, h))]
        self.said["mask_regions"] += len(polygons)
        return [(LabelKind.POLYGON, _clip(to_unit(p, w, h))) for p in polygons]

    def finish(self) -> tuple[list[str], dict[str, int], list[int] | None]:
        """Class names, labels per file, and the keypoint shape, once every task is read."""
        names = list(self.classes)
        new = {c for _, _, c, _, _ in self.found} | {p.cls for p in self.poses.objects}
        names += sorted(new - set(names))
        index = {n: i for i, n in enumerate(names)}
        counts: Counter = Counter()
        for file, image, cls, kind, data in self.found:
            self.parsed[image].labels.append(ParsedLabel(index[cls], kind, data))
            counts[file] += 1
        kpt_shape = self.poses.order_keypoints()
        for pose, label in self.poses.labels(index):
            self.parsed[pose.image].labels.append(label)
            counts[pose.file] += 1
        return names, dict(counts), kpt_shape


def _obb_around(norm: list[float], size) -> list[float]:
    """The smallest rotated rectangle around a polygon (in pixels, where the size is known:
    a rectangle in normalised units is not one on a non-square image)."""
    if size is None:
        xs, ys = norm[0::2], norm[1::2]
        x1, x2, y1, y2 = min(xs), max(xs), min(ys), max(ys)
        return [x1, y1, x2, y1, x2, y2, x1, y2]
    w, h = size
    px = [v * (w if i % 2 == 0 else h) for i, v in enumerate(norm)]
    return to_unit(min_area_corners(px), w, h)
