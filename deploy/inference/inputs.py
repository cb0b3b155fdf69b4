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


def image_decode(data: bytes, max_pixels: int) -> np.ndarray:
    """The image as Ultralytics takes it (BGR, upright as its EXIF says), or InferenceError(400).
    The size is read from the header first, so a decompression bomb is never decoded."""
    import cv2
    from PIL import Image, ImageOps, UnidentifiedImageError

    if not data:
        raise InferenceError(400, "The request body is empty; send the image's bytes.")
    try:
        with Image.open(io.BytesIO(data)) as header:
            width, height = header.size
    # Ultralytics wraps Image.open to try a HEIF plugin on unknown data, which may be missing.
    except (UnidentifiedImageError, OSError, ValueError, ImportError, Image.DecompressionBombError):
        raise InferenceError(400, "The body is not an image this server can read.") from None
    if width * height > max_pixels:
        raise InferenceError(400, f"The image has more than {max_pixels:,} pixels.")
    image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    if image is None:  # a format OpenCV lacks, or a truncated file: Pillow has the last word
        try:
            with Image.open(io.BytesIO(data)) as img:
                rgb = np.asarray(ImageOps.exif_transpose(img).convert("RGB"))
        except (OSError, ValueError, ImportError, Image.DecompressionBombError):
            raise InferenceError(400, "The image could not be decoded.") from None
        image = np.ascontiguousarray(rgb[:, :, ::-1])
    return image
