"""CVAT's own XML exports: "CVAT for images 1.1" and "CVAT for video 1.1".

The structure is CVAT's (docs: manual/advanced/xml_format; its writer:
cvat/apps/dataset_manager/formats/cvat.py): `<annotations>` with `<meta>` (the task's or
project's declared labels, skeletons as a label with sublabels naming it their `<parent>`),
then `<image>` elements holding shapes (images), or `<track>`s whose shapes carry a `frame`
(video; CVAT writes every frame of a track, the interpolated ones with keyframe="0").
Coordinates are pixels; `<image>` gives the size it was drawn on, a video its original_size.
The shapes become labels in cvat_shapes.py.
"""

import posixpath
import xml.etree.ElementTree as StdElementTree
from collections import Counter

from defusedxml import ElementTree
from defusedxml.common import DefusedXmlException

from datasets.services.formats import (
    MAX_META_FILE_BYTES,
    SKIP_IMAGE,
    SKIP_LABEL,
    SKIP_LABEL_FILE,
    SKIP_NO_IMAGE,
    SPLIT_NAMES,
    LabelFileError,
    Parsed,
    ParsedImage,
    Reader,
    split_from_path,
)
from datasets.services.tool_formats.common import image_size
from datasets.services.tool_formats.cvat_shapes import CvatReader, LabelSpec, number_attr

SHAPES = ("box", "polygon", "polyline", "points", "skeleton", "mask", "ellipse", "cuboid", "tag")
CLAIM_PEEK_FILES = 20  # CVAT writes one or a few XML files; VOC one per image


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


def _xml_root(data: bytes):
    """The parsed document. defusedxml refuses DTDs and entities; it hooks the parser in
    Python, a third of this import's time at 100,000 shapes. A document without a DOCTYPE
    can declare no entity, so it goes to the standard library's C parser unchanged; one with
    a DOCTYPE goes to defusedxml, which refuses it."""
    if b"<!DOCTYPE" in data:  # XML's keyword is case-sensitive: no other spelling parses
        return ElementTree.fromstring(data)
    return StdElementTree.fromstring(data)  # noqa: S314 - no DTD, so no entity: see above


def _meta_labels(root) -> list[LabelSpec]:
    """Declared labels of the task, job or project, in CVAT's order; sublabels under their
    skeleton."""
    specs: dict[str, LabelSpec] = {}
    meta = root.find("meta")
    if meta is None:
        return []
    for label in meta.iter("label"):
        name = (label.findtext("name") or "").strip()
        if not name or name in specs and not (label.findtext("parent") or "").strip():
            continue
        parent = (label.findtext("parent") or "").strip()
        key = f"{parent}/{name}" if parent else name
        specs[key] = LabelSpec(name, (label.findtext("type") or "").strip(), parent)
    for spec in list(specs.values()):
        if spec.parent and spec.parent in specs:
            specs[spec.parent].children.append(spec.name)
    return [s for s in specs.values() if not s.parent]


def _split(subset: str | None, path: str, said: Counter) -> str:
    if subset:
        split = SPLIT_NAMES.get(subset.strip().lower())
        if split:
            return split
        if subset.strip().lower() != "default":
            said[f"subset:{subset.strip()[:40]}"] += 1
    return split_from_path(path)


def _size(el, meta_size=None) -> tuple[int, int] | None:
    return image_size(el.get("width"), el.get("height")) or meta_size


def parse_cvat_xml(images, files, read: Reader, *, task, classes, names) -> Parsed:
    reader = CvatReader(images, task, classes)
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
                z = number_attr(el, "z_order", 0.0) if el.get("z_order") else 0.0
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
        return image_size(size.findtext("width"), size.findtext("height"))
    return None


def _video(reader: CvatReader, root, xml_name, base, meta_size, parsed_images, label_counts) -> int:
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


def _notes(reader: CvatReader) -> list[str]:
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
