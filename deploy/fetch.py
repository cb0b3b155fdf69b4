"""Images from URLs, when an admin has turned URL sources on: only public addresses (no
private, loopback, link-local, reserved or multicast ones), every redirect checked again, and
caps on size and time.

Each hop's name is resolved once, every address it resolves to is checked, and the connection
goes to the checked address (the name travels in the Host header and, for https, as the TLS
server name, so certificates are still verified against it). A name that resolves to a public
address for the check and to a private one for the connection (DNS rebinding) therefore never
reaches the private one."""

import ipaddress
import socket
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx

MAX_REDIRECTS = 3
TIMEOUT_SECONDS = 10


class FetchRefused(Exception):
    pass


def resolve_public(hostname: str, port: int) -> str:
    """The address to connect to for `hostname`, when every address it resolves to is public;
    else FetchRefused."""
    try:
        infos = socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise FetchRefused(f"{hostname} does not resolve.") from None
    addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    if not addresses or any(not a.is_global or a.is_multicast for a in addresses):
        raise FetchRefused(f"{hostname} is not a public address; it cannot be fetched.")
    return str(addresses[0])


@dataclass(frozen=True)
class Pinned:
    """A request for `url` sent to an address already checked."""

    url: str  # the URL with the checked address in place of the name
    headers: dict
    extensions: dict


def pin(url: str, resolve: Callable[[str, int], str] = resolve_public) -> Pinned:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchRefused("Only http and https URLs can be fetched.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise FetchRefused("The URL's port is not a number.") from None
    address = resolve(parts.hostname, port)
    host = f"[{address}]" if ":" in address else address
    pinned = urlunsplit((parts.scheme, f"{host}:{port}", parts.path or "/", parts.query, ""))
    name = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
    return Pinned(pinned, {"Host": name if parts.port is None else f"{name}:{port}"}, extensions)


def fetch_image(
    url: str, *, max_bytes: int, resolve: Callable[[str, int], str] = resolve_public
) -> bytes:
    """The bytes at `url`, or FetchRefused with the reason. `resolve` picks each hop's address
    (resolve_public; tests give one of their own)."""
    with httpx.Client(timeout=TIMEOUT_SECONDS, follow_redirects=False) as client:
        for _ in range(MAX_REDIRECTS + 1):
            target = pin(url, resolve)
            with client.stream(
                "GET", target.url, headers=target.headers, extensions=target.extensions
            ) as response:
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
