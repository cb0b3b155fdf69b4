"""A response made block by block as it is sent, holding no more than a block in memory under
either server.

Django serves a StreamingHttpResponse of a plain (sync) iterator under ASGI by collecting the
whole iterator into a list first (django/http/response.py, StreamingHttpResponse.__aiter__),
and one of an async iterator under WSGI likewise. So the iterator handed over is the kind the
request's server consumes as it goes: under ASGI, an async one that takes each block from the
sync iterator on the request's own thread (its database connection)."""

from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse

_END = object()


def _blocks_async(blocks: Iterator[bytes]) -> AsyncIterator[bytes]:
    step = sync_to_async(lambda: next(blocks, _END), thread_sensitive=True)

    async def stream():
        try:
            while (block := await step()) is not _END:
                yield block
        finally:
            close = getattr(blocks, "close", None)
            if close is not None:
                await sync_to_async(close, thread_sensitive=True)()

    return stream()


def blocks_response(
    request: HttpRequest, blocks: Iterator[bytes], *, content_type: str
) -> StreamingHttpResponse:
    content = _blocks_async(blocks) if isinstance(request, ASGIRequest) else blocks
    response = StreamingHttpResponse(content, content_type=content_type)
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "no-store"
    return response
