"""Per-pixel layouts: the uploads of semantic-segmentation and depth datasets, recognised from
their entry names (and a few small files: a data YAML, a labelmap, ImageSets lists).

Semantic: Ultralytics' own (a data YAML with `masks_dir`, `images/<split>/x.jpg` with
`masks/<split>/x.png`, `label_mapping` applied as its SemanticDataset does), Cityscapes
(`leftImg8bit/` with `gtFine/*_gtFine_labelIds.png`, label ids to the 19 train ids), Pascal VOC
(`SegmentationClass/` palette PNGs with `JPEGImages/`, or CVAT's and Datumaro's with a
`labelmap.txt` of colours) and plain image/mask folders. Depth: Ultralytics' (`depth/<split>/`
16-bit PNGs, `depth_scale` in the YAML) and plain image/depth folders.

Parsing pairs each image with its map's entry name; the maps are read, checked and stored by
the import (ingest.py), one image at a time, through `map_read`. A map is never an image of
the dataset.
"""

import io
import math
import posixpath
from types import SimpleNamespace

import cv2
import numpy as np
import yaml
from PIL import Image as PILImage

from datasets.models import IGNORE_INDEX, Task
from datasets.services.formats import (
    MAX_LABEL_FILE_BYTES,
    SKIP_FILE,
    SKIP_IMAGE,
    SKIP_LABEL_FILE,
    SKIP_NO_IMAGE,
    SKIP_NO_MASK,
    LabelFileError,
    Parsed,
    ParsedImage,
    PixelLayout,
    Reader,
    _names_from_yaml,
    _text,
    _yaml_split_dirs,
    class_list_file,
    split_from_path,
)
from datasets.services.images import looks_like_image
from datasets.services.pixel_maps import (
    PixelMapError,
    depth_decode,
    png_header,
    semantic_check,
    semantic_decode,
)

# Folders whose PNGs are the maps of the images beside them, when no data YAML names one.
MASK_FOLDERS = ("masks", "labels", "annotations")
DEPTH_FOLDER = "depth"
MAX_MAP_BYTES = 64 * 1024 * 1024  # as an image
VOC_SET_SPLITS = {
    "train.txt": "train",
    "trainval.txt": "train",
    "val.txt": "val",
    "test.txt": "test",
}
# A labelmap's entry for VOC's border (Datumaro writes `ignored:224,224,192`): ignore, no class.
IGNORED_LABELS = ("ignored", "ignore", "void")
CITYSCAPES_IMAGE = "_leftimg8bit"
CITYSCAPES_MASKS = ("_gtfine_labelids", "_gtfine_labeltrainids")  # preferred first
CITYSCAPES_OTHERS = ("_gtfine_color", "_gtfine_instanceids", "_gtfine_polygons")


def _folders(name: str) -> list[str]:
    return name.lower().split("/")[:-1]


def _stem(name: str) -> str:
    return posixpath.splitext(posixpath.basename(name))[0].lower()


def _is_png(name: str) -> bool:
    return name.lower().endswith(".png")


# --- the maps' values ------------------------------------------------------------------------


def label_lut(mapping) -> list[int]:
    """Ultralytics' label_mapping (raw id → train id, `ignore_label` → 255) as the 256-entry
    table its SemanticDataset builds: asked of Ultralytics itself, so a mask imported here
    holds what training on the original files would have read."""
    from ultralytics.data.dataset import SemanticDataset

    try:
        normalised = SemanticDataset._parse_label_mapping(None, mapping)
    except (TypeError, ValueError) as e:
        raise LabelFileError(f"its label_mapping cannot be read ({str(e)[:80]})") from None
    forward, _ = SemanticDataset._build_label_luts(SimpleNamespace(label_mapping=normalised))
    return [int(v) for v in forward]


