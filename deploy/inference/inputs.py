"""What a prediction request carries, checked: its parameters and its image. Errors are
InferenceError, whose status and detail the server answers with."""

import io
import math
from dataclasses import dataclass

import numpy as np

DETAIL_MAX_CHARS = 300


class InferenceError(Exception):
    """An answer other than 200: its HTTP status and a short, safe `detail`."""

    def __init__(self, status: int, detail: str):
        super().__init__(detail)
        self.status = status
        self.detail = detail[:DETAIL_MAX_CHARS]


@dataclass(frozen=True)
class PredictParams:
    """What Ultralytics is asked; requests share a prediction call only when these are equal."""

    conf: float = 0.25
    iou: float = 0.7
    imgsz: int = 640
    max_det: int = 300


@dataclass(frozen=True)
class OutputParams:
    """How one request wants its answer written (no effect on the prediction)."""

    normalize: bool = False
    decimals: int = 5
    mask_png: bool = False  # a semantic model's class mask as one PNG, besides each class's RLE


def _number(query: dict[str, str], name: str, default: float) -> float:
    raw = query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise InferenceError(400, f"{name} must be a number, not {raw[:20]!r}.") from None
    if not math.isfinite(value):
        raise InferenceError(400, f"{name} must be a finite number.")
    return value


def _integer(query: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    value = _number(query, name, default)
    if value != int(value) or not low <= value <= high:
        raise InferenceError(400, f"{name} must be a whole number from {low} to {high}.")
    return int(value)


def params_parse(query: dict[str, str]) -> tuple[PredictParams, OutputParams]:
    """The request's parameters, checked; InferenceError(400) says which one is wrong."""
    conf = _number(query, "conf", PredictParams.conf)
    iou = _number(query, "iou", PredictParams.iou)
    for name, value in (("conf", conf), ("iou", iou)):
        if not 0 < value <= 1:
            raise InferenceError(400, f"{name} must be more than 0 and at most 1.")
    predict = PredictParams(
        conf=conf,
        iou=iou,
        imgsz=_integer(query, "imgsz", PredictParams.imgsz, 32, 1280),
        max_det=_integer(query, "max_det", PredictParams.max_det, 1, 1000),
    )
    normalize = query.get("normalize", "false").lower()
    if normalize not in ("true", "false", "1", "0", ""):
        raise InferenceError(400, "normalize must be true or false.")
    mask = query.get("mask", "").lower()
    if mask not in ("", "rle", "png"):
        raise InferenceError(400, "mask must be rle or png.")
    output = OutputParams(
        normalize=normalize in ("true", "1"),
        decimals=_integer(query, "decimals", OutputParams.decimals, 0, 10),
        mask_png=mask == "png",
    )
    return predict, output


JPEG_FORMATS = ("JPEG", "MPO")  # an MPO (phones) is a JPEG with more pictures after its first
_ORIENTATION = 0x0112  # EXIF
# libjpeg's warnings that begin so are damage a viewer draws past (stray bytes, a bad code);
# Pillow, and so an import (datasets.services.images), accepts such a file. Its others, and
# its errors, are a file cut short or worse, which an import refuses.
_JPEG_DAMAGE_SHOWN = "Corrupt JPEG data"


def image_decode(data: bytes, max_pixels: int) -> np.ndarray:
    """The image as Ultralytics takes it (BGR, upright as its EXIF says), or InferenceError(400)
    with the reason an import would give (datasets.services.images): a file is refused here
    when, and only when, an import would refuse it. The size is read from the header first, so
    a decompression bomb is never decoded.

    A JPEG is decoded by libjpeg-turbo through simplejpeg, which says when the stream is cut
    short or broken (OpenCV decodes some such files without a word): the same pixels OpenCV
    gives, in the same time, with the check an import makes in the same pass. Other formats
    (and CMYK JPEGs) by OpenCV, which refuses a damaged file where Pillow does, Pillow having
    the last word and the reason."""
    import cv2
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise InferenceError(400, "The request body is empty; send the image's bytes.")
    try:
        with Image.open(io.BytesIO(data)) as header:
            width, height = header.size
            fmt = header.format
            orientation = _orientation(header) if fmt in JPEG_FORMATS else 1
    # Ultralytics wraps Image.open to try a HEIF plugin on unknown data, which may be missing.
    except (UnidentifiedImageError, OSError, ValueError, ImportError, Image.DecompressionBombError):
        raise InferenceError(400, "The body is not an image this server can read.") from None
    if width * height > max_pixels:
        raise InferenceError(400, f"The image has more than {max_pixels:,} pixels.")
    if fmt in JPEG_FORMATS:
        image = _jpeg_decode(data)
        if image is not None:
            return _upright(image, orientation)
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if image is None:  # a format OpenCV lacks, or a damaged file: Pillow has the last word
        image = _pillow_decode(data)
    return image


def _undecodable(reason: object) -> InferenceError:
    return InferenceError(
        400, f"The file is not a usable image: unreadable or truncated image ({reason})."
    )


def _orientation(header) -> int:
    try:
        return int(header.getexif().get(_ORIENTATION, 1))
    except Exception:  # noqa: BLE001 - unreadable EXIF: drawn as stored, as OpenCV draws it
        return 1


def _jpeg_decode(data: bytes) -> np.ndarray | None:
    """A JPEG's BGR pixels as stored (not turned), InferenceError(400) for a file an import
    refuses, or None for OpenCV to decode: a CMYK JPEG (simplejpeg does not convert it to
    BGR), a header TurboJPEG does not read, or damage a viewer draws past (OpenCV's pixels
    then, or Pillow's, or Pillow's refusal)."""
    import simplejpeg

    try:
        colorspace = simplejpeg.decode_jpeg_header(data)[2]
    except ValueError:  # a header TurboJPEG will not read: as any other format's
        return None
    if colorspace not in ("YCbCr", "Gray", "RGB"):
        return None
    try:
        return simplejpeg.decode_jpeg(data, colorspace="BGR", strict=True)
    except ValueError as warned:
        if not str(warned).startswith(_JPEG_DAMAGE_SHOWN):
            raise _undecodable(warned) from None
    return None


def _upright(image: np.ndarray, orientation: int) -> np.ndarray:
    """`image` turned as its EXIF orientation says (what OpenCV's imdecode and Pillow's
    exif_transpose do)."""
    turned = {
        2: lambda i: i[:, ::-1],
        3: lambda i: i[::-1, ::-1],
        4: lambda i: i[::-1],
        5: lambda i: i.transpose(1, 0, 2),
        6: lambda i: np.rot90(i, -1),
        7: lambda i: i[::-1, ::-1].transpose(1, 0, 2),
        8: lambda i: np.rot90(i, 1),
    }.get(orientation)
    return image if turned is None else np.ascontiguousarray(turned(image))


def _pillow_decode(data: bytes) -> np.ndarray:
    from PIL import Image, ImageOps

    try:
        with Image.open(io.BytesIO(data)) as img:
            rgb = np.asarray(ImageOps.exif_transpose(img).convert("RGB"))
    except (OSError, ValueError, SyntaxError, ImportError, Image.DecompressionBombError) as error:
        raise _undecodable(error) from None
    return np.ascontiguousarray(rgb[:, :, ::-1])
