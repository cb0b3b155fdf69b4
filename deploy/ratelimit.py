"""Calls per minute per API key (or per person, from the browser), counted in the shared Redis
so every web process sees the same count."""

import time
from collections.abc import Sequence
from dataclasses import dataclass

import redis
from django.conf import settings

from core.redis_clients import shared_client

WINDOW_SECONDS = 60


def _redis() -> redis.Redis:
    return shared_client(settings.TRAINING_REDIS_URL)


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    limit: int
    remaining: int
    retry_after: int  # seconds until the window resets


def rate_take(*, who: str, limit: int, now: float | None = None) -> Verdict:
    """Count one call for `who` in the current minute; refuse past `limit`. A fixed window:
    one INCR, atomic across processes."""
    return rate_take_reading(who=who, limit=limit, now=now)[0]


def rate_take_reading(
    *, who: str, limit: int, read: Sequence[str] = (), now: float | None = None
) -> tuple[Verdict, tuple]:
    """rate_take, and the values of the Redis keys `read` (None for one that is absent) in the
    same round trip: a call checks whether the tables its kept lookup read have changed as it
    is counted (deploy.api)."""
    now = time.time() if now is None else now
    window = int(now // WINDOW_SECONDS)
    key = f"kestrel:ratelimit:{who}:{window}"
    pipe = _redis().pipeline()
    pipe.incr(key)
    pipe.expire(key, WINDOW_SECONDS + 5)
    if read:
        pipe.mget(read)
    count, _, *seen = pipe.execute()
    retry = max(1, int((window + 1) * WINDOW_SECONDS - now + 0.999))
    verdict = Verdict(
        allowed=count <= limit, limit=limit, remaining=max(0, limit - count), retry_after=retry
    )
    return verdict, (tuple(seen[0]) if seen else ())
