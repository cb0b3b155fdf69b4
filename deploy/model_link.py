"""The web's link to model servers: kept-alive HTTP/1.1 connections from the standard library.

A predict call crosses it once. httpx's client (what this was) took 0.73 ms of the web's CPU
for each 50 KB image sent over loopback, http.client 0.19 ms (measured side by side, one
process, 350 calls each): half a millisecond of every call, on a path whose whole budget
outside the model is 5 ms (issue 28). The link does only what that path needs: POST a body,
read the whole answer, keep the connection for the next call.
"""

import http.client
import json
import ssl
import threading
from dataclasses import dataclass
from email.message import Message
from urllib.parse import urlencode, urlsplit

CONNECT_SECONDS = 5.0
ANSWER_SECONDS = 120.0
KEPT_PER_SERVER = 32


class LinkError(OSError):
    """The model server could not be reached, or its answer could not be read."""


@dataclass
class Answer:
    status_code: int
    headers: Message  # case-insensitive .get, as httpx's
    content: bytes

    def json(self):
        return json.loads(self.content)


# Failures of a kept connection the server had closed while it sat idle: the request never
# reached it, and a prediction has no side effect, so it is sent again once on a new one.
_STALE = (
    http.client.RemoteDisconnected,
    http.client.BadStatusLine,
    BrokenPipeError,
    ConnectionResetError,
    ConnectionAbortedError,
)
_lock = threading.Lock()
_kept: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
_tls: ssl.SSLContext | None = None


def _connect(scheme: str, host: str, port: int) -> http.client.HTTPConnection:
    global _tls
    if scheme == "https":
        _tls = _tls or ssl.create_default_context()
        conn = http.client.HTTPSConnection(host, port, timeout=CONNECT_SECONDS, context=_tls)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=CONNECT_SECONDS)
    # A server restarting refuses for a moment: tried again at once, twice, as before.
    for attempt in range(3):
        try:
            conn.connect()
            break
        except ConnectionRefusedError:
            if attempt == 2:
                raise
    conn.sock.settimeout(ANSWER_SECONDS)
    return conn


def _send(conn, path: str, body: bytes, headers: dict) -> Answer:
    conn.request("POST", path, body=body, headers=headers)
    response = conn.getresponse()
    content = response.read()
    if response.will_close:
        conn.close()
    return Answer(response.status, response.msg, content)


def model_server_post(
    url: str,
    *,
    content: bytes,
    params: dict | None = None,
    headers: dict | None = None,
) -> Answer:
    """POST `content` to `url` (with `params` as its query) on a kept connection; the whole
    answer. LinkError when the server cannot be reached or its answer read."""
    parts = urlsplit(url)
    scheme = parts.scheme or "http"
    if scheme not in ("http", "https") or not parts.hostname:
        raise LinkError(f"not a model server URL: {url!r}")
    slot = (scheme, parts.hostname, parts.port or (443 if scheme == "https" else 80))
    path = parts.path or "/"
    query = "&".join(q for q in (parts.query, urlencode(params or {})) if q)
    if query:
        path = f"{path}?{query}"
    headers = {"Content-Length": str(len(content)), **(headers or {})}
    with _lock:
        idle = _kept.get(slot)
        conn = idle.pop() if idle else None
    try:
        for attempt in range(2):
            conn = conn or _connect(*slot)
            try:
                answer = _send(conn, path, content, headers)
                break
            except _STALE:
                conn.close()
                conn = None
                if attempt:
                    raise
    except (OSError, http.client.HTTPException) as exc:
        if conn is not None:
            conn.close()
        raise LinkError(f"{type(exc).__name__}: {exc}") from exc
    except BaseException:  # interrupted: the connection's state is unknown
        if conn is not None:
            conn.close()
        raise
    if conn.sock is not None:  # still open: kept for the next call
        with _lock:
            idle = _kept.setdefault(slot, [])
            if len(idle) < KEPT_PER_SERVER:
                idle.append(conn)
                conn = None
        if conn is not None:
            conn.close()
    return answer
