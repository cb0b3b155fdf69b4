"""The web's link to the model server (deploy.model_link): a connection is kept for the next
call, and one the server dropped as it was reused is sent again once on a new one, not
answered with a 503."""

import socket
import threading

import pytest

from deploy import model_link
from deploy.model_link import LinkError, model_server_post


class LoopbackServer:
    """A server of this test on a free loopback port: each connection it accepts goes to
    `_connected`, on its accepting thread."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._connected(conn)

    def _connected(self, conn: socket.socket) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.sock.close()


class DropsFirst(LoopbackServer):
    """A loopback HTTP server that reads each request; the first `drops` connections are closed
    without an answer (a server ending an idle keep-alive connection), the rest get 200."""

    def __init__(self, drops: int):
        self.drops = drops
        self.requests = 0
        super().__init__()

    def _connected(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                data += chunk
            self.requests += 1
            if self.requests <= self.drops:
                return  # closed, nothing said
            body = b'{"ok": true}'
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )


def test_a_dropped_connection_is_sent_again_once():
    server = DropsFirst(drops=1)
    try:
        answer = model_server_post(f"{server.url}/predict", content=b"x")
        assert answer.status_code == 200 and answer.json() == {"ok": True}
        assert server.requests == 2
    finally:
        server.close()


def test_a_server_that_keeps_dropping_is_an_error_after_the_second_try():
    server = DropsFirst(drops=5)
    try:
        with pytest.raises(LinkError):
            model_server_post(f"{server.url}/predict", content=b"x")
        assert server.requests == 2
    finally:
        server.close()


class KeepsAlive(LoopbackServer):
    """A loopback HTTP/1.1 server that answers every request on a connection, and counts the
    connections it was given."""

    def __init__(self):
        self.connections = 0
        self.bodies: list[int] = []  # the length of each request's body, once read whole
        super().__init__()

    def _connected(self, conn: socket.socket) -> None:
        self.connections += 1
        threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn) -> None:
        with conn:
            data = b""
            while True:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, data = data.partition(b"\r\n\r\n")
                length = int(
                    next(
                        line.split(b":")[1]
                        for line in head.split(b"\r\n")
                        if line.lower().startswith(b"content-length:")
                    )
                )
                while len(data) < length:
                    data += conn.recv(65536)
                body, data = data[:length], data[length:]
                self.bodies.append(len(body))
                target = head.split(b" ")[1]
                answer = b'{"got": %d, "target": "%s"}' % (len(body), target)
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(answer)}\r\n\r\n".encode()
                    + answer
                )


def test_a_connection_is_kept_for_the_next_call():
    server = KeepsAlive()
    try:
        for size in (1, 50_000, 3):
            answer = model_server_post(
                f"{server.url}/predict", content=b"x" * size, params={"conf": 0.25, "imgsz": 64}
            )
            assert answer.status_code == 200
            assert answer.headers.get("content-type") == "application/json"
            assert answer.json() == {"got": size, "target": "/predict?conf=0.25&imgsz=64"}
        assert server.connections == 1
    finally:
        server.close()


def test_a_server_that_is_not_there_is_an_error():
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]  # nobody listens there once it is closed: refused
    with pytest.raises(LinkError, match="ConnectionRefused"):
        model_server_post(f"http://127.0.0.1:{port}/predict", content=b"x")
    with pytest.raises(LinkError, match="not a model server URL"):
        model_server_post("file:///etc/passwd", content=b"x")
    assert model_link.KEPT_PER_SERVER >= 8
