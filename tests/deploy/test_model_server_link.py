"""The web's link to the model server: a keep-alive connection the server dropped as it was
reused is sent again once on a new one, not answered with a 503."""

import socket
import threading

import httpx
import pytest

from deploy import predict


class DropsFirst:
    """A loopback HTTP server that reads each request; the first `drops` connections are closed
    without an answer (a server ending an idle keep-alive connection), the rest get 200."""

    def __init__(self, drops: int):
        self.drops = drops
        self.requests = 0
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
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                self.requests += 1
                if self.requests <= self.drops:
                    continue  # closed, nothing said
                body = b'{"ok": true}'
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )

    def close(self) -> None:
        self.sock.close()


def test_a_dropped_connection_is_sent_again_once():
    server = DropsFirst(drops=1)
    try:
        answer = predict._model_server_post(f"{server.url}/predict", content=b"x")
        assert answer.status_code == 200 and answer.json() == {"ok": True}
        assert server.requests == 2
    finally:
        server.close()


def test_a_server_that_keeps_dropping_is_an_error_after_the_second_try():
    server = DropsFirst(drops=5)
    try:
        with pytest.raises(httpx.HTTPError):
            predict._model_server_post(f"{server.url}/predict", content=b"x")
        assert server.requests == 2
    finally:
        server.close()
