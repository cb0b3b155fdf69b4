"""CVAT's own XML exports: "CVAT for images 1.1" and "CVAT for video 1.1".

The structure is CVAT's (docs: manual/advanced/xml_format; its writer:
cvat/apps/dataset_manager/formats/cvat.py): `<annotations>` with `<meta>` (the task's or
project's declared labels, skeletons as a label with sublabels naming it their `<parent>`),
then `<image>` elements holding shapes (images), or `<track>`s whose shapes carry a `frame`
(video; CVAT writes every frame of a track, the interpolated ones with keyframe="0").
Coordinates are pixels; `<image>` gives the size it was drawn on, a video its original_size.
"""

import math
import posixpath
import xml.etree.ElementTree as StdElementTree
from collections import Counter
from dataclasses import dataclass, field

import cv2
import numpy as np
from defusedxml import ElementTree
from defusedxml.common import DefusedXmlException

from datasets.models import LabelKind, Task
from datasets.services.formats import (
    MAX_META_FILE_BYTES,
    OBB_TOLERANCE,
    SKIP_IMAGE,
    SKIP_LABEL,
    SKIP_LABEL_FILE,
    SKIP_NO_IMAGE,
    SPLIT_NAMES,
    LabelFileError,
    Parsed,
    ParsedImage,
    ParsedLabel,
    Reader,
    _finite,
    split_from_path,
)
from datasets.services.masks import counts_decode, mask_box, mask_to_polygons

SHAPES = ("box", "polygon", "polyline", "points", "skeleton", "mask", "ellipse", "cuboid", "tag")
# CVAT draws shapes a little past the image's edge; past this share of it they are refused.
EDGE_TOLERANCE = 0.01
CLAIM_PEEK_FILES = 20  # CVAT writes one or a few XML files; VOC one per image
ELLIPSE_POINTS = 32


# --- recognising ---------------------------------------------------------------------------------


def claim_cvat_xml(names: list[str], read: Reader) -> list[str]:
    """The XML files whose root is CVAT's <annotations> (with its <version>, <meta>, images or
    tracks). Only the shallowest few XML files are opened: Pascal VOC has one per image."""
    xmls = sorted((n for n in names if n.lower().endswith(".xml")), key=lambda n: (n.count("/"), n))
    found = []
    for name in xmls[:CLAIM_PEEK_FILES]:
        try:
            head = read(name, MAX_META_FILE_BYTES)[:4096].decode("utf-8", "ignore")
        except (LabelFileError, KeyError):
            continue
        start = head.find("<annotations")
        if start < 0 or "<annotation>" in head[:start]:
            continue
        body = head[start:]
        if any(tag in body for tag in ("<version>", "<meta>", "<image ", "<track ")):
            found.append(name)
    return found


# --- reading -------------------------------------------------------------------------------------


@dataclass
class _LabelSpec:
    name: str
    type: str = ""
    parent: str = ""
    children: list[str] = field(default_factory=list)


def _xml_root(data: bytes):
    """The parsed document. defusedxml refuses DTDs and entities; it hooks the parser in
    Python, a third of this import's time at 100,000 shapes. A document without a DOCTYPE
    can declare no entity, so it goes to the standard library's C parser unchanged; one with
    a DOCTYPE goes to defusedxml, which refuses it."""
    if b"<!DOCTYPE" in data:  # XML's keyword is case-sensitive: no other spelling parses
        return ElementTree.fromstring(data)
    return StdElementTree.fromstring(data)  # noqa: S314 - no DTD, so no entity: see above


