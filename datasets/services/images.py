"""Decide what an uploaded file really is, by its content, and normalise its orientation."""

import hashlib
import io
import logging
import warnings
from dataclasses import dataclass

from django.conf import settings
from PIL import Image as PILImage
from PIL import ImageOps, UnidentifiedImageError

# Format names as Pillow reports them → the content type we store and serve.
ALLOWED_FORMATS = {
    "JPEG": "image/jpeg",
    "MPO": "image/jpeg",  # multi-picture JPEG from phones; the first frame is a plain JPEG
    "PNG": "image/png",
    "WEBP": "image/webp",
    "BMP": "image/bmp",
    "TIFF": "image/tiff",
    # Stored converted (CONVERTED): a GIF's first frame as PNG; HEIC/HEIF (when the server has
    # the pillow-heif plugin) and AVIF as JPEG, which every browser and trainer reads.
    "GIF": "image/png",
    "HEIF": "image/jpeg",
    "AVIF": "image/jpeg",
}
CONVERTED = {"GIF": "PNG", "HEIF": "JPEG", "AVIF": "JPEG"}
IMAGE_SUFFIXES = (
    ".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".mpo", ".jfif", ".gif", ".heic",
    ".heif", ".avif",
)  # fmt: skip
logger = logging.getLogger(__name__)
_ORIENTATION = 0x0112
# ISO base media brands of HEIC/HEIF photos (iPhones): said by name when no plugin reads them.
_HEIF_BRANDS = (b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1")


class ImageRejected(Exception):
    """The file is not an image we accept; the message is the report's reason."""


@dataclass(frozen=True, slots=True)  # an import holds one for each image it has checked
class CheckedImage:
    data: bytes
    sha256: str
    content_type: str
    width: int
    height: int
    size: int
    thumbnail: bytes = b""  # made in the same pass when asked for (thumbnail_px)
    has_thumbnail: bool = False  # its thumbnail is stored (the import's writer sets it)


def looks_like_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_SUFFIXES)


def image_header_check(data: bytes) -> None:
    """What image_check refuses without decoding a pixel (ImageRejected, with the same reasons):
    not an image, a format not accepted, a HEIC photo no plugin reads, more pixels than
    DATASET_MAX_IMAGE_PIXELS or a decompression bomb. The predict path's check before the
    model server is asked (deploy.predict), which decodes every pixel."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PILImage.DecompressionBombWarning)
            with PILImage.open(io.BytesIO(data)) as img:
                _header_checked(img)
    except _REFUSALS as exc:
        raise _refusal(exc, data) from None


def _header_checked(img) -> tuple[str, int, int]:
    fmt = img.format
    if fmt not in ALLOWED_FORMATS:
        raise ImageRejected(f"unsupported image format {fmt}")
    width, height = img.size
    max_pixels = settings.DATASET_MAX_IMAGE_PIXELS
    if width * height > max_pixels:
        raise ImageRejected(f"{width}×{height} is more than {max_pixels // 1_000_000} megapixels")
    return fmt, width, height


# What opening or decoding a file that is not a whole image raises. ImportError: a process
# that has imported Ultralytics (workers run models too) has Image.open patched to try a HEIF
# plugin on what Pillow cannot identify; without that plugin installed, a non-image ends there.
_REFUSALS = (
    UnidentifiedImageError,
    ImportError,
    PILImage.DecompressionBombError,
    PILImage.DecompressionBombWarning,
    OSError,
    SyntaxError,
    ValueError,
)


def _refusal(exc: BaseException, data: bytes) -> ImageRejected:
    if isinstance(exc, (UnidentifiedImageError, ImportError)):
        if data[4:8] == b"ftyp" and data[8:12] in _HEIF_BRANDS:
            return ImageRejected(
                "a HEIC/HEIF photo: this server cannot read it (it needs the pillow-heif "
                "plugin); convert it to JPEG or ask the operator to install pillow-heif"
            )
        return ImageRejected(
            "not an image (content is not JPEG, PNG, WebP, BMP, TIFF, GIF or AVIF)"
        )
    if isinstance(exc, (PILImage.DecompressionBombError, PILImage.DecompressionBombWarning)):
        return ImageRejected("too many pixels (decompression bomb)")
    return ImageRejected(f"unreadable or truncated image ({exc})")


def image_check(data: bytes, *, thumbnail_px: int | None = None) -> CheckedImage:
    """Validate `data` as an allowed image and return its stored form.

    The format is decided by content, never by the file name. Every pixel is decoded (JPEGs at
    reduced scale, which still reads the whole stream), so truncated files are caught here.
    With `thumbnail_px`, the gallery's thumbnail is made from the same decode (a JPEG decoded
    at the scale the thumbnail needs instead of 1/8): an import then reads and decodes each
    image once, where a later pass read it back from storage and decoded it again.
    """
    thumbnail = b""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PILImage.DecompressionBombWarning)
            with PILImage.open(io.BytesIO(data)) as img:
                fmt, width, height = _header_checked(img)
                orientation = img.getexif().get(_ORIENTATION, 1)
                if fmt in CONVERTED:
                    img.load()  # a GIF's (or a sequence's) first frame
                    data, width, height = _convert(img, CONVERTED[fmt])
                    orientation = 1  # applied by the conversion
                else:
                    if fmt in ("JPEG", "MPO"):
                        least = (max(1, width // 8), max(1, height // 8))
                        if thumbnail_px and orientation in (0, 1):
                            least = thumbnail_size((width, height), thumbnail_px)
                        img.draft(img.mode, least)
                    img.load()
                    if thumbnail_px and orientation in (0, 1):
                        thumbnail = _thumbnail_or_none(img, thumbnail_px, (width, height))
    except _REFUSALS as exc:
        raise _refusal(exc, data) from None

    if orientation in (2, 3, 4, 5, 6, 7, 8):
        data, width, height = _apply_orientation(data)
    if thumbnail_px and (fmt in CONVERTED or orientation not in (0, 1)):
        # Turned upright or converted: from the bytes that are stored.
        with PILImage.open(io.BytesIO(data)) as img:
            thumbnail = _thumbnail_or_none(img, thumbnail_px, img.size)
    return CheckedImage(
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        content_type=ALLOWED_FORMATS[fmt],
        width=width,
        height=height,
        size=len(data),
        thumbnail=thumbnail,
    )


# --- thumbnails -------------------------------------------------------------------------------
# JPEG, not WebP: on 256 px thumbnails libjpeg-turbo encodes in ~0.15 ms against ~2-5 ms for
# WebP (method 2), for files ~20% larger. Pixels are what training sees (OpenCV reads colour
# without alpha), 16-bit greys scaled to 8 bits.
THUMBNAIL_JPEG_QUALITY = 82


def thumbnail_size(size: tuple[int, int], px: int) -> tuple[int, int]:
    """Longest side at most `px`, aspect ratio kept, never enlarged."""
    width, height = size
    scale = min(1.0, px / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


def thumbnail_render(data: bytes, *, px: int) -> bytes:
    """The JPEG thumbnail of stored image bytes."""
    with PILImage.open(io.BytesIO(data)) as img:
        size = img.size
        if img.format in ("JPEG", "MPO"):
            # Decode at 1/2, 1/4 or 1/8 scale straight from the DCT: most of the speed.
            img.draft(None, thumbnail_size(size, px))
        return thumbnail_encode(img, px, size=size)


def _thumbnail_or_none(img: PILImage.Image, px: int, size: tuple[int, int]) -> bytes:
    """The image is good: a thumbnail that fails to render is left for the worker to make
    (b""), never a reason to refuse the image."""
    try:
        return thumbnail_encode(img, px, size=size)
    except Exception:
        logger.warning("thumbnail of an image being checked failed", exc_info=True)
        return b""


def thumbnail_encode(img: PILImage.Image, px: int, *, size: tuple[int, int]) -> bytes:
    """`img` (`size` before any draft) as the thumbnail's JPEG bytes."""
    icc = img.info.get("icc_profile") if img.mode in ("RGB", "RGBA") else None
    small = _downscaled(_rgb(img), thumbnail_size(size, px))
    out = io.BytesIO()
    save = {"format": "JPEG", "quality": THUMBNAIL_JPEG_QUALITY}
    if icc:
        save["icc_profile"] = icc
    small.save(out, **save)
    return out.getvalue()


