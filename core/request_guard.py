"""Requests bounded before they are read (issue 31).

Django's ASGI handler reads a request's whole body into a temporary file before any
middleware, authentication or view runs, and uvicorn sets no limit of its own: a client that
declared 100 GB could fill the web machine's disk without showing any credentials. Two guards
sit in front of Django:

- `RequestGuard`, an ASGI middleware: a declared Content-Length over the route's limit is
  answered 413 before a byte of the body is read, and a body without one (chunked) is cut off
  with 413 at the limit. The limit of a caller who has shown nothing is small; a route's larger
  limit (an upload's, its plan's) is granted only once the request's credentials check out, and
  they are looked at only when a body is larger than the small limit (`RouteLimits`, kept in
  config/body_limits.py). A body that stops arriving is answered 408, and uploads at once are
  capped per address and per caller (429).
- `HeaderGuardProtocol`, uvicorn's HTTP/1.1 protocol with a deadline and a size cap on a
  request's line and headers, which uvicorn has neither of: a client could drip headers
  forever, or send gigabytes of them.

Every figure is a setting (REQUEST_* and UPLOADS_*; the README's "Request limits" lists them).
"""

import asyncio
import contextlib
import functools
import json
import logging
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import connections
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

logger = logging.getLogger(__name__)

# After a refusal, what the client still sends is read and thrown away, until it pauses for
# LINGER_PAUSE_SECONDS or for LINGER_SECONDS at most, before the connection closes: closing a
# socket that has unread bytes sends a reset, which can destroy the answer before the client
# has read it (RFC 9112, section 9.6).
LINGER_SECONDS = 2.0
LINGER_PAUSE_SECONDS = 0.5
# A request's line and headers together; nginx's default allows 32 KB, h11's 16 KB.
MAX_HEAD_BYTES = 64 * 1024
REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large"}
# The scope's extension by which HeaderGuardProtocol drops the rest of a refused body.
DROP_BODY = "kestrel.drop_body"


@dataclass(frozen=True)
class Grant:
    """What a request may send on its route: the body's limit, what the route takes (the
    refusal says "<what> is at most <limit>"), and whom an upload counts against ("" while no
    credentials were shown)."""

    limit: int
    what: str
    caller: str = ""


class Refused(Exception):
    """Raised by RouteLimits.granted: the route's own answer to these credentials (an upload
    URL whose run has ended: 410), given before the body is read."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


class RouteLimits(Protocol):
    def anonymous(self, scope: dict) -> Grant:
        """The grant of a caller who has shown nothing: no I/O, called on every request."""

    def granted(self, scope: dict) -> Grant:
        """The grant the request's credentials earn on its route (the anonymous one when they
        earn nothing), or Refused. Runs on a thread, and may query the database."""

    def kept(self, scope: dict) -> Grant | None:
        """The grant these very credentials earned on this route a moment ago in this process,
        if it may be given again without looking (no I/O, on the event loop); else None."""

    def refusal(self, scope: dict, status: int, message: str) -> tuple[str, bytes]:
        """The content type and body of a refusal on this route."""


def size_text(n: int) -> str:
    """`n` bytes as a refusal says it: 8.0 MiB (8,388,608 bytes)."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:,.1f} {unit} ({n:,} bytes)"
    return f"{n:,} bytes"


