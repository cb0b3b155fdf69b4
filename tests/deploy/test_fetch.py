"""URL sources: each hop resolved once, checked, and connected to at the checked address."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from deploy.fetch import FetchRefused, fetch_image, pin, resolve_public

IMAGE = b"\xff\xd8\xff\xe0" + b"x" * 2000


class _Handler(BaseHTTPRequestHandler):
    hosts: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        _Handler.hosts.append(self.headers["Host"])
        if self.path == "/img.jpg":
            self.send_response(200)
            self.send_header("Content-Length", str(len(IMAGE)))
            self.end_headers()
            self.wfile.write(IMAGE)
        elif self.path.startswith("/to/"):
            self.send_response(302)
            self.send_header("Location", f"http://{self.path[4:]}/img.jpg")
            self.end_headers()
        else:
            self.send_response(404)
            self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _Handler.hosts = []
    yield httpd.server_address[1]
    httpd.shutdown()


def _resolver(table: dict, calls: list):
    """Names this test treats as public, each answering with the address to connect to."""

    def resolve(hostname: str, port: int) -> str:
        calls.append(hostname)
        if hostname not in table:
            raise FetchRefused(f"{hostname} is not a public address; it cannot be fetched.")
        return table[hostname]

    return resolve


def test_connects_to_the_checked_address_with_the_name_in_host(server):
    calls = []
    resolve = _resolver({"images.example": "127.0.0.1"}, calls)
    data = fetch_image(f"http://images.example:{server}/img.jpg", max_bytes=10_000, resolve=resolve)
    assert data == IMAGE
    assert _Handler.hosts == [f"images.example:{server}"]
    assert calls == ["images.example"]  # resolved once: nothing resolves it again to connect


def test_every_redirect_is_resolved_and_checked_again(server):
    calls = []
    resolve = _resolver({"images.example": "127.0.0.1"}, calls)
    with pytest.raises(FetchRefused, match="internal.example is not a public address"):
        fetch_image(
            f"http://images.example:{server}/to/internal.example:{server}",
            max_bytes=10_000,
            resolve=resolve,
        )
    assert calls == ["images.example", "internal.example"]
    assert len(_Handler.hosts) == 1  # the redirect target was never contacted


def test_size_cap_and_status(server):
    resolve = _resolver({"images.example": "127.0.0.1"}, [])
    with pytest.raises(FetchRefused, match="over 100 bytes"):
        fetch_image(f"http://images.example:{server}/img.jpg", max_bytes=100, resolve=resolve)
    with pytest.raises(FetchRefused, match="answered 404"):
        fetch_image(f"http://images.example:{server}/nope", max_bytes=100, resolve=resolve)


def test_real_resolution_refuses_anything_not_public():
    for host in ("127.0.0.1", "10.1.2.3", "169.254.169.254", "::1", "localhost", "224.0.0.1"):
        with pytest.raises(FetchRefused):
            resolve_public(host, 80)
    assert resolve_public("93.184.216.34", 80) == "93.184.216.34"  # a literal: no DNS needed


def test_pinned_request_keeps_name_port_and_tls_server_name():
    target = pin("https://cdn.example/a/b.jpg?x=1", lambda host, port: "93.184.216.34")
    assert target.url == "https://93.184.216.34:443/a/b.jpg?x=1"
    assert target.headers == {"Host": "cdn.example"}
    assert target.extensions == {"sni_hostname": "cdn.example"}  # certificate checked against it
    target = pin("http://cdn.example:8080/", lambda host, port: "2606:2800:220:1::1")
    assert target.url == "http://[2606:2800:220:1::1]:8080/"
    assert target.headers == {"Host": "cdn.example:8080"} and target.extensions == {}
    for bad in ("file:///etc/passwd", "ftp://cdn.example/x", "http:///x", "http://a:port/"):
        with pytest.raises(FetchRefused):
            pin(bad, lambda host, port: "93.184.216.34")
