"""A second host for tests: a network namespace of the suite's own, joined to this one by a
veth pair and nothing else. A process started in it (`ip netns exec NAME ...`) reaches only the
host side's address (the suite's own servers listen there): not 127.0.0.1 of this machine, so
no database or Redis, and no internet."""

import contextlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

import pytest


@dataclass
class Namespace:
    name: str
    host_ip: str  # this machine's side of the link: where the suite's servers listen
    ip: str  # the namespace's side
    host_link: str

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]

    def link(self, up: bool) -> None:
        """Cut the link (down) or bring it back (up), as a network would."""
        _ip("link", "set", self.host_link, "up" if up else "down")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def namespace_available() -> str | None:
    """Why a namespace cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "needs iproute2 (ip) for a network namespace"
    if os.geteuid() != 0:
        return "needs root for a network namespace"
    return None


@contextlib.contextmanager
def network_namespace() -> Iterator[Namespace]:
    why = namespace_available()
    if why:
        pytest.skip(why)
    tag = secrets.token_hex(3)
    name, host_link, ns_link = f"kst-{tag}", f"kh{tag}", f"kn{tag}"
    a, b = secrets.randbelow(200) + 20, secrets.randbelow(63) * 4
    host_ip, ns_ip = f"10.{a}.{b}.1", f"10.{a}.{b}.2"
    try:
        _ip("netns", "add", name)
        _ip("link", "add", host_link, "type", "veth", "peer", "name", ns_link)
        _ip("link", "set", ns_link, "netns", name)
        _ip("addr", "add", f"{host_ip}/30", "dev", host_link)
        _ip("link", "set", host_link, "up")
        _ip("netns", "exec", name, "ip", "addr", "add", f"{ns_ip}/30", "dev", ns_link)
        _ip("netns", "exec", name, "ip", "link", "set", ns_link, "up")
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        yield Namespace(name=name, host_ip=host_ip, ip=ns_ip, host_link=host_link)
    finally:
        subprocess.run(["ip", "link", "del", host_link], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)
