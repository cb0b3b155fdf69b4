"""A refused body's rest is dropped as it arrives, not parsed (core.request_guard).

A client that sends its whole body without waiting for an answer (httpx, requests, a script)
still reads its refusal whole: the server reads on for a moment before it closes (a socket
closed with unread bytes sends a reset, which can destroy the answer). Those bytes used to
go through the HTTP parser and the app's `receive`, 64 KB at a time: 9 ms of the event loop's
time for a 21 MB image over the predict limit, sent again and again by one careless caller,
and every other caller of that web process waited behind it. Now the protocol drops them
unparsed.

Real uvicorn with the guard's protocol and the guard in front of a small app, in a thread of
this process, so that the test can count what the parser was handed.
"""

import socket
import threading
import time
from contextlib import contextmanager

import pytest
import uvicorn

from core.request_guard import Grant, HeaderGuardProtocol, RequestGuard, plain_refusal

LIMIT = 1024
BODY = 32 * 2**20  # 32 MiB
ANSWER_SECONDS = 20  # far more than an answer takes


class SmallLimits:
    """Every request may send LIMIT bytes, credentials or not."""

    def anonymous(self, scope: dict) -> Grant:
        return Grant(limit=LIMIT, what="A test body")

    def granted(self, scope: dict) -> Grant:
        return self.anonymous(scope)

    def kept(self, scope: dict) -> Grant | None:
        return self.anonymous(scope)

    def refusal(self, scope: dict, status: int, message: str) -> tuple[str, bytes]:
        return plain_refusal(message)


class CountingProtocol(HeaderGuardProtocol):
    """The guard's protocol, counting the body bytes its parser was handed."""

    parsed = 0

    def on_body(self, body: bytes) -> None:
        CountingProtocol.parsed += len(body)
        super().on_body(body)


async def echo_length(scope, receive, send) -> None:
    """A body within the limit is read whole and its length answered."""
    size, more = 0, True
    while more:
        message = await receive()
        size += len(message.get("body", b""))
        more = message.get("more_body", False)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": str(size).encode()})


@contextmanager
def guarded_server():
    config = uvicorn.Config(
        RequestGuard(echo_length, SmallLimits()),
        host="127.0.0.1",
        port=0,
        http=CountingProtocol,
        lifespan="off",
        log_level="warning",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + ANSWER_SECONDS
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=ANSWER_SECONDS)


def sent_in_background(sock: socket.socket, data: bytes) -> threading.Thread:
    def send() -> None:
        try:
            sock.sendall(data)
        except OSError:
            pass  # the server closed: what matters is the answer already read

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def read_to_end(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_a_client_sending_its_whole_body_reads_its_refusal_and_the_rest_is_not_parsed(chunked):
    if chunked:
        piece = 64 * 1024
        head = b"Transfer-Encoding: chunked\r\n"
        body = (b"%x\r\n" % piece + b"k" * piece + b"\r\n") * (BODY // piece) + b"0\r\n\r\n"
    else:
        head = b"Content-Length: %d\r\n" % BODY
        body = b"k" * BODY
    CountingProtocol.parsed = 0
    with guarded_server() as port:
        with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_SECONDS) as sock:
            sock.sendall(b"POST /predict HTTP/1.1\r\nHost: 127.0.0.1\r\n" + head + b"\r\n")
            sender = sent_in_background(sock, body)
            answer = read_to_end(sock)  # the server closes once the body is in, or paused
            sender.join(timeout=ANSWER_SECONDS)
        assert not sender.is_alive(), "the server stopped reading before the body was in"
        # Parsed: what came with the first reads, before the refusal; not the 32 MiB after it.
        assert CountingProtocol.parsed < 2 * 2**20, CountingProtocol.parsed

        # A body within the limit on the same server is read whole.
        with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_SECONDS) as sock:
            sock.sendall(
                b"POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n"
                + b"k" * 1000
            )
            within = read_to_end(sock)
    top, _, text = answer.partition(b"\r\n\r\n")
    assert top.startswith(b"HTTP/1.1 413 ") and b"connection: close" in top.lower(), top
    told = b"sent more" if chunked else b"declares 33,554,432 bytes"
    assert b"A test body is at most 1.0 KiB (1,024 bytes)" in text and told in text, text
    assert within.startswith(b"HTTP/1.1 200 ") and b"\r\n\r\n4\r\n1000\r\n" in within, within
