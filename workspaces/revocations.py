"""A counter in the shared Redis that moves whenever an API key is revoked.

A web process may keep a key's lookup for a second (deploy.api); it reads this counter with
each call, in the pipeline that counts the call against the rate limit, and drops what it kept
when the counter moved: a revoked key is refused by its next call, in every process."""

import logging

import redis
from django.conf import settings

REVOCATIONS = "kestrel:apikeys:revocations"
logger = logging.getLogger(__name__)
_client: redis.Redis | None = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(settings.TRAINING_REDIS_URL)
    return _client


def api_key_revocations_bump() -> None:
    try:
        _redis().incr(REVOCATIONS)
    except redis.RedisError:
        # Lookups kept elsewhere still lapse on their own within a second (deploy.api).
        logger.warning("could not announce an API key's revocation to other web processes")


def api_key_revocations_read() -> bytes | None:
    return _redis().get(REVOCATIONS)