def _cityscapes() -> tuple[list[str], list[int]]:
    """The 19 Cityscapes train classes and label id → train id, from the dataset YAML that
    Ultralytics maintains."""
    from ultralytics.utils import ROOT, YAML

    doc = YAML.load(ROOT / "cfg" / "datasets" / "cityscapes.yaml")
    return _names_from_yaml(doc), label_lut(doc["label_mapping"])


def _voc_names() -> list[str]:
    """VOC's 20 object classes (Ultralytics' VOC.yaml, in VOC's own order), background first:
    a VOC mask's index 0 is background, 1–20 the classes."""
    from ultralytics.utils import ROOT, YAML

    return ["background", *_names_from_yaml(YAML.load(ROOT / "cfg" / "datasets" / "VOC.yaml"))]


def map_read(
    data: bytes,
    *,
    task: str,
    layout: PixelLayout,
    size: tuple[int, int],
    classes: int,
) -> np.ndarray:
    """One map's pixels as stored: a mask of class indexes (255: ignore) checked against
    `classes`, or a depth map's 16-bit values. `size` is its image's (width, height): a map of
    another size is refused from its header, before a pixel is decoded (so is a bomb)."""
    header = png_header(data)
    if (header.width, header.height) != size:
        what = "depth map" if task == Task.DEPTH else "mask"
        raise PixelMapError(
            f"the {what} is {header.width}×{header.height} but its image is {size[0]}×{size[1]}"
        )
    if task == Task.DEPTH:
        if layout.depth_scale_refused:
            raise PixelMapError(layout.depth_scale_refused)
        return depth_decode(data)
    if layout.colours and header.colour_type == 3:
        mask = _palette_indexes(data, layout.colours)
    else:
        mask = semantic_decode(data, palette=layout.colours)
    if layout.lut is not None:
        mask = cv2.LUT(mask, np.asarray(layout.lut, dtype=np.uint8))
    semantic_check(mask, classes=classes)
    return mask


def _palette_indexes(data: bytes, colours: dict[tuple[int, int, int], int]) -> np.ndarray:
    """A palette PNG read through its palette's colours (the labelmap names classes by colour;
    the writer's palette order need not be the labelmap's). VOC's index 255, the border, is
    ignore whatever its colour."""
    mask = semantic_decode(data)
    palette = PILImage.open(io.BytesIO(data)).getpalette() or []
    lut = np.full(256, IGNORE_INDEX, dtype=np.uint8)
    for index in np.unique(mask).tolist():
        if index == IGNORE_INDEX:
            continue
        colour = tuple(palette[index * 3 : index * 3 + 3])
        if colour not in colours:
            shown = "#" + "".join(f"{c:02x}" for c in colour) if len(colour) == 3 else "none"
            raise PixelMapError(
                f"palette index {index} (colour {shown}) of the mask is in no class's colour"
            )
        lut[index] = colours[colour]
    return cv2.LUT(mask, lut)


# --- class lists ------------------------------------------------------------------------------


def _labelmap(txts: list[str], read: Reader) -> tuple[str, list[str], dict] | None:
    """CVAT's and Datumaro's labelmap.txt (`name:r,g,b:parts:actions` a line, `#` comments):
    the class names in order and their colours (an `ignored` entry's colour is ignore)."""
    for name in sorted(
        (t for t in txts if posixpath.basename(t).lower() == "labelmap.txt"), key=_depth_first
    ):
        try:
            text = _text(read, name, MAX_LABEL_FILE_BYTES)
        except LabelFileError:
            continue
        names, colours = [], {}
        for line in text.splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            label, _, rest = line.partition(":")
            rgb = rest.split(":", 1)[0].split(",")
            ignored = label.strip().lower() in IGNORED_LABELS
            if not ignored:
                names.append(label.strip())
            try:
                colour = tuple(int(v) for v in rgb)
            except ValueError:
                continue
            if len(colour) == 3 and colour not in colours:
                colours[colour] = IGNORE_INDEX if ignored else len(names) - 1
        if names:
            return name, names, colours
    return None