def _meta_labels(root) -> list[_LabelSpec]:
    """Declared labels of the task, job or project, in CVAT's order; sublabels under their
    skeleton."""
    specs: dict[str, _LabelSpec] = {}
    meta = root.find("meta")
    if meta is None:
        return []
    for label in meta.iter("label"):
        name = (label.findtext("name") or "").strip()
        if not name or name in specs and not (label.findtext("parent") or "").strip():
            continue
        parent = (label.findtext("parent") or "").strip()
        key = f"{parent}/{name}" if parent else name
        specs[key] = _LabelSpec(name, (label.findtext("type") or "").strip(), parent)
    for spec in list(specs.values()):
        if spec.parent and spec.parent in specs:
            specs[spec.parent].children.append(spec.name)
    return [s for s in specs.values() if not s.parent]


def _float(el, attr: str, default: float | None = None) -> float:
    raw = el.get(attr)
    if raw is None:
        if default is not None:
            return default
        raise ValueError(f"no {attr}")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{attr} is not a number: {raw[:20]!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"{attr} is NaN or infinite")
    return value


def _points(raw: str | None) -> list[float]:
    """CVAT's "x1,y1;x2,y2;..." → [x1, y1, x2, y2, ...]."""
    values: list[str] = []
    for pair in (raw or "").split(";"):
        if not pair.strip():
            continue
        xy = pair.split(",")
        if len(xy) != 2:
            raise ValueError(f"points {pair[:30]!r} are not x,y")
        values += xy
    return _finite(values)


def _normalised(xy: list[float], w: int, h: int, what: str) -> list[float]:
    norm = [v / (w if i % 2 == 0 else h) for i, v in enumerate(xy)]
    if not all(-EDGE_TOLERANCE <= v <= 1 + EDGE_TOLERANCE for v in norm):
        raise ValueError(f"{what} outside the {w}×{h} image")
    return [min(1.0, max(0.0, v)) for v in norm]


