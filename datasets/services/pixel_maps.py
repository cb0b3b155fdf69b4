"""Per-pixel labels (semantic masks, depth maps): checked, encoded as canonical PNG, stored as
content-addressed blobs like images, and drawn as the overlays the gallery lays on thumbnails.

A semantic mask is 8-bit: each pixel the index of its class, IGNORE_INDEX (255) where no class
is. A depth map is 16-bit: the depth in metres × the dataset's depth_scale, 0 where there is no
reading (Ultralytics' rule, `ultralytics.data.utils.save_depth_png`). Both are the size of their
image. Decoding reads the PNG header before any pixel, so a "bomb" (a tiny file declaring a
huge image) is refused before it is inflated.
"""

import hashlib
import io
import struct
import zlib
from dataclasses import dataclass

import cv2
import numpy as np
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone
from PIL import Image as PILImage

from core.storage import storage_put
from datasets.models import IGNORE_INDEX, Blob, Dataset, Image, LabelStatus, PixelMap, Task
from datasets.selectors.gallery import PALETTE

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# The largest mask or depth map accepted (the image pixel cap's order: 8K × 8K).
MAX_PIXELS = 70_000_000
# Overlays are drawn at the gallery thumbnail's size.
OVERLAY_PX = 360
OVERLAY_ALPHA = 140  # of 255: the image shows through a class's colour


class PixelMapError(ValueError):
    """A mask or depth map that cannot be taken, with the reason in words for the report."""


@dataclass(frozen=True)
class PngHeader:
    width: int
    height: int
    bit_depth: int
    colour_type: int  # 0 grey, 2 RGB, 3 palette, 4 grey+alpha, 6 RGBA

    @property
    def kind(self) -> str:
        return {0: "greyscale", 2: "RGB", 3: "palette", 4: "greyscale+alpha", 6: "RGBA"}.get(
            self.colour_type, f"colour type {self.colour_type}"
        )


def png_header(data: bytes) -> PngHeader:
    """The PNG's IHDR, read without decoding a pixel."""
    if len(data) < 33 or not data.startswith(PNG_SIGNATURE) or data[12:16] != b"IHDR":
        raise PixelMapError("not a PNG file (masks and depth maps must be lossless PNG)")
    width, height, bit_depth, colour_type = struct.unpack(">IIBB", data[16:26])
    if width <= 0 or height <= 0:
        raise PixelMapError("a PNG without a width and height")
    if width * height > MAX_PIXELS:
        raise PixelMapError(
            f"{width}×{height} pixels declared, more than the {MAX_PIXELS:,} a mask may have"
        )
    return PngHeader(width, height, bit_depth, colour_type)


def _decode(data: bytes) -> tuple[PngHeader, PILImage.Image]:
    header = png_header(data)
    try:
        img = PILImage.open(io.BytesIO(data))
        img.load()
    except (OSError, SyntaxError, ValueError, zlib.error, PILImage.DecompressionBombError) as e:
        raise PixelMapError(f"the PNG cannot be read ({str(e)[:80]})") from None
    if img.size != (header.width, header.height):
        raise PixelMapError("the PNG's pixels do not match its header")
    return header, img


def semantic_decode(
    data: bytes, *, palette: dict[tuple[int, int, int], int] | None = None
) -> np.ndarray:
    """An 8-bit mask's values (uint8, H×W) as the file holds them. A palette PNG gives its
    indexes (VOC's colours are the palette of index masks). An RGB mask is read only with a
    `palette` (colour → value); without one it is refused: its colours name no class."""
    header, img = _decode(data)
    if header.colour_type in (0, 3, 4) and header.bit_depth <= 8:
        if img.mode == "LA":
            img = img.getchannel("L")
        return np.asarray(img, dtype=np.uint8).copy()
    if header.colour_type in (0, 4) and header.bit_depth == 16:
        values = np.asarray(img.getchannel(0) if img.mode == "LA" else img)
        if values.max(initial=0) > 255:
            raise PixelMapError(
                "a 16-bit mask with values above 255 (a class mask holds one index per pixel)"
            )
        return values.astype(np.uint8)
    if header.colour_type in (2, 6):
        if not palette:
            raise PixelMapError(
                f"an {header.kind} mask without a palette: its colours name no class (give a "
                "greyscale or palette PNG of class indexes, or the colour list of the classes)"
            )
        rgb = np.asarray(img.convert("RGB"), dtype=np.uint8)
        packed = (
            rgb[..., 0].astype(np.uint32) << 16 | rgb[..., 1].astype(np.uint32) << 8 | rgb[..., 2]
        )
        out = np.full(packed.shape, IGNORE_INDEX, dtype=np.uint8)
        seen = np.zeros(packed.shape, dtype=bool)
        for (r, g, b), value in palette.items():
            hit = packed == (r << 16 | g << 8 | b)
            out[hit] = value
            seen |= hit
        if not seen.all():
            left = packed[~seen][0]
            raise PixelMapError(
                f"colour #{int(left):06x} of the mask is in no class's colour "
                f"({int((~seen).sum()):,} pixels)"
            )
        return out
    raise PixelMapError(f"an {header.bit_depth}-bit {header.kind} PNG cannot be a class mask")