def _depth_first(name: str) -> tuple:
    return (name.count("/"), name)


def _data_yaml(names: list[str], read: Reader) -> tuple[str, dict] | None:
    yamls = sorted((n for n in names if n.lower().endswith((".yaml", ".yml"))), key=_depth_first)
    for name in yamls:
        try:
            doc = yaml.safe_load(_text(read, name, MAX_LABEL_FILE_BYTES))
        except (yaml.YAMLError, LabelFileError):
            continue
        if isinstance(doc, dict) and ("names" in doc or "depth_scale" in doc):
            return name, doc
    return None


def _class_list(txts, read: Reader, notes: list):
    """Class names (and colours) from labelmap.txt or classes.txt, or None."""
    found = _labelmap(txts, read)
    if found is not None:
        name, names, colours = found
        notes.append(f"classes and their colours read from {name} ({len(names)} classes)")
        return names, colours
    listed = class_list_file(txts, read)
    if listed is not None:
        notes.append(f"class names read from {listed[0]} ({len(listed[1])} classes)")
        return listed[1], None
    return None


# --- pairing images with maps -----------------------------------------------------------------


def _mirror(image: str, folder: str) -> str | None:
    """Ultralytics' rule (img2label_paths): the last /images/ becomes /<folder>/, .png."""
    path = "/" + image
    if "/images/" not in path:
        return None
    head, tail = path.rsplit("/images/", 1)
    return f"{head}/{folder}/{tail}"[1:].rsplit(".", 1)[0] + ".png"


def _pair(
    images: list[str], maps: list[str], *, folder: str, key=_stem
) -> tuple[dict[str, str], dict[str, str]]:
    """image → its map: the mirrored path first, else the one map named like it (in its split
    where several are). Returns the pairs and, for maps left unpaired because several were
    named alike, why."""
    by_path = {m.lower(): m for m in maps}
    pairs: dict[str, str] = {}
    taken: set[str] = set()
    for image in images:
        mirrored = _mirror(image, folder)
        if mirrored is not None and mirrored.lower() in by_path:
            pairs[image] = by_path[mirrored.lower()]
            taken.add(pairs[image])
    by_key: dict[str, list[str]] = {}
    for m in maps:
        if m not in taken:
            by_key.setdefault(key(m), []).append(m)
    ambiguous: dict[str, str] = {}
    for image in images:
        if image in pairs:
            continue
        candidates = by_key.get(key(image), [])
        if len(candidates) > 1:
            split = split_from_path(image)
            same = [c for c in candidates if split_from_path(c) == split]
            candidates = same if len(same) == 1 else candidates
        if len(candidates) == 1 and candidates[0] not in taken:
            pairs[image] = candidates[0]
            taken.add(candidates[0])
        elif len(candidates) > 1:
            for c in candidates:
                ambiguous[c] = f"{len(candidates)} maps are named like {image} (none was guessed)"
    return pairs, ambiguous


def _result(
    fmt: str,
    *,
    images: list[str],
    maps: list[str],
    pairs: dict[str, str],
    ambiguous: dict[str, str],
    splits: dict[str, str],
    names: list[str],
    layout: PixelLayout,
    skipped: list,
    notes: list,
    what: str,
) -> Parsed:
    parsed_images = {}
    for image in images:
        mask = pairs.get(image)
        parsed_images[image] = ParsedImage(
            image, splits.get(image) or split_from_path(image), mask=mask
        )
        if mask is None:
            skipped.append((image, f"no {what} of this image: imported unlabelled", SKIP_NO_MASK))
    paired = set(pairs.values())
    for m in maps:
        if m in paired:
            continue
        if m in ambiguous:
            skipped.append((m, f"not paired: {ambiguous[m]}", SKIP_LABEL_FILE))
        else:
            skipped.append((m, f"a {what} without its image", SKIP_NO_IMAGE))
    return Parsed(
        format=fmt,
        class_names=names,
        images=parsed_images,
        skipped=skipped,
        notes=notes,
        pixels=layout,
    )


