"""One Redis client per process for each URL and options, made once, under a lock.

A client made lazily without one was made twice when two request threads first asked at once:
the second replaced the first, and the first was collected with its connection pool
disconnected (redis-py's client closes a pool it made itself) while the other thread was still
connecting on it. That call failed with "Bad file descriptor", a 5 s timeout or a reset by
peer: a 500 for about one cold web process in twenty that got four predict calls at once."""

import threading

import redis

_lock = threading.Lock()
_clients: dict[tuple, redis.Redis] = {}


def shared_client(url: str, **options) -> redis.Redis:
    """This process's client for `url` with `options` (redis.Redis.from_url's)."""
    key = (url, tuple(sorted(options.items())))
    client = _clients.get(key)
    if client is None:
        with _lock:
            client = _clients.get(key)
            if client is None:
                client = _clients[key] = redis.Redis.from_url(url, **options)
    return client
