"""Per-pixel labels in the editor: saving a painted semantic mask (with the revision check the
labels have), and an image's stored map as raw values for the editor to paint over or read.

Raw values, not the stored PNG, go to the browser: a browser decodes a PNG to 8 bits per channel
(and may colour-manage it), which loses a 16-bit depth reading; a deflated little-endian array
arrives exactly as stored and is inflated by the browser's own DecompressionStream."""

import zlib
from dataclasses import dataclass

import numpy as np
from django.db import transaction

from annotation.services import image_locked_at
from core.errors import ServiceError
from datasets.models import Image, LabelStatus, PixelMap, Task
from datasets.services.gallery import dataset_touch
from datasets.services.pixel_maps import (
    PixelMapError,
    pixel_map_load,
    pixel_map_save,
    png_header,
    semantic_decode,
)
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

DEFAULT_DEPTH_SCALE = 1000.0  # Dataset.depth_scale unset: millimetres, Ultralytics' default
# A painted mask's PNG: a class index per pixel deflates well, but a noisy 8K mask does not
# (config/body_limits.py grants this to the route before the body is read).
MASK_MAX_BYTES = 32 * 1024 * 1024
DEFLATE_LEVEL = 1  # a mostly-flat mask shrinks ~100× even at the fastest level


@transaction.atomic
def mask_save(*, access: WorkspaceAccess, image: Image, revision, png: bytes) -> Image:
    """Replace a semantic image's mask with `png` (8-bit greyscale of class indexes, 255 where
    no class is), if `revision` is still the stored one; otherwise StaleRevision and nothing
    is written. The size must be the image's and every value a class of the dataset."""
    access.require(Perm.WRITE)
    if image.dataset.task != Task.SEMANTIC:
        raise ServiceError(
            f"Masks are painted on semantic segmentation datasets; this one is "
            f"{image.dataset.get_task_display().lower()}."
        )
    locked = image_locked_at(image=image, revision=revision, what="this mask")
    try:
        header = png_header(png)
        # The size is checked on the header, before a pixel of a wrong-sized file is inflated.
        if (header.width, header.height) != (locked.blob.width, locked.blob.height):
            raise PixelMapError(
                f"the mask is {header.width}×{header.height} but the image is "
                f"{locked.blob.width}×{locked.blob.height}"
            )
        mask = semantic_decode(png)
        pixel_map_save(image=locked, array=mask, user=access.user)
    except PixelMapError as exc:
        raise ServiceError(f"The mask was not saved: {exc}.") from None
    if locked.status in (LabelStatus.UNLABELLED, LabelStatus.REJECTED, LabelStatus.APPROVED):
        # As labels_save: saved (even empty) is labelled, and a changed approved mask needs
        # another review.
        locked.status = LabelStatus.LABELLED
        locked.save(update_fields=["status"])
    dataset_touch(locked.dataset)
    return locked


@dataclass(frozen=True)
class RawPixels:
    """An image's map as the editor reads it: `data` is zlib-deflated little-endian values
    (uint8 for a mask, uint16 for depth), row by row."""

    data: bytes
    width: int
    height: int
    dtype: str  # "uint8" | "uint16"


def pixels_raw(*, image: Image) -> RawPixels | None:
    """The image's stored map as raw values, or None when it has none."""
    pixel_map = PixelMap.objects.select_related("blob").filter(image=image).first()
    if pixel_map is None:
        return None
    try:
        array = pixel_map_load(pixel_map)
    except PixelMapError as exc:
        raise ServiceError(f"The stored map cannot be read: {exc}.") from None
    dtype = "uint16" if array.dtype == np.uint16 else "uint8"
    raw = np.ascontiguousarray(array, dtype="<u2" if dtype == "uint16" else np.uint8)
    height, width = array.shape
    return RawPixels(zlib.compress(raw.tobytes(), DEFLATE_LEVEL), width, height, dtype)


def depth_scale_of(dataset) -> float:
    return float(dataset.depth_scale or DEFAULT_DEPTH_SCALE)
