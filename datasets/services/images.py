"""Decide what an uploaded file really is, by its content, and normalise its orientation."""

import hashlib
import io
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


def looks_like_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_SUFFIXES)


def image_check(data: bytes) -> CheckedImage:
    """Validate `data` as an allowed image and return its stored form.

    The format is decided by content, never by the file name. Every pixel is decoded (JPEGs at
    reduced scale, which still reads the whole stream), so truncated files are caught here.
    """
    max_pixels = settings.DATASET_MAX_IMAGE_PIXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PILImage.DecompressionBombWarning)
            with PILImage.open(io.BytesIO(data)) as img:
                fmt = img.format
                if fmt not in ALLOWED_FORMATS:
                    raise ImageRejected(f"unsupported image format {fmt}")
                width, height = img.size
                if width * height > max_pixels:
                    raise ImageRejected(
                        f"{width}×{height} is more than {max_pixels // 1_000_000} megapixels"
                    )
                orientation = img.getexif().get(_ORIENTATION, 1)
                if fmt in CONVERTED:
                    img.load()  # a GIF's (or a sequence's) first frame
                    data, width, height = _convert(img, CONVERTED[fmt])
                    orientation = 1  # applied by the conversion
                else:
                    if fmt in ("JPEG", "MPO"):
                        img.draft(img.mode, (max(1, width // 8), max(1, height // 8)))
                    img.load()
    except ImageRejected:
        raise
    except (UnidentifiedImageError, ImportError):
        # ImportError: a process that has imported Ultralytics (workers run models too) has
        # Image.open patched to try a HEIF plugin on what Pillow cannot identify; without that
        # plugin installed, a non-image ends there.
        if data[4:8] == b"ftyp" and data[8:12] in _HEIF_BRANDS:
            raise ImageRejected(
                "a HEIC/HEIF photo: this server cannot read it (it needs the pillow-heif "
                "plugin); convert it to JPEG or ask the operator to install pillow-heif"
            ) from None
        raise ImageRejected(
            "not an image (content is not JPEG, PNG, WebP, BMP, TIFF, GIF or AVIF)"
        ) from None
    except (PILImage.DecompressionBombError, PILImage.DecompressionBombWarning):
        raise ImageRejected("too many pixels (decompression bomb)") from None
    except (OSError, SyntaxError, ValueError) as e:
        raise ImageRejected(f"unreadable or truncated image ({e})") from None

    if orientation in (2, 3, 4, 5, 6, 7, 8):
        data, width, height = _apply_orientation(data)
    return CheckedImage(
        data=data,
        sha256=hashlib.sha256(data).hexdigest(),
        content_type=ALLOWED_FORMATS[fmt],
        width=width,
        height=height,
        size=len(data),
    )


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
