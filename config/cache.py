"""The cache on Redis, made to ride out Redis going away: a read is a miss, a write is skipped,
and the page is served (rate limits fail open meanwhile). Every such fault is logged, once per
outage."""

import functools
import logging
import time

import redis
from django.core.cache.backends.redis import RedisCache

logger = logging.getLogger(__name__)

_REPORT_EVERY_SECONDS = 30.0


class TolerantRedisCache(RedisCache):
    _reported_at = 0.0

    def _away(self, name: str, error: Exception) -> None:
        now = time.monotonic()
        if now - TolerantRedisCache._reported_at > _REPORT_EVERY_SECONDS:
            TolerantRedisCache._reported_at = now
            logger.warning("cache %s skipped: Redis is unreachable (%s)", name, error)


def _tolerant(name: str, fallback):
    method = getattr(RedisCache, name)

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except redis.RedisError as e:
            self._away(name, e)
            return fallback(*args, **kwargs)

    return call


def _default(key, default=None, *args, **kwargs):
    return default


for _name, _fallback in {
    "get": _default,
    "get_many": lambda *a, **k: {},
    "has_key": lambda *a, **k: False,
    "add": lambda *a, **k: True,  # as if taken: a lock or a once-only mark does not block
    "set": lambda *a, **k: None,
    "set_many": lambda keys, *a, **k: list(keys),  # Django: the keys that were not set
    "touch": lambda *a, **k: False,
    "delete": lambda *a, **k: False,
    "delete_many": lambda *a, **k: None,
    "clear": lambda *a, **k: False,
}.items():
    setattr(TolerantRedisCache, _name, _tolerant(_name, _fallback))
