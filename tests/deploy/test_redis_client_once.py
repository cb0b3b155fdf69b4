"""A web process makes each of its Redis clients once, even when its first calls come at once
(core.redis_clients).

Made lazily without a lock, two request threads that asked at once each made a client; the
second replaced the first, and the first was collected with its connection pool disconnected
(redis-py's client closes a pool it made itself) while the other thread was still connecting
on it. That call failed: "Bad file descriptor", a 5 s timeout, or a reset by peer, a 500 for
about one cold web process in twenty with four predict calls at once."""

import sys
import threading

import pytest

import core.redis_clients
import core.table_changes
import deploy.ratelimit


@pytest.mark.parametrize(
    "module", [deploy.ratelimit, core.table_changes], ids=["rate limit", "table tokens"]
)
def test_threads_asking_at_once_get_one_client_that_stays_connected(module, monkeypatch):
    threads_n, rounds = 8, 40
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the interpreter switches threads as often as it can
    try:
        for _ in range(rounds):
            monkeypatch.setattr(core.redis_clients, "_clients", {})  # a new process's first calls
            start = threading.Barrier(threads_n)
            got, failed = [], []

            def ask(start=start, got=got, failed=failed):
                start.wait()
                try:
                    client = module._redis()
                    client.ping()
                    got.append(client)
                except Exception as exc:  # noqa: BLE001 - what failed is the finding
                    failed.append(exc)

            threads = [threading.Thread(target=ask) for _ in range(threads_n)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert not failed, failed
            assert len({id(client) for client in got}) == 1, "more than one client was made"
    finally:
        sys.setswitchinterval(interval)