def _non_png_maps(maps: list[str], skipped: list, what: str) -> list[str]:
    """Only PNG is a map: a JPEG's compression changes the values it was saved with."""
    for m in maps:
        if not _is_png(m):
            why = f"a {what} must be a PNG (lossless), not {m.rsplit('.', 1)[-1]}"
            skipped.append((m, why, SKIP_LABEL_FILE))
    return [m for m in maps if _is_png(m)]


# --- the layouts ------------------------------------------------------------------------------


def parse_pixel(names: list[str], read: Reader, *, task: str, classes: list[str]) -> Parsed:
    """The upload of a semantic or depth dataset, whatever its layout, paired image by image
    with its masks or depth maps. `classes` are the dataset's."""
    lower = [n.lower() for n in names]
    if task == Task.DEPTH:
        return _parse_folders(names, read, task=task, classes=classes)
    if any(low.endswith(f"{s}.png") for low in lower for s in CITYSCAPES_MASKS) and any(
        CITYSCAPES_IMAGE in low for low in lower
    ):
        return _parse_cityscapes(names, read, classes=classes)
    if any("segmentationclass" in _folders(low) and _is_png(low) for low in lower):
        return _parse_voc(names, read, classes=classes)
    return _parse_folders(names, read, task=task, classes=classes)


def _names_for(given: list[str] | None, classes: list[str], layout: PixelLayout, notes: list):
    if given:
        return given
    if classes:
        notes.append(f"no class list in the upload: the dataset's {len(classes)} classes are used")
        return list(classes)
    layout.classes_from_maps = True
    notes.append(
        "no class list (classes.txt, labelmap.txt or a YAML with names): classes class0… are "
        "made from the values in the masks"
    )
    return []


def _parse_folders(names, read: Reader, *, task: str, classes: list[str]) -> Parsed:
    """Ultralytics' layouts (a data YAML; images/ with masks/ or depth/) and plain image/map
    folders paired by name."""
    skipped: list[tuple[str, str, str]] = []
    notes: list[str] = []
    layout = PixelLayout()
    found = _data_yaml(names, read)
    doc = found[1] if found else {}
    given: list[str] | None = None
    if task == Task.DEPTH:
        folders = (DEPTH_FOLDER,)
        what = "depth map"
        fmt = "yolo-depth" if found else "depth-folders"
        if found and "depth_scale" in doc:
            value = doc["depth_scale"]
            number = isinstance(value, int | float) and not isinstance(value, bool)
            scale = value if number else None
            if scale is None or not math.isfinite(scale) or scale <= 0:
                layout.depth_scale_refused = (
                    f"not read: {found[0]} gives depth_scale {str(value)[:20]!r}, which is not a "
                    "positive number (the PNG value of one metre)"
                )
                skipped.append((found[0], layout.depth_scale_refused, SKIP_LABEL_FILE))
            else:
                layout.depth_scale = float(scale)
        names_out = list(classes)
    else:
        masks_dir = doc.get("masks_dir", "masks") if found else None
        if found and not (isinstance(masks_dir, str) and masks_dir.strip("/")):
            skipped.append((found[0], "its masks_dir is not a folder name", SKIP_LABEL_FILE))
            masks_dir = "masks"
        folders = (masks_dir.strip("/").lower(),) if found else MASK_FOLDERS
        what = "mask"
        fmt = "yolo-semantic" if found else "mask-folders"
        if found:
            try:
                given = _names_from_yaml(doc)
                notes.append(f"class names read from {found[0]} ({len(given)} classes)")
            except LabelFileError as e:
                skipped.append((found[0], str(e), SKIP_LABEL_FILE))
            if doc.get("label_mapping") is not None:
                try:
                    layout.lut = label_lut(doc["label_mapping"])
                    notes.append(f"mask values mapped by {found[0]}'s label_mapping")
                except LabelFileError as e:
                    skipped.append((found[0], str(e), SKIP_LABEL_FILE))
        else:
            txts = [n for n in names if n.lower().endswith(".txt")]
            listed = _class_list(txts, read, notes)
            if listed is not None:
                given, layout.colours = listed
        names_out = _names_for(given, classes, layout, notes)
    maps = [n for n in names if looks_like_image(n) and set(_folders(n)) & set(folders)]
    map_set = set(maps)
    images = [n for n in names if looks_like_image(n) and n not in map_set]
    maps = _non_png_maps(maps, skipped, what)
    splits = {}
    if found:
        by_prefix = _yaml_split_dirs(found[0], doc, images, notes)
        for image in images:
            splits[image] = next((s for p, s in by_prefix.items() if image.startswith(p)), None)
    pairs, ambiguous = {}, {}
    for folder in folders:  # masks/ before labels/ before annotations/
        left = [i for i in images if i not in pairs]
        got, amb = _pair(left, [m for m in maps if folder in _folders(m)], folder=folder)
        pairs.update(got)
        ambiguous.update(amb)
    if not maps and not found:
        # Nothing per-pixel: the images alone, unlabelled (as any upload of images is).
        return Parsed(
            format="images",
            class_names=names_out,
            images={n: ParsedImage(n, split_from_path(n)) for n in images},
            notes=notes,
            pixels=layout,
        )
    return _result(
        fmt,
        images=images,
        maps=maps,
        pairs=pairs,
        ambiguous=ambiguous,
        splits=splits,
        names=names_out,
        layout=layout,
        skipped=skipped,
        notes=notes,
        what=what,
    )


