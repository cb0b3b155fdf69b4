"""Images from URLs, when an admin has turned URL sources on: only public addresses (no
private, loopback, link-local, reserved or multicast ones), every redirect checked again, and
caps on size and time."""

import ipaddress
import socket
from urllib.parse import urljoin, urlsplit

import httpx

MAX_REDIRECTS = 3
TIMEOUT_SECONDS = 10


class FetchRefused(Exception):
    pass


def _public_host(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchRefused("Only http and https URLs can be fetched.")
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or 443, type=socket.SOCK_STREAM)
    except socket.gaierror:
        raise FetchRefused(f"{parts.hostname} does not resolve.") from None
    for info in infos:
        address = ipaddress.ip_address(info[4][0])
        if not address.is_global or address.is_multicast:
            raise FetchRefused(f"{parts.hostname} is not a public address; it cannot be fetched.")


def fetch_image(url: str, *, max_bytes: int) -> bytes:
    """The bytes at `url`, or FetchRefused with the reason."""
    with httpx.Client(timeout=TIMEOUT_SECONDS, follow_redirects=False) as client:
        for _ in range(MAX_REDIRECTS + 1):
            _public_host(url)
            with client.stream("GET", url) as response:
                if response.is_redirect:
                    url = urljoin(url, response.headers.get("location", ""))
                    continue
                if response.status_code != 200:
                    raise FetchRefused(f"The URL answered {response.status_code}.")
                data = bytearray()
                for chunk in response.iter_bytes():
                    data += chunk
                    if len(data) > max_bytes:
                        raise FetchRefused(f"The image at the URL is over {max_bytes} bytes.")
                return bytes(data)
    raise FetchRefused("Too many redirects.")