class _Uploads:
    """Request bodies past the anonymous limit that this process is receiving or holding, by
    client address and by caller: how many, and how many bytes they may come to. One is
    admitted while fewer than the cap (UPLOADS_PER_ADDRESS, UPLOADS_PER_CALLER) are, or while
    all of them with it come to at most the byte budget (UPLOAD_BYTES_PER_ADDRESS,
    UPLOAD_BYTES_PER_CALLER): a client predicting on 32 photos at once is served, one sending
    its seventh archive is not. The event loop is the only thread that touches them."""

    def __init__(self):
        self.held: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()

    def take(self, address: str, caller: str, size: int) -> tuple[list[tuple[str, int]], str]:
        """(the counters taken, with `size`, the bytes the body may come to; "") or ([], why
        not)."""
        wanted = [
            (
                f"address:{address}",
                settings.UPLOADS_PER_ADDRESS,
                settings.UPLOAD_BYTES_PER_ADDRESS,
                "from this address",
            )
        ]
        if caller:
            wanted.append(
                (
                    f"caller:{caller}",
                    settings.UPLOADS_PER_CALLER,
                    settings.UPLOAD_BYTES_PER_CALLER,
                    "for these credentials",
                )
            )
        for name, cap, budget, whose in wanted:
            if self.held[name] >= cap and self.bytes[name] + size > budget:
                return [], (
                    f"{self.held[name]} uploads are already being received {whose} (up to "
                    f"{size_text(self.bytes[name])} in all); send this one when one of them "
                    "has finished."
                )
        taken = [(name, size) for name, _, _, _ in wanted]
        for name, _ in taken:
            self.held[name] += 1
            self.bytes[name] += size
        return taken, ""

    def give(self, taken: list[tuple[str, int]]) -> None:
        for name, size in taken:
            self.held[name] -= 1
            self.bytes[name] -= size
            if self.held[name] <= 0:
                del self.held[name]
                self.bytes.pop(name, None)


def _declared_length(scope: dict) -> int | None:
    """The Content-Length the request declares: None when it declares none (chunked), -1 when
    what it declares is not a length."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            return int(value) if value.isdigit() else -1
    return None


class RequestGuard:
    """The ASGI middleware: see the module's docstring."""

    def __init__(self, app, limits: RouteLimits):
        self.app = app
        self.limits = limits
        self.uploads = _Uploads()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = _GuardedRequest(self, scope, receive, send)
        if not await request.admitted():
            return
        try:
            await self.app(scope, request.receive, request.send)
        finally:
            self.uploads.give(request.uploads)

    async def granted(self, scope: dict) -> Grant:
        kept = self.limits.kept(scope)
        if kept is not None:
            return kept  # a busy caller's next image: no thread, no query (BodyLimits.kept)
        return await sync_to_async(self._granted, thread_sensitive=False)(scope)

    def _granted(self, scope: dict) -> Grant:
        try:
            return self.limits.granted(scope)
        finally:
            # A thread of the event loop's pool, not a request's: give its connection back.
            connections.close_all()