def _cityscapes_key(name: str) -> str:
    stem = _stem(name)
    for suffix in (CITYSCAPES_IMAGE, *CITYSCAPES_MASKS, *CITYSCAPES_OTHERS):
        if stem.endswith(suffix):
            return f"{split_from_path(name)}/{stem[: -len(suffix)]}"
    return f"{split_from_path(name)}/{stem}"


def _parse_cityscapes(names, read: Reader, *, classes: list[str]) -> Parsed:
    """leftImg8bit/<split>/<city>/x_leftImg8bit.png with gtFine/<split>/<city>/x_gtFine_labelIds
    .png: label ids mapped to the 19 train ids (ignore → 255), as Cityscapes' own scripts do
    (a `_labelTrainIds.png` already holds them). Colour and instance PNGs and polygon JSONs are
    other renderings of the same labels."""
    skipped: list[tuple[str, str, str]] = []
    notes: list[str] = []
    city_names, lut = _cityscapes()
    layout = PixelLayout(lut=lut)
    images, maps = [], []
    for n in names:
        low = n.lower()
        stem = _stem(n)
        if any(stem.endswith(s) for s in CITYSCAPES_OTHERS) or low.endswith("label_colors.txt"):
            skipped.append((n, "not read: Cityscapes' labelIds masks are read", SKIP_FILE))
        elif stem.endswith(CITYSCAPES_MASKS):
            maps.append(n)
        elif looks_like_image(n) and "gtfine" not in _folders(low):
            images.append(n)
    ids = {_cityscapes_key(m) for m in maps if _stem(m).endswith(CITYSCAPES_MASKS[0])}
    train_ids = [m for m in maps if _stem(m).endswith(CITYSCAPES_MASKS[1])]
    for m in train_ids:
        if _cityscapes_key(m) in ids:
            skipped.append((m, "not read: its labelIds mask is read", SKIP_FILE))
    maps = [m for m in maps if not (m in train_ids and _cityscapes_key(m) in ids)]
    if train_ids and not ids:
        layout.lut = None  # train ids already
        notes.append("masks read from Cityscapes' labelTrainIds PNGs")
    else:
        notes.append("Cityscapes label ids mapped to the 19 train ids (Ultralytics' mapping)")
    if classes and classes != city_names:
        notes.append("the dataset's classes are matched to Cityscapes' 19 by name")
    pairs, ambiguous = _pair(images, maps, folder="gtFine", key=_cityscapes_key)
    return _result(
        "cityscapes",
        images=images,
        maps=maps,
        pairs=pairs,
        ambiguous=ambiguous,
        splits={},
        names=city_names,
        layout=layout,
        skipped=skipped,
        notes=notes,
        what="mask",
    )