def _box_of(xy: list[float]) -> list[float]:
    xs, ys = xy[0::2], xy[1::2]
    x1, x2, y1, y2 = min(xs), max(xs), min(ys), max(ys)
    return [(x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1]


def _rotated(cx, cy, corners, degrees) -> list[float]:
    """Corners turned `degrees` clockwise on the screen (y down) about (cx, cy)."""
    a = math.radians(degrees)
    cos, sin = math.cos(a), math.sin(a)
    out = []
    for x, y in corners:
        dx, dy = x - cx, y - cy
        out += [cx + dx * cos - dy * sin, cy + dx * sin + dy * cos]
    return out


def _min_area_corners(xy: list[float]) -> list[float]:
    pts = np.array(xy, dtype=np.float32).reshape(-1, 2)
    return [float(v) for v in cv2.boxPoints(cv2.minAreaRect(pts)).reshape(-1)]


def _obb(corners_px: list[float], w: int, h: int) -> ParsedLabel:
    norm = [v / (w if i % 2 == 0 else h) for i, v in enumerate(corners_px)]
    if not all(-OBB_TOLERANCE <= v <= 1 + OBB_TOLERANCE for v in norm):
        raise ValueError(f"oriented box outside the {w}×{h} image")
    return norm


class _Reader:
    """One CVAT export: its labels, and shapes turned into Kestrel labels for the task."""

    def __init__(self, images: list[str], task: str, classes: list[str]):
        self.task = task or Task.DETECT
        self.names = list(classes)
        self.images = set(images)
        self.by_base: dict[str, list[str]] = {}
        self.by_stem: dict[str, list[str]] = {}
        for image in images:
            base = posixpath.basename(image).lower()
            self.by_base.setdefault(base, []).append(image)
            self.by_stem.setdefault(posixpath.splitext(base)[0], []).append(image)
        self.skeletons: dict[str, list[str]] = {}
        self.kpt_shape: list[int] | None = None
        self.said = Counter()  # what the notes count: rotated boxes, attributes, ...
        self.attribute_names: set[str] = set()
        self.skipped: list[tuple[str, str, str]] = []

    # classes

    def declare(self, specs: list[_LabelSpec]) -> None:
        for spec in specs:
            if spec.type == "skeleton" or spec.children:
                self.skeletons[spec.name] = spec.children
            if spec.name not in self.names:
                self.names.append(spec.name)

    def cls(self, name: str) -> int:
        if name not in self.names:
            self.names.append(name)
        return self.names.index(name)

    # images

    def find_image(self, base: str, name: str, subset: str) -> str | None:
        name = name.replace("\\", "/").lstrip("/")
        tries = [
            posixpath.join(base, "images", subset, name) if subset else None,
            posixpath.join(base, "images", name),
            posixpath.join(base, name),
            name,
        ]
        for t in tries:
            if t and (norm := posixpath.normpath(t).lstrip("/")) in self.images:
                return norm
        low = name.lower()
        same = self.by_base.get(posixpath.basename(low), [])
        ends = [i for i in same if i.lower().endswith("/" + low) or i.lower() == low]
        for group in (ends, same):
            if subset and len(group) > 1:
                group = [i for i in group if f"/{subset.lower()}/" in f"/{i.lower()}"] or group
            if len(group) == 1:
                return group[0]
        if "." not in posixpath.basename(low):  # a video's frame named without its suffix
            stems = self.by_stem.get(posixpath.basename(low), [])
            if len(stems) == 1:
                return stems[0]
        return None

    def find_frame(self, base: str, frame: int) -> str | None:
        stem = f"frame_{frame:06d}"
        stems = self.by_stem.get(stem, [])
        near = [i for i in stems if i.startswith(base)]
        group = near or stems
        return group[0] if len(group) == 1 else None

    # shapes

    def labels(self, el, kind: str, w: int, h: int, subtracks=None) -> list[ParsedLabel]:
        """The Kestrel labels one CVAT shape becomes; ValueError with the reason if none."""
        label = (el.get("label") or "").strip()
        if not label:
            raise ValueError(f"a {kind} without a label")
        for attr in el.findall("attribute"):
            self.attribute_names.add(attr.get("name") or "?")
            self.said["attributes"] += 1
        if el.get("occluded") == "1" and kind not in ("skeleton", "points"):
            self.said["occluded"] += 1
        task = self.task
        if kind == "tag":
            if task != Task.CLASSIFY:
                raise ValueError(
                    f"an image tag ({label[:40]}): tags are image classes, imported into a "
                    f"classify dataset (this one is {task})"
                )
            return [ParsedLabel(self.cls(label), LabelKind.TAG, [])]
        if task == Task.CLASSIFY:
            raise ValueError(f"a {kind}: a classify dataset takes image tags only")
        if kind in ("polyline", "cuboid"):
            what = "line" if kind == "polyline" else "3D cuboid"
            raise ValueError(f"{kind} shapes are not imported: Kestrel has no {what} labels")
        if kind in ("skeleton", "points"):
            return [self._keypoints(el, kind, label, w, h, subtracks)]
        if task == Task.POSE:
            raise ValueError(f"a {kind}: a pose dataset takes skeletons or points")
        cls = self.cls(label)
        if kind == "box":
            return [self._box(el, cls, w, h)]
        if kind == "ellipse":
            return [self._ellipse(el, cls, w, h)]
        if kind == "polygon":
            xy = _points(el.get("points"))
            if len(xy) < 6:
                raise ValueError("a polygon needs 3 points or more")
            return [self._outline(cls, xy, w, h)]
        if kind == "mask":
            return self._mask(el, cls, w, h)
        raise ValueError(f"{kind} shapes are not imported")

    def _outline(self, cls: int, xy: list[float], w: int, h: int) -> ParsedLabel:
        """A polygon's points (pixels) as the task wants them."""
        if self.task == Task.OBB:
            self.said["polygon_obb"] += 1
            return ParsedLabel(cls, LabelKind.OBB, _obb(_min_area_corners(xy), w, h))
        norm = _normalised(xy, w, h, "polygon")
        box = _box_of(norm)
        if box[2] <= 0 or box[3] <= 0:
            raise ValueError("a polygon with no area")
        if self.task == Task.SEGMENT:
            return ParsedLabel(cls, LabelKind.POLYGON, norm)
        return ParsedLabel(cls, LabelKind.BOX, box)

    def _box(self, el, cls: int, w: int, h: int) -> ParsedLabel:
        x1, y1, x2, y2 = (_float(el, a) for a in ("xtl", "ytl", "xbr", "ybr"))
        if x2 <= x1 or y2 <= y1:
            raise ValueError("a box with no width or height")
        rotation = _float(el, "rotation", 0.0) % 360
        if rotation == 0 and self.task != Task.OBB:
            # The common case, without the corner arithmetic (100,000 boxes a second matter).
            t = EDGE_TOLERANCE
            nx1, ny1, nx2, ny2 = x1 / w, y1 / h, x2 / w, y2 / h
            if nx1 < -t or ny1 < -t or nx2 > 1 + t or ny2 > 1 + t:
                raise ValueError(f"box outside the {w}×{h} image")
            nx1, ny1 = max(0.0, nx1), max(0.0, ny1)
            nx2, ny2 = min(1.0, nx2), min(1.0, ny2)
            return ParsedLabel(
                cls, LabelKind.BOX, [(nx1 + nx2) / 2, (ny1 + ny2) / 2, nx2 - nx1, ny2 - ny1]
            )
        corners = [(x1, y1), (x2, y1), (x2, y2), (x1, y2)]
        turned = _rotated((x1 + x2) / 2, (y1 + y2) / 2, corners, rotation)
        if self.task == Task.OBB:
            return ParsedLabel(cls, LabelKind.OBB, _obb(turned, w, h))
        if abs(rotation) > 1e-9 and abs(rotation - 360) > 1e-9:
            self.said["rotated"] += 1
        norm = _normalised(turned, w, h, "box")
        if self.task == Task.SEGMENT and abs(rotation) > 1e-9:
            return ParsedLabel(cls, LabelKind.POLYGON, norm)
        return ParsedLabel(cls, LabelKind.BOX, _box_of(norm))

    def _ellipse(self, el, cls: int, w: int, h: int) -> ParsedLabel:
        cx, cy, rx, ry = (_float(el, a) for a in ("cx", "cy", "rx", "ry"))
        if rx <= 0 or ry <= 0:
            raise ValueError("an ellipse with no width or height")
        rotation = _float(el, "rotation", 0.0)
        steps = [2 * math.pi * i / ELLIPSE_POINTS for i in range(ELLIPSE_POINTS)]
        ring = [(cx + rx * math.cos(t), cy + ry * math.sin(t)) for t in steps]
        xy = _rotated(cx, cy, ring, rotation)
        self.said["ellipse"] += 1
        if self.task == Task.OBB:
            x1, y1, x2, y2 = cx - rx, cy - ry, cx + rx, cy + ry
            corners = _rotated(cx, cy, [(x1, y1), (x2, y1), (x2, y2), (x1, y2)], rotation)
            return ParsedLabel(cls, LabelKind.OBB, _obb(corners, w, h))
        return self._outline(cls, xy, w, h)

    def _mask(self, el, cls: int, w: int, h: int) -> list[ParsedLabel]:
        left, top, mw, mh = (int(_float(el, a)) for a in ("left", "top", "width", "height"))
        try:
            counts = [int(v) for v in (el.get("rle") or "").replace(" ", "").split(",") if v]
        except ValueError:
            raise ValueError("a mask whose rle is not whole numbers") from None
        mask = counts_decode(counts, mw, mh)
        found = mask_box(mask)
        if found is None:
            raise ValueError("an empty mask")
        if self.task == Task.DETECT:
            bx1, by1, bx2, by2 = found
            xy = [left + bx1, top + by1, left + bx2, top + by2]
            return [ParsedLabel(cls, LabelKind.BOX, _box_of(_normalised(xy, w, h, "mask")))]
        polygons = mask_to_polygons(mask)
        if not polygons:
            raise ValueError("a mask with no region of 4 pixels or more")
        out = []
        for poly in polygons if self.task == Task.SEGMENT else polygons[:1]:
            shifted = [v + (left if i % 2 == 0 else top) for i, v in enumerate(poly)]
            out.append(self._outline(cls, shifted, w, h))
        self.said["mask_regions"] += len(out)
        self.said["masks"] += 1
        return out

    def _keypoints(self, el, kind, label, w, h, subtracks) -> ParsedLabel:
        if self.task != Task.POSE:
            raise ValueError(
                f"{kind} shape ({label[:40]}): keypoints are imported into a pose dataset "
                f"(this one is {self.task})"
            )
        frame = el.get("frame")
        if kind == "skeleton":
            order = self.skeletons.get(label)
            if not order:
                raise ValueError(
                    f"skeleton {label[:40]!r} is not declared in <meta> with its points"
                )
            parts = {p.get("label"): p for p in el.findall("points")}
            if not parts and subtracks:
                parts = {name: shapes.get(frame) for name, shapes in subtracks.items()}
            kpts = []
            for name in order:
                p = parts.get(name)
                if p is None or p.get("outside") == "1":
                    kpts += [0.0, 0.0, 0.0]
                    continue
                xy = _points(p.get("points"))
                if len(xy) != 2:
                    raise ValueError(f"skeleton point {name[:20]!r} is not one x,y")
                kpts += [*xy, 1.0 if p.get("occluded") == "1" else 2.0]
        else:
            xy = _points(el.get("points"))
            if not xy:
                raise ValueError("points with no point")
            vis = 1.0 if el.get("occluded") == "1" else 2.0
            kpts = [v for i in range(0, len(xy), 2) for v in (xy[i], xy[i + 1], vis)]
        k = len(kpts) // 3
        if self.kpt_shape is None:
            self.kpt_shape = [k, 3]
        elif self.kpt_shape[0] != k:
            raise ValueError(f"{k} keypoints where this export's others have {self.kpt_shape[0]}")
        seen = [(kpts[i], kpts[i + 1]) for i in range(0, len(kpts), 3) if kpts[i + 2] > 0]
        if not seen:
            raise ValueError(f"a {kind} with no visible point")
        flat = [c for p in seen for c in p]
        norm = []
        for i in range(0, len(kpts), 3):
            x, y, v = kpts[i : i + 3]
            norm += [*(_normalised([x, y], w, h, "keypoint") if v else [0.0, 0.0]), v]
        box = _box_of(_normalised(flat, w, h, "keypoints"))
        self.said["pose_box"] += 1
        return ParsedLabel(self.cls(label), LabelKind.KEYPOINTS, box + norm)


def _split(subset: str | None, path: str, said: Counter) -> str:
    if subset:
        split = SPLIT_NAMES.get(subset.strip().lower())
        if split:
            return split
        if subset.strip().lower() != "default":
            said[f"subset:{subset.strip()[:40]}"] += 1
    return split_from_path(path)


def _size(el, meta_size=None) -> tuple[int, int] | None:
    try:
        w, h = int(el.get("width")), int(el.get("height"))
    except (TypeError, ValueError):
        return meta_size
    return (w, h) if w > 0 and h > 0 else meta_size


def parse_cvat_xml(images, files, read: Reader, *, task, classes, names) -> Parsed:
    reader = _Reader(images, task, classes)
    skipped = reader.skipped
    parsed_images: dict[str, ParsedImage] = {}
    label_counts: dict[str, int] = {}
    notes: list[str] = []
    video = False
    z_orders: dict[str, list[tuple[float, int]]] = {}
    for xml_name in sorted(files):
        try:
            root = _xml_root(read(xml_name, MAX_META_FILE_BYTES))
        except (ElementTree.ParseError, DefusedXmlException, LabelFileError) as e:
            skipped.append((xml_name, f"unreadable XML ({type(e).__name__}: {e})", SKIP_LABEL_FILE))
            continue
        base = posixpath.dirname(xml_name)
        label_counts[xml_name] = 0
        reader.declare(_meta_labels(root))
        image_els = root.findall("image")
        tracks = root.findall("track")
        if not image_els and not tracks and not root.findall("tag"):
            skipped.append(
                (
                    xml_name,
                    "taken for CVAT XML, but it has no <image> and no <track>",
                    SKIP_LABEL_FILE,
                )  # fmt: skip
            )
            continue
        for n, image_el in enumerate(image_els):
            name = image_el.get("name") or ""
            path = reader.find_image(base, name, image_el.get("subset") or "")
            where = f"{xml_name} image {path or name[:200] or n}"
            if path is None:
                shapes = sum(1 for c in image_el if c.tag in SHAPES)
                skipped.append(
                    (
                        where,
                        f"not in the upload ({shapes} shapes on it not imported)",
                        SKIP_NO_IMAGE,
                    )  # fmt: skip
                )
                continue
            size = _size(image_el)
            entry = ParsedImage(
                path, _split(image_el.get("subset"), path, reader.said), declared_size=size
            )
            parsed_images[path] = entry
            for m, el in enumerate(image_el, 1):
                if el.tag not in SHAPES:
                    continue
                try:
                    if size is None:
                        raise ValueError("its <image> has no width and height")
                    found = reader.labels(el, el.tag, *size)
                except ValueError as e:
                    skipped.append((f"{where} {el.tag} {m}", str(e), SKIP_LABEL))
                    continue
                z = _float(el, "z_order", 0.0) if el.get("z_order") else 0.0
                for label in found:
                    z_orders.setdefault(path, []).append((z, len(entry.labels)))
                    entry.labels.append(label)
                label_counts[xml_name] += len(found)
        if tracks or root.find("tag") is not None:
            video = True
            meta_size = _original_size(root)
            count = _video(reader, root, xml_name, base, meta_size, parsed_images, label_counts)
            notes.append(
                f"CVAT for video: {count} frames with shapes from {len(tracks)} tracks in "
                f"{xml_name}"
            )
    for path, order in z_orders.items():
        if any(z for z, _ in order):
            entry = parsed_images[path]
            ranked = sorted(order, key=lambda t: t[0])
            entry.labels = [entry.labels[i] for _, i in ranked]
            reader.said["z_ordered"] += 1
    unnamed = [i for i in images if i not in parsed_images]
    if video:
        for image in unnamed:
            skipped.append((image, "a video frame with no shapes: not imported", SKIP_IMAGE))
    else:
        for image in unnamed:
            parsed_images[image] = ParsedImage(image, split_from_path(image))
        if unnamed:
            notes.append(f"{len(unnamed)} images not named in the CVAT XML imported without labels")
    notes = [_lead_note(video, files, parsed_images), *notes, *_notes(reader)]
    return Parsed(
        format="cvat-video" if video else "cvat-images",
        class_names=reader.names,
        images=parsed_images,
        skipped=skipped,
        task=None,
        keypoint_shape=reader.kpt_shape,
        notes=notes,
        label_counts=label_counts,
    )


def _lead_note(video: bool, files, parsed_images) -> str:
    what = "CVAT for video 1.1" if video else "CVAT for images 1.1"
    return (
        f"{what}: {len(parsed_images)} images named in {', '.join(sorted(files)[:3])}, "
        "matched to the uploaded files by path, then by name"
    )


def _original_size(root) -> tuple[int, int] | None:
    for size in root.iter("original_size"):
        try:
            w, h = int(size.findtext("width")), int(size.findtext("height"))
        except (TypeError, ValueError):
            return None
        return (w, h) if w > 0 and h > 0 else None
    return None


def _video(reader: _Reader, root, xml_name, base, meta_size, parsed_images, label_counts) -> int:
    """Tracks (and frame tags) → the labels of each frame that has shapes."""
    frames: dict[int, ParsedImage] = {}
    missing: Counter = Counter()

    def entry_for(frame: int) -> ParsedImage | None:
        if frame in frames:
            return frames[frame]
        path = reader.find_frame(base, frame)
        if path is None:
            missing[frame] += 1
            return None
        entry = parsed_images.get(path) or ParsedImage(
            path, split_from_path(path), declared_size=meta_size
        )
        parsed_images[path] = frames[frame] = entry
        return entry

    items = [(t, t.findall("*")) for t in root.findall("track")]
    items += [(None, [tag]) for tag in root.findall("tag")]
    for track, shapes in items:
        tid = track.get("id", "?") if track is not None else "tag"
        subtracks = {}
        if track is not None:
            for sub in track.findall("track"):
                subtracks[sub.get("label")] = {p.get("frame"): p for p in sub.findall("points")}
        for el in shapes:
            if el.tag not in SHAPES or el.get("outside") == "1":
                continue
            if track is not None and el.get("label") is None:
                el.set("label", track.get("label") or "")
            try:
                frame = int(el.get("frame"))
            except (TypeError, ValueError):
                reader.skipped.append((f"{xml_name} track {tid}", "a shape without a frame",
                                       SKIP_LABEL))  # fmt: skip
                continue
            entry = entry_for(frame)
            if entry is None:
                continue
            where = f"{xml_name} track {tid} frame {frame}"
            try:
                size = entry.declared_size
                if size is None:
                    raise ValueError("the video's <original_size> is not given")
                found = reader.labels(el, el.tag, *size, subtracks=subtracks)
            except ValueError as e:
                reader.skipped.append((where, str(e), SKIP_LABEL))
                continue
            entry.labels.extend(found)
            label_counts[xml_name] += len(found)
    for frame, shapes in sorted(missing.items()):
        reader.skipped.append(
            (
                f"{xml_name} frame {frame}",
                f"frame_{frame:06d} is not in the upload ({shapes} shapes on it not imported): "
                "export from CVAT with images, or put the frames in images/",
                SKIP_NO_IMAGE,
            )
        )
    return len(frames)


def _notes(reader: _Reader) -> list[str]:
    said = reader.said
    out = []
    if said["rotated"]:
        out.append(
            f"{said['rotated']} rotated boxes imported as the upright boxes around them "
            f"(this dataset is {reader.task}; an obb dataset keeps the rotation)"
        )
    if said["polygon_obb"]:
        out.append(f"{said['polygon_obb']} polygons imported as their smallest oriented boxes")
    if said["masks"]:
        out.append(f"{said['masks']} masks traced into {said['mask_regions']} labels")
    if said["ellipse"]:
        out.append(f"{said['ellipse']} ellipses imported as their outlines")
    if said["pose_box"]:
        out.append(
            f"{said['pose_box']} skeletons or points given the box around their visible points "
            "(CVAT draws none)"
        )
    if said["attributes"]:
        shown = ", ".join(sorted(reader.attribute_names)[:8])
        out.append(
            f"{said['attributes']} attribute values ({shown}) not kept: Kestrel labels have "
            "no attributes"
        )
    if said["occluded"]:
        out.append(
            f"{said['occluded']} shapes marked occluded: Kestrel keeps occlusion only as a "
            "keypoint's visibility"
        )
    if said["z_ordered"]:
        out.append(f"shapes of {said['z_ordered']} images kept in their z_order")
    for key, n in said.items():
        if key.startswith("subset:"):
            out.append(f"{n} images of subset {key[7:]!r} put in the split their folder names")
    if reader.kpt_shape:
        out.append(f"{reader.kpt_shape[0]} keypoints an instance")
    return out