def depth_decode(data: bytes) -> np.ndarray:
    """A depth map's raw 16-bit values (uint16, H×W). An 8-bit PNG is refused: depth is 16-bit
    (an 8-bit file holds 256 depths, which is not what its label meant)."""
    header, img = _decode(data)
    if header.colour_type != 0:
        raise PixelMapError(f"a depth map must be a 16-bit greyscale PNG, not {header.kind}")
    if header.bit_depth != 16:
        raise PixelMapError(
            f"an {header.bit_depth}-bit depth map where 16-bit is declared (save depth as 16-bit "
            "PNG: metres × depth_scale)"
        )
    return np.asarray(img, dtype=np.uint16).copy()


def semantic_check(mask: np.ndarray, *, classes: int) -> None:
    """Every value a class index or IGNORE_INDEX."""
    values = np.unique(mask)
    bad = values[(values >= classes) & (values != IGNORE_INDEX)]
    if bad.size:
        shown = ", ".join(str(int(v)) for v in bad[:5])
        raise PixelMapError(
            f"values {shown} are outside the {classes} classes (0–{classes - 1}, 255 = ignore)"
        )


def png_encode(array: np.ndarray) -> bytes:
    """Canonical PNG bytes of an 8-bit (mask) or 16-bit (depth) single-channel array: the same
    pixels always give the same bytes, so the same mask is stored once."""
    if array.ndim != 2 or array.dtype not in (np.uint8, np.uint16):
        raise PixelMapError("a pixel map is one channel of 8 or 16 bits")
    ok, buf = cv2.imencode(".png", np.ascontiguousarray(array), [cv2.IMWRITE_PNG_COMPRESSION, 6])
    if not ok:
        raise PixelMapError("the pixel map could not be encoded")
    return buf.tobytes()


def map_stats(array: np.ndarray, *, task: str, depth_scale: float | None = None) -> dict:
    """Semantic: pixels per class index (str keys, JSON); depth: min/median/max metres."""
    if task == Task.SEMANTIC:
        counts = np.bincount(array.ravel(), minlength=256)
        return {str(i): int(n) for i, n in enumerate(counts) if n and i != IGNORE_INDEX}
    valid = array[array > 0]
    if not valid.size:
        return {"valid": 0}
    scale = float(depth_scale or 1000)
    return {
        "valid": int(valid.size),
        "min": round(float(valid.min()) / scale, 4),
        "median": round(float(np.median(valid)) / scale, 4),
        "max": round(float(valid.max()) / scale, 4),
    }


def _palette_rgba() -> np.ndarray:
    lut = np.zeros((256, 4), dtype=np.uint8)
    for i in range(256):
        if i == IGNORE_INDEX:
            continue
        hexa = PALETTE[i % len(PALETTE)]
        lut[i] = (int(hexa[1:3], 16), int(hexa[3:5], 16), int(hexa[5:7], 16), OVERLAY_ALPHA)
    return lut


_SEMANTIC_LUT = _palette_rgba()