def _voc_sets(names, read: Reader, skipped: list, notes: list) -> dict[str, str]:
    """Image id → split, from ImageSets/Segmentation/{train,trainval,val,test}.txt."""
    out: dict[str, str] = {}
    lists = [n for n in names if "/imagesets/segmentation/" in f"/{n.lower()}"]
    for list_name in sorted(VOC_SET_SPLITS, key=lambda n: n != "trainval.txt"):
        for name in (n for n in lists if n.lower().endswith(f"/{list_name}")):
            try:
                text = _text(read, name, MAX_LABEL_FILE_BYTES * 16)
            except LabelFileError as e:
                skipped.append((name, f"image set list {e}", SKIP_FILE))
                continue
            ids = [line.split()[0].lower() for line in text.splitlines() if line.strip()]
            for image_id in ids:
                out[posixpath.basename(image_id)] = VOC_SET_SPLITS[list_name]
            notes.append(f"{len(ids)} images put in {VOC_SET_SPLITS[list_name]} by {name}")
    return out


def _parse_voc(names, read: Reader, *, classes: list[str]) -> Parsed:
    """Pascal VOC's SegmentationClass/*.png (palette PNGs of class indexes, 255 the border =
    ignore) with JPEGImages/; its 21 classes, or a labelmap.txt's (CVAT, Datumaro), whose
    colours then read the masks."""
    skipped: list[tuple[str, str, str]] = []
    notes: list[str] = []
    layout = PixelLayout()
    txts = [n for n in names if n.lower().endswith(".txt")]
    found = _labelmap(txts, read)
    if found is not None:
        name, class_names, layout.colours = found
        notes.append(f"classes and their colours read from {name} ({len(class_names)} classes)")
    else:
        class_names = _voc_names()
        notes.append("Pascal VOC's 21 classes (background first)")
    sets = _voc_sets(names, read, skipped, notes)
    maps, images = [], []
    for n in names:
        folders = _folders(n)
        if "segmentationclass" in folders and looks_like_image(n):
            maps.append(n)
        elif "segmentationobject" in folders and looks_like_image(n):
            skipped.append((n, "not read: instance masks (SegmentationClass is read)", SKIP_FILE))
        elif "annotations" in folders and n.lower().endswith(".xml"):
            skipped.append((n, "not read: boxes (a semantic dataset reads the masks)", SKIP_FILE))
        elif looks_like_image(n):
            images.append(n)
    maps = _non_png_maps(maps, skipped, "mask")
    pairs, ambiguous = _pair(images, maps, folder="SegmentationClass")
    if sets:
        # The rest of VOC's JPEGImages is its detection set: no mask to learn from.
        outside = [i for i in images if i not in pairs and _stem(i) not in sets]
        for image in outside:
            skipped.append((image, "not in VOC's segmentation set (no mask)", SKIP_IMAGE))
        images = [i for i in images if i not in set(outside)]
    splits = {i: sets[_stem(i)] for i in images if _stem(i) in sets}
    return _result(
        "voc-segmentation",
        images=images,
        maps=maps,
        pairs=pairs,
        ambiguous=ambiguous,
        splits=splits,
        names=class_names,
        layout=layout,
        skipped=skipped,
        notes=notes,
        what="mask",
    )