def _downscaled(img: PILImage.Image, target: tuple[int, int]) -> PILImage.Image:
    """Whole-number steps with Pillow's box reduce, then the last step (under 2x, after a
    JPEG's draft usually 640 → 320 → 256) bilinear in OpenCV: 0.1 ms where Pillow's bicubic
    took 0.7, most of a thumbnail's time. Only decoded pixels reach OpenCV, never file bytes."""
    factor = min(img.width // target[0], img.height // target[1])
    if factor >= 2:
        img = img.reduce(factor)
    if img.size == target:
        return img
    import cv2  # an Ultralytics dependency; imported where thumbnails are made
    import numpy as np

    pixels = cv2.resize(np.asarray(img), target, interpolation=cv2.INTER_LINEAR)
    return PILImage.fromarray(pixels)


def _rgb(img: PILImage.Image) -> PILImage.Image:
    if img.mode == "RGB":
        return img
    if img.mode in ("I", "I;16", "I;16B", "I;16L", "F"):
        # 16-bit and float greyscale: scale to 8 bits instead of clipping everything to white.
        lo, hi = img.getextrema()
        img = img.point(lambda v: (v - lo) * 255 / max(1, hi - lo)).convert("L")
    return img.convert("RGB")


def _apply_orientation(data: bytes) -> tuple[bytes, int, int]:
    """Rotate the pixels as EXIF says and drop the tag, so every reader sees the same picture."""
    with PILImage.open(io.BytesIO(data)) as img:
        fmt = "JPEG" if img.format in ("JPEG", "MPO") else img.format
        upright = ImageOps.exif_transpose(img)
        out = io.BytesIO()
        save_kwargs = {"quality": 95} if fmt == "JPEG" else {}
        upright.save(out, format=fmt, **save_kwargs)
        return out.getvalue(), upright.width, upright.height


def _convert(img: PILImage.Image, target: str) -> tuple[bytes, int, int]:
    """The picture as a format every reader has: upright, the first frame, in `target`."""
    upright = ImageOps.exif_transpose(img)
    if target == "JPEG":
        upright = upright.convert("RGB")
        options = {"quality": 95}
    else:
        mode = "RGBA" if "transparency" in upright.info or upright.mode in ("RGBA", "LA") else "RGB"
        upright = upright.convert(mode)
        options = {}
    out = io.BytesIO()
    upright.save(out, format=target, **options)
    return out.getvalue(), upright.width, upright.height