def overlay_render(array: np.ndarray, *, task: str, px: int = OVERLAY_PX) -> bytes:
    """A small RGBA PNG of the map, to lay over the image's thumbnail: a colour per class
    (the gallery's class colours; ignore transparent), or depth as a colour map (near warm, far
    cool; no reading transparent)."""
    h, w = array.shape
    scale = min(1.0, px / max(h, w))
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    small = cv2.resize(array, size, interpolation=cv2.INTER_NEAREST) if scale < 1 else array
    if task == Task.SEMANTIC:
        rgba = _SEMANTIC_LUT[small]
    else:
        valid = small > 0
        rgba = np.zeros((*small.shape, 4), dtype=np.uint8)
        if valid.any():
            lo, hi = float(small[valid].min()), float(small[valid].max())
            norm = np.zeros(small.shape, dtype=np.uint8)
            norm[valid] = np.clip(
                255 - (small[valid] - lo) * 255.0 / max(hi - lo, 1.0), 0, 255
            ).astype(np.uint8)
            colour = cv2.applyColorMap(norm, cv2.COLORMAP_TURBO)[..., ::-1]
            rgba[..., :3] = colour
            rgba[..., 3] = np.where(valid, 255, 0)
    out = io.BytesIO()
    PILImage.fromarray(rgba, "RGBA").save(out, format="PNG")
    return out.getvalue()


def overlay_key(sha256: str) -> str:
    return f"overlays/{sha256[:2]}/{sha256}.png"


@dataclass(frozen=True)
class StoredMap:
    """A stored map, with the columns of its Blob row (ingest writes them in bulk)."""

    sha256: str
    size: int
    width: int
    height: int
    stats: dict
    # The keys this call put in storage (not those a whole file was at already): what a failed
    # import removes again.
    written: tuple[str, ...] = ()
    content_type: str = "image/png"
    has_thumbnail: bool = False  # its overlay is drawn instead


def pixel_map_store(array: np.ndarray, *, task: str, depth_scale: float | None = None) -> StoredMap:
    """The map's PNG and overlay in storage (whole or absent, once per content). No rows."""
    data = png_encode(array)
    sha = hashlib.sha256(data).hexdigest()
    written = []
    if storage_put(Blob(sha256=sha).storage_key, data, sha256=sha):
        written.append(Blob(sha256=sha).storage_key)
    if storage_put(overlay_key(sha), overlay_render(array, task=task)):
        written.append(overlay_key(sha))
    h, w = array.shape
    stats = map_stats(array, task=task, depth_scale=depth_scale)
    return StoredMap(sha, len(data), w, h, stats, tuple(written))


def blob_for_map(stored: StoredMap) -> Blob:
    blob, _ = Blob.objects.get_or_create(
        sha256=stored.sha256,
        defaults={
            "size": stored.size,
            "content_type": "image/png",
            "width": stored.width,
            "height": stored.height,
        },
    )
    return blob


def labelled_count(stats: dict, *, task: str) -> int:
    """What an image's label_count means for a map: classes present, or 1 for a depth map with
    readings."""
    if task == Task.SEMANTIC:
        return len(stats)
    return 1 if stats.get("valid") else 0


@transaction.atomic
def pixel_map_save(
    *, image: Image, array: np.ndarray, user=None, dataset: Dataset | None = None
) -> PixelMap:
    """Set an image's map (stored first, then the rows): a new revision of its labels."""
    dataset = dataset or image.dataset
    if array.shape != (image.blob.height, image.blob.width):
        raise PixelMapError(
            f"the map is {array.shape[1]}×{array.shape[0]} but the image is "
            f"{image.blob.width}×{image.blob.height}"
        )
    if dataset.task == Task.SEMANTIC:
        semantic_check(array, classes=dataset.classes.count())
    stored = pixel_map_store(array, task=dataset.task, depth_scale=dataset.depth_scale)
    blob = blob_for_map(stored)
    pixel_map, _ = PixelMap.objects.update_or_create(
        image=image, defaults={"blob": blob, "stats": stored.stats}
    )
    image.label_count = labelled_count(stored.stats, task=dataset.task)
    fields = ["label_count", "revision"]
    image.revision += 1
    if image.status == LabelStatus.UNLABELLED and image.label_count:
        image.status = LabelStatus.LABELLED
        fields.append("status")
    if user is not None:
        image.labelled_by, image.labelled_at = user, timezone.now()
        fields += ["labelled_by", "labelled_at"]
    image.save(update_fields=fields)
    return pixel_map


def pixel_map_load(pixel_map: PixelMap) -> np.ndarray:
    """The stored map's pixels (uint8 mask, or uint16 depth)."""
    with default_storage.open(pixel_map.blob.storage_key, "rb") as f:
        data = f.read()
    header = png_header(data)
    return depth_decode(data) if header.bit_depth == 16 else semantic_decode(data)
