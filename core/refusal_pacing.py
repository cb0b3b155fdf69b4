"""A caller whose calls keep being refused is answered more slowly (issue 28, "Bad input").

A refusal is cheap, but not free: the web spends 2-4 ms of CPU on a bad image, a bad
parameter or a body over its limit (bench/predict.py), on the same event loop and cores as
everyone's good calls. One client sending bad input in a loop gets its answers back in a few
ms and sends the next at once: 130-190 refusals a second from one connection on a 2-core
machine, and every other caller of that web process waited behind them.

So, per client address and per web process, as nginx's `limit_req` delays what is over its
rate and as rate rules that count 4xx answers do: the first REFUSALS_FREE answers in 4xx on
the routes given within REFUSALS_WINDOW_SECONDS go out at once; each one after that is held
REFUSAL_PAUSE_SECONDS before it is sent. The hold is a sleeping coroutine: no thread, no
connection to the database, nothing read meanwhile. A caller sending one call after another
is then refused a few times a second, and good calls (2xx, from that address too) are never
held. The answer says it was held: `Server-Timing: paced;dur=<ms>`.

A hold alone paces one connection: the same client with 32 connections at once was refused
about 110 times a second, and the good calls of everyone else took +2.5 ms at p50 and +14 ms
at p95 (bench/predict.py). So while an address is past its free refusals, its predict calls
are also answered PACED_CALLS_AT_ONCE at a time; the others wait their turn before anything of
them is read (`Server-Timing: queued;dur=<ms>` says how long). Its good calls wait behind its
own calls only, and other addresses not at all.
"""

import asyncio
import re
import time

from django.conf import settings

# Addresses kept at most; past it, those whose window has ended are forgotten.
MAX_ADDRESSES = 4096


class RefusalPacing:
    """ASGI middleware: refusals (4xx) on `paths` paced per client address, as above."""

    def __init__(self, app, paths: re.Pattern):
        self.app = app
        self.paths = paths
        self.seen: dict[str, list[float | int]] = {}  # address → [window's start, refusals]
        # address past its free refusals → [its calls answered at once, calls in or waiting]
        self.gates: dict[str, list] = {}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or not self.paths.fullmatch(scope["path"]):
            await self.app(scope, receive, send)
            return
        address = (scope.get("client") or ("",))[0]
        queued = 0.0

        async def paced_send(message: dict) -> None:
            if message["type"] == "http.response.start":
                added = []
                if 400 <= message["status"] < 500:
                    pause = self.pause_for(address)
                    if pause:
                        await asyncio.sleep(pause)
                        added.append(paced_header(pause))
                if queued >= 0.001:
                    added.append(queued_header(queued))
                if added:
                    message = {**message, "headers": [*message.get("headers", ()), *added]}
            await send(message)

        if not self.refusing(address):
            await self.app(scope, receive, paced_send)
            return
        gate = self.gates.get(address)
        if gate is None:
            gate = self.gates[address] = [asyncio.Semaphore(settings.PACED_CALLS_AT_ONCE), 0]
        gate[1] += 1
        try:
            waited = time.monotonic()
            async with gate[0]:
                queued = time.monotonic() - waited
                await self.app(scope, receive, paced_send)
        finally:
            gate[1] -= 1
            if not gate[1]:
                del self.gates[address]

    def refusing(self, address: str, now: float | None = None) -> bool:
        """Whether `address` has had its free refusals in the current window."""
        entry = self.seen.get(address)
        if entry is None:
            return False
        now = time.monotonic() if now is None else now
        return (
            now - entry[0] < settings.REFUSALS_WINDOW_SECONDS and entry[1] >= settings.REFUSALS_FREE
        )

    def pause_for(self, address: str, now: float | None = None) -> float:
        """Count a refusal for `address`; how long its answer is held (0: not held)."""
        now = time.monotonic() if now is None else now
        window = settings.REFUSALS_WINDOW_SECONDS
        entry = self.seen.get(address)
        if entry is None or now - entry[0] >= window:
            if entry is None and len(self.seen) >= MAX_ADDRESSES:
                self.forget(now, window)
            entry = self.seen[address] = [now, 0]
        entry[1] += 1
        return settings.REFUSAL_PAUSE_SECONDS if entry[1] > settings.REFUSALS_FREE else 0.0

    def forget(self, now: float, window: float) -> None:
        ended = [a for a, (start, _) in self.seen.items() if now - start >= window]
        for address in ended:
            del self.seen[address]
        if len(self.seen) >= MAX_ADDRESSES:  # all within their window: the oldest go
            oldest = sorted(self.seen, key=lambda a: self.seen[a][0])
            for address in oldest[: len(oldest) // 2]:
                del self.seen[address]


def paced_header(pause: float) -> tuple[bytes, bytes]:
    return b"server-timing", b'paced;dur=%d;desc="refusals from this address"' % (1000 * pause)


def queued_header(seconds: float) -> tuple[bytes, bytes]:
    return b"server-timing", b'queued;dur=%d;desc="calls at once from this address"' % (
        1000 * seconds
    )
