"""Small JPEG previews of stored images, for the gallery (pixels: datasets.services.images).
An import makes them as it checks each image; here, the worker makes those that are missing
(images stored before, or an import's that failed to render)."""

import functools
import io
import logging
import os
from concurrent.futures import ThreadPoolExecutor

from django.conf import settings
from django.core.cache import cache
from django.core.files.storage import default_storage
from django.db import transaction
from PIL import Image as PILImage

from core.storage import storage_put
from core.tasks import task_send
from datasets.models import Blob
from datasets.services import images

logger = logging.getLogger(__name__)

ENQUEUE_DEDUPE_SECONDS = 600
THREADS = max(2, min(8, os.cpu_count() or 2))


def thumbnail_render(data: bytes, *, px: int | None = None) -> bytes:
    """The JPEG thumbnail of an image: longest side at most `px`, aspect ratio kept."""
    return images.thumbnail_render(data, px=px or settings.DATASET_THUMBNAIL_PX)


def thumbnails_make(*, blob_ids: list[int]) -> int:
    """Make the missing thumbnails of these blobs. Returns how many were made.

    Idempotent (blobs that have one are skipped) and forgiving: a blob whose bytes are missing
    or unreadable is logged and skipped, so one bad file never stops the rest. Not one
    transaction: each blob is written and marked on its own, so work done survives a time limit.
    """
    made = 0
    blobs = list(
        Blob.objects.filter(pk__in=blob_ids, has_thumbnail=False)
        .order_by("pk")
        .only("pk", "sha256")
    )
    # Threads: Pillow decodes, resizes and encodes without the GIL, so they use every core
    # (a Celery worker process may not start child processes).
    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        for start in range(0, len(blobs), 100):
            batch = blobs[start : start + 100]
            done = [pk for pk in pool.map(_make_one, batch) if pk is not None]
            Blob.objects.filter(pk__in=done).update(has_thumbnail=True)
            made += len(done)
    return made


def _make_one(blob: Blob) -> int | None:
    try:
        with default_storage.open(blob.storage_key, "rb") as f:
            data = f.read()
        storage_put(blob.thumbnail_key, thumbnail_render(data), replace=True)
    except Exception:
        logger.exception("thumbnail of blob %s (%s) failed", blob.pk, blob.sha256)
        return None
    return blob.pk


def thumbnails_request(*, blob_ids: list[int]) -> None:
    """Ask the worker for thumbnails that should exist and do not (an import's task was lost,
    or the images came before thumbnails existed). At most once per set per ten minutes."""
    if not blob_ids:
        return
    ids = sorted(set(blob_ids))
    key = f"thumbs-requested:{ids[0]}:{ids[-1]}:{len(ids)}"
    try:
        if not cache.add(key, 1, ENQUEUE_DEDUPE_SECONDS):
            return
    except Exception:  # a page never fails for a nicety: the placeholder stays
        logger.warning("could not ask for %d thumbnails", len(ids), exc_info=True)
        return
    transaction.on_commit(lambda: _enqueue(ids))


def _enqueue(ids: list[int]) -> None:
    try:
        task_send("datasets.thumbnails_make", ids)
    except Exception:
        logger.warning("could not enqueue %d thumbnails", len(ids), exc_info=True)


@functools.cache
def thumbnail_placeholder() -> bytes:
    """Shown until the real thumbnail exists: a tiny flat WebP, stretched to the tile."""
    out = io.BytesIO()
    PILImage.new("RGB", (4, 3), (226, 224, 219)).save(out, format="WEBP", lossless=True)
    return out.getvalue()
