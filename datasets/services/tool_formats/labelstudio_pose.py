"""The objects of a Label Studio pose export: keypoints grouped into objects (by their parentID,
a relation, or the rectangle holding them; without rectangles, an image's keypoints are one
object), and their names put in the order of the numbers they end in.
"""

import re
from collections import Counter
from dataclasses import dataclass, field

from datasets.models import LabelKind
from datasets.services.formats import SKIP_LABEL, ParsedLabel, _clip, _poly_to_box
from datasets.services.tool_formats.labelstudio_match import Result


@dataclass
class Pose:
    """One object of a pose dataset: a rectangle and the keypoints found in it, by name."""

    image: str
    file: str
    where: str  # its rectangle's place, or its first keypoint's
    cls: str
    box: list[float]
    corners: tuple[float, float, float, float]
    id: str | None = None
    points: dict[str, tuple[float, float]] = field(default_factory=dict)
    # Keypoints Label Studio marks hidden (its COCO import reads `hidden` as not visible).
    hidden: set[str] = field(default_factory=set)


class Poses:
    """A pose dataset's objects, and their keypoint names as they first appear."""

    def __init__(self, skipped: list[tuple[str, str, str]], said: Counter):
        self.objects: list[Pose] = []
        self.order: list[str] = []
        self.skipped = skipped  # the task reader's
        self.said = said  # the task reader's

    def group(self, file, image, rects: list[Pose], points, relations) -> set[int]:
        """Keypoints into the rectangle their parentID names (Label Studio's own link, as
        exports/yolo.py reads it), else one a relation links, else the smallest that holds
        them. Without any rectangle, an image's keypoints are one object, boxed around them
        (as Label Studio's COCO export boxes them), where no keypoint name repeats."""
        by_id = {p.id: p for p in rects if p.id}
        linked: dict[str, Pose] = {}
        used: set[int] = set()
        for rel in relations:
            a, b = rel.value.get("from_id"), rel.value.get("to_id")
            for point_id, rect_id in ((a, b), (b, a)):
                if rect_id in by_id and point_id not in by_id and point_id:
                    linked[point_id] = by_id[rect_id]
                    used.add(id(rel))
        loose: list[tuple[Result, str, float, float]] = []
        for r, name, x, y in points:
            owner = by_id.get(r.parent) or linked.get(r.id)
            if owner is None:
                holding = [
                    p for p in rects
                    if p.corners[0] <= x <= p.corners[2] and p.corners[1] <= y <= p.corners[3]
                ]  # fmt: skip
                owner = min(holding, key=lambda p: p.box[2] * p.box[3]) if holding else None
                if owner is not None:
                    self.said["kp_contained"] += 1
            if owner is None:
                if rects:
                    self.skipped.append(
                        (r.where, f"keypoint {name[:40]!r} lies in no rectangle", SKIP_LABEL)
                    )
                else:
                    loose.append((r, name, x, y))
                continue
            if name in owner.points:
                self.skipped.append(
                    (r.where, f"a second {name[:40]!r} keypoint in one rectangle", SKIP_LABEL)
                )
                continue
            owner.points[name] = (x, y)
            if r.value.get("hidden"):
                owner.hidden.add(name)
            self._name(name)
        self.objects += rects
        groups: dict[str, list] = {}
        for item in loose:
            groups.setdefault(item[0].from_name or "object", []).append(item)
        for cls, group in groups.items():
            names = [name for _, name, _, _ in group]
            xy = [v for _, _, x, y in group for v in (x, y)]
            box = _poly_to_box(xy)
            if len(set(names)) != len(names) or box[2] <= 0 or box[3] <= 0:
                why = (
                    "keypoints of several objects and no rectangle to group them: draw a "
                    "rectangle around each object"
                    if len(set(names)) != len(names)
                    else "keypoints with no area around them and no rectangle to box them"
                )
                self.skipped += [(r.where, why, SKIP_LABEL) for r, _, _, _ in group]
                continue
            pose = Pose(image, file, group[0][0].where, cls, box, (0, 0, 0, 0))
            pose.points = {name: (x, y) for _, name, x, y in group}
            pose.hidden = {name for r, name, _, _ in group if r.value.get("hidden")}
            for name in names:
                self._name(name)
            self.objects.append(pose)
            self.said["kp_boxed"] += 1
        return used

    def _name(self, name: str) -> None:
        if name not in self.order:
            self.order.append(name)

    def order_keypoints(self) -> list[int] | None:
        """Put the keypoint names in their order, once every task is read; the keypoint shape."""
        self.order = keypoint_order(self.order)
        return [len(self.order), 3] if self.order else None

    def labels(self, index: dict[str, int]) -> list[tuple[Pose, ParsedLabel]]:
        """Each object's label, its class numbered by `index`, its keypoints in their order."""
        out = []
        for pose in self.objects:
            if not self.order:
                self.skipped.append(
                    (pose.where, "a rectangle with no keypoints: a pose dataset's labels are "
                     "keypoints", SKIP_LABEL)
                )  # fmt: skip
                continue
            kpts = []
            for name in self.order:
                x, y = pose.points.get(name, (0.0, 0.0))
                seen = 0.0 if name not in pose.points else 1.0 if name in pose.hidden else 2.0
                kpts += [x, y, seen]
            label = ParsedLabel(index[pose.cls], LabelKind.KEYPOINTS, _clip(pose.box) + kpts)
            out.append((pose, label))
        return out


def _numbered(names: list[str]) -> list[int] | None:
    """The number each name ends in (kp0, kp-12, 3), when every name has a distinct one."""
    numbers = [re.search(r"(\d+)$", n) for n in names]
    if not all(numbers):
        return None
    values = [int(m.group(1)) for m in numbers]
    return values if len(set(values)) == len(values) else None


def keypoint_order(names: list[str]) -> list[str]:
    """Keypoint labels in the order of the numbers they end in (Kestrel's export names them
    kp0..kpN; an object missing kp3 must not move kp4 up), else as they first appear."""
    numbers = _numbered(names)
    if numbers is None:
        return names
    return [n for _, n in sorted(zip(numbers, names, strict=True))]


def order_rule(names: list[str]) -> str:
    if _numbered(names) is not None:
        return "by the number each keypoint label ends in"
    return "by first appearance of each keypoint label"
