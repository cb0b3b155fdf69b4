"""Stored files handed to a caller whose access the view has already checked: the one way a view
sends a user's file. Nothing in the media folder or the bucket has a public URL.

- S3: a redirect to a presigned GET that expires in STORAGE_URL_EXPIRE_SECONDS, with the type
  and disposition fixed in the signature (the bucket's own origin serves the bytes).
- Local storage behind a front server (STORAGE_ACCEL_REDIRECT names its `internal` location
  for MEDIA_ROOT): X-Accel-Redirect and no body; the front server sends the bytes.
- Local storage otherwise (the quick start): Django streams the file.

Only raster images are ever shown inline. Anything else (an SVG, an HTML file, a checkpoint) is
a download of opaque bytes, so a file someone uploaded never runs as a page of Kestrel's origin.
"""

import logging
import os
import re
from typing import IO
from urllib.parse import quote

from django.conf import settings
from django.core.files.storage import default_storage
from django.http import FileResponse, Http404, HttpResponse, HttpResponseRedirect
from django.utils.http import content_disposition_header

from core.storage import storage_is_local

INLINE_TYPES = frozenset(
    {"image/png", "image/jpeg", "image/webp", "image/gif", "image/bmp", "image/tiff"}
)
OPAQUE = "application/octet-stream"
STREAM_BLOCK = 64 * 1024  # under ASGI each block is one hop between threads
_FILENAME_UNSAFE = re.compile(r"[^A-Za-z0-9._()+ -]")

logger = logging.getLogger(__name__)


def safe_filename(name: str) -> str:
    """The name a browser saves the file under: the last path part, plain characters only."""
    name = _FILENAME_UNSAFE.sub("_", name.replace("\\", "/").rsplit("/", 1)[-1]).strip(" .")
    return name[:150] or "download"


def _private(response: HttpResponse, cache_seconds: int) -> HttpResponse:
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = f"private, max-age={cache_seconds}" if cache_seconds else "no-store"
    return response


def stored_file_response(
    *,
    key: str,
    filename: str,
    inline_type: str | None = None,
    cache_seconds: int = 0,
    size: int | None = None,
) -> HttpResponse:
    """The stored object at `key` for a caller already allowed to read it; 404 when none is.

    `inline_type` shows the file in the page with that type when it is a raster image type;
    otherwise, and by default, the file downloads as application/octet-stream.
    `cache_seconds` lets the browser keep it (privately) that long. `size`: the size its row
    records; a local file of another size (truncated, 0 bytes) is not sent but answered with
    an error (on S3 an object is only ever written whole)."""
    if not key:
        raise Http404("No file is stored.")
    inline = inline_type in INLINE_TYPES
    content_type = inline_type if inline else OPAQUE
    name = safe_filename(filename)
    if not storage_is_local():  # S3
        return _presigned_redirect(key, name, content_type, inline, cache_seconds)
    if settings.STORAGE_ACCEL_REDIRECT:
        try:
            stored_size = default_storage.size(key)
        except FileNotFoundError:
            raise Http404("The file is no longer stored.") from None
        if size is not None and stored_size != size:
            return _damaged(key, stored_size, size)
        response = HttpResponse(content_type=content_type)
        response["Content-Disposition"] = content_disposition_header(not inline, name)
        location = settings.STORAGE_ACCEL_REDIRECT.rstrip("/")
        response["X-Accel-Redirect"] = f"{location}/{quote(key)}"
        return _private(response, cache_seconds)
    try:
        stored = default_storage.open(key, "rb")
    except FileNotFoundError:
        raise Http404("The file is no longer stored.") from None
    if size is not None and (stored_size := os.fstat(stored.fileno()).st_size) != size:
        stored.close()
        return _damaged(key, stored_size, size)
    response = FileResponse(
        stored, content_type=content_type, filename=name, as_attachment=not inline
    )
    response.block_size = STREAM_BLOCK
    # Opened directly in a tab, even an image gets no scripts, forms or plugins.
    response["Content-Security-Policy"] = "default-src 'none'; sandbox"
    return _private(response, cache_seconds)


def _damaged(key: str, stored_size: int, size: int) -> HttpResponse:
    logger.error("stored file %s is damaged: %s bytes, %s recorded", key, stored_size, size)
    response = HttpResponse(
        "The stored file is damaged (it is not the size recorded when it was stored), so it "
        "is not sent. For an image, importing the original again repairs it; the dataset's "
        "health check lists the images affected.",
        status=500,
        content_type="text/plain; charset=utf-8",
    )
    return _private(response, 0)


def _presigned_redirect(
    key: str, name: str, content_type: str, inline: bool, cache_seconds: int
) -> HttpResponse:
    expire = settings.STORAGE_URL_EXPIRE_SECONDS
    params = {
        "ResponseContentType": content_type,
        "ResponseContentDisposition": content_disposition_header(not inline, name),
    }
    if cache_seconds:
        params["ResponseCacheControl"] = f"private, max-age={cache_seconds}"
    # Signing is local (no request to S3); a missing object is S3's 404 at the URL.
    url = default_storage.url(key, parameters=params, expire=expire)
    # The redirect itself is kept for at most half the signature's life, so a browser never
    # follows a cached redirect to a URL that has expired.
    return _private(HttpResponseRedirect(url), min(cache_seconds, expire // 2))


def generated_file_response(file: IO[bytes], *, filename: str, content_type: str) -> HttpResponse:
    """A file made for this request (a dataset archive), as a download."""
    response = FileResponse(
        file, content_type=content_type, filename=safe_filename(filename), as_attachment=True
    )
    response.block_size = STREAM_BLOCK
    return _private(response, 0)