class _GuardedRequest:
    """One request's body as it arrives: counted against its grant and its deadline."""

    def __init__(self, guard: RequestGuard, scope: dict, receive, send):
        self.guard, self.scope = guard, scope
        self._receive, self._send = receive, send
        self.grant = guard.limits.anonymous(scope)
        self.credentials_checked = False
        self.uploads: list[tuple[str, int]] = []
        self.received = 0
        self.finished = False  # the whole body arrived, or the client left
        self.answered = False  # a response has started, the app's or a refusal
        self.refused = False
        loop = asyncio.get_running_loop()
        self.started = loop.time()
        self.deadline = self.started + settings.REQUEST_BODY_TIMEOUT_SECONDS

    async def admitted(self) -> bool:
        declared = _declared_length(self.scope)
        if declared == -1:
            await self.refuse(400, "Content-Length is not a number of bytes.")
            return False
        if declared is not None and declared > self.grant.limit:
            return await self._past_grant(declared, declared=True)
        return True

    async def _past_grant(self, size: int, *, declared: bool) -> bool:
        """The body is past its grant: look at the credentials once, then admit it or refuse."""
        if not self.credentials_checked:
            self.credentials_checked = True
            try:
                self.grant = await self.guard.granted(self.scope)
            except Refused as refused:
                await self.refuse(refused.status, refused.message)
                return False
            if size <= self.grant.limit:
                client = self.scope.get("client") or ("", 0)
                # What the body may come to: what it declares, or its grant (chunked).
                most = size if declared else self.grant.limit
                self.uploads, why = self.guard.uploads.take(client[0], self.grant.caller, most)
                if why:
                    await self.refuse(429, why, retry_after=True)
                    return False
        if size <= self.grant.limit:
            return True
        told = f"declares {size:,} bytes" if declared else "sent more"
        await self.refuse(
            413, f"{self.grant.what} is at most {size_text(self.grant.limit)}; this request {told}."
        )
        return False

    async def receive(self) -> dict:
        if self.refused:
            return {"type": "http.disconnect"}
        if self.finished:  # Django listening for a disconnect while it answers
            return await self._receive()
        try:
            async with asyncio.timeout_at(self.deadline):
                message = await self._receive()
        except TimeoutError:
            await self.refuse(
                408,
                f"The request body arrived too slowly (under "
                f"{settings.REQUEST_BODY_MIN_BYTES_PER_SECOND:,} bytes a second after the first "
                f"{settings.REQUEST_BODY_TIMEOUT_SECONDS:g} s); send it again.",
                linger=False,
            )
            return {"type": "http.disconnect"}
        if message["type"] != "http.request":
            self.finished = True
            return message
        self.received += len(message.get("body", b""))
        # Like Apache's mod_reqtimeout: every byte that arrives earns a little more time.
        self.deadline = (
            self.started
            + settings.REQUEST_BODY_TIMEOUT_SECONDS
            + self.received / settings.REQUEST_BODY_MIN_BYTES_PER_SECOND
        )
        if self.received > self.grant.limit and not await self._past_grant(
            self.received, declared=False
        ):
            return {"type": "http.disconnect"}
        if not message.get("more_body", False):
            self.finished = True
        return message

    async def send(self, message: dict) -> None:
        if self.refused:
            return
        if message["type"] == "http.response.start":
            self.answered = True
        await self._send(message)

    async def refuse(
        self, status: int, message: str, *, linger: bool = True, retry_after: bool = False
    ) -> None:
        """Answer `status` in the route's words and close the connection; the app sees a
        client that left (Django's handler then drops the body it had read)."""
        self.refused = True
        if self.answered:
            return
        self.answered = True
        content_type, body = self.guard.limits.refusal(self.scope, status, message)
        headers = [
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        if retry_after:
            headers.append((b"retry-after", b"5"))
        await self._send({"type": "http.response.start", "status": status, "headers": headers})
        # The whole answer first (its length is declared), then the connection stays open while
        # the client goes on sending, for a moment, so that it reads the answer (LINGER_SECONDS).
        await self._send({"type": "http.response.body", "body": body, "more_body": True})
        if linger and not self.finished:
            await self._linger()
        await self._send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _linger(self) -> None:
        """Read and drop what the client still sends, until it pauses or time is up."""
        loop = asyncio.get_running_loop()
        end = loop.time() + LINGER_SECONDS
        drop = self.scope.get("extensions", {}).get(DROP_BODY)
        if drop is not None:  # HeaderGuardProtocol's: the bytes dropped as they come, unparsed
            await drop(end, LINGER_PAUSE_SECONDS)
            return
        try:
            while True:
                async with asyncio.timeout_at(min(end, loop.time() + LINGER_PAUSE_SECONDS)):
                    message = await self._receive()
                if message["type"] != "http.request" or not message.get("more_body"):
                    return
        except TimeoutError:
            pass


def plain_refusal(message: str) -> tuple[str, bytes]:
    return "text/plain; charset=utf-8", message.encode() + b"\n"


def json_refusal(message: str, field: str = "detail") -> tuple[str, bytes]:
    return "application/json", json.dumps({field: message}).encode()


class _Dropping:
    """A refused body being dropped: what is left of its declared length (None: chunked),
    when its last bytes came, and whether it has ended (all in, or the client left)."""

    def __init__(self, rest: int | None, now: float):
        self.rest, self.last = rest, now
        self.ended = asyncio.Event()

    def took(self, size: int, now: float) -> None:
        self.last = now
        if self.rest is not None:
            self.rest -= size
            if self.rest <= 0:
                self.ended.set()


class HeaderGuardProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol (httptools) with a deadline and a size cap on each request's
    line and headers: REQUEST_HEADER_TIMEOUT_SECONDS from the connection (or from a kept-alive
    request's first byte), MAX_HEAD_BYTES; past either, 408 or 431 and the connection closes.
    httptools keeps a header it has not finished in memory, whatever its size, and uvicorn
    times out only a connection idle between two requests."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_parsed = 0  # of the request being read
        self._dropping: _Dropping | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._head_timer_start()

    def connection_lost(self, exc) -> None:
        self._head_timer_stop()
        if self._dropping is not None:
            self._dropping.ended.set()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._dropping is not None:
            self._dropping.took(len(data), self.loop.time())
            return
        counted = self._in_head
        if counted:
            self._head_bytes += len(data)
        # Checked after the parser took the data, so a request whose headers and body came in
        # one read is not counted whole; what the parser may hold is one read past the cap.
        super().data_received(data)
        if counted and self._in_head and self._head_bytes > MAX_HEAD_BYTES:
            self._refuse(431, f"The request's line and headers are over {MAX_HEAD_BYTES:,} bytes.")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._body_parsed = 0
        if self._head_timer is None:
            self._head_timer_start()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._head_timer_stop()
        scope = self.scope
        super().on_headers_complete()
        # The app's task has been made, not run: it finds this in its scope.
        scope.setdefault("extensions", {})[DROP_BODY] = functools.partial(self._drop_body, scope)

    def on_body(self, body: bytes) -> None:
        self._body_parsed += len(body)
        super().on_body(body)

    async def _drop_body(self, scope: dict, end: float, pause: float) -> None:
        """Drop the rest of a refused request as it arrives, without parsing or buffering it,
        until its declared length is in, the client pauses for `pause` s or leaves, or `end`
        (the loop's time). The caller then closes the connection. Read through the app's
        `receive`, each 64 KB of a 20 MB body was parsed, buffered, copied and handed over,
        with reading paused and resumed around it: 9 ms of the event loop's time a body."""
        if scope is not self.scope:
            return  # the parser is past it to a pipelined request: its body is all in
        declared = _declared_length(scope)
        # Parsed but not yet taken by the app is dropped with it.
        rest = declared - self._body_parsed if declared is not None and declared >= 0 else None
        if rest is not None and rest <= 0:
            return
        self._dropping = dropping = _Dropping(rest, self.loop.time())
        self.flow.resume_reading()
        while not dropping.ended.is_set():
            wait = min(end, dropping.last + pause) - self.loop.time()
            if wait <= 0:
                return
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await dropping.ended.wait()

    def _head_timer_start(self) -> None:
        self._head_timer = self.loop.call_later(
            settings.REQUEST_HEADER_TIMEOUT_SECONDS, self._head_timed_out
        )

    def _head_timer_stop(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if not self._in_head or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # A pipelined request's headers while the one before is still answered: that
            # answer is not cut short.
            self._head_timer_start()
            return
        if self._head_bytes or self.scope is not None:
            seconds = settings.REQUEST_HEADER_TIMEOUT_SECONDS
            self._refuse(408, f"The request's headers did not arrive within {seconds:g} s.")
        else:
            self.transport.close()  # a connection that never sent a byte gets no answer

    def _refuse(self, status: int, message: str) -> None:
        body = message.encode() + b"\n"
        self.transport.write(
            b"HTTP/1.1 %d %s\r\n" % (status, REASONS[status])
            + b"content-type: text/plain; charset=utf-8\r\n"
            + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
            + body
        )
        self._in_head = False
        self._head_timer_stop()
        self.transport.close()
