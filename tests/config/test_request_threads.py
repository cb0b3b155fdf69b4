"""The web's requests run their sync work on threads kept from earlier requests
(core.asgi_handler.RequestThreads), each request on one thread of its own for its whole life.

Stock Django under ASGI starts a thread for every request and another to join it as it ends
(asgiref 3.13): about 0.7 ms of CPU a predict call on this machine (bench/predict.py)."""

import asyncio
import threading

from django.core.signals import request_finished, request_started

from core.asgi_handler import OneHopASGIHandler, RequestThread, RequestThreads


def call(app, path: str) -> int:
    """One GET through the ASGI app, in this process; its status."""
    sent = []

    async def receive():
        if not sent and not getattr(receive, "done", False):
            receive.done = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await asyncio.sleep(3600)  # the client stays: no disconnect

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"testserver")],
        "client": ("127.0.0.1", 5000),
        "server": ("testserver", 80),
    }
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"]


def test_a_requests_sync_work_runs_on_one_thread_kept_for_the_next(settings):
    settings.ALLOWED_HOSTS = ["testserver"]
    app = OneHopASGIHandler()
    app.threads = RequestThreads()
    seen: list[tuple[str, threading.Thread]] = []

    def started(**kwargs):
        seen.append(("started", threading.current_thread()))

    def finished(**kwargs):
        seen.append(("finished", threading.current_thread()))

    request_started.connect(started)
    request_finished.connect(finished)
    try:
        for _ in range(3):
            assert call(app, "/favicon.ico") == 302
    finally:
        request_started.disconnect(started)
        request_finished.disconnect(finished)
    assert [what for what, _ in seen] == ["started", "finished"] * 3
    threads = [thread for _, thread in seen]
    # Not the event loop's thread, and the same one for every step of all three requests.
    assert threads[0] is not threading.main_thread()
    assert all(thread is threads[0] for thread in threads), threads
    assert len(app.threads._idle) == 1


def test_a_thread_still_working_is_not_handed_to_the_next_request():
    threads = RequestThreads()
    first = threads.take()
    release = threading.Event()
    first.submit(release.wait, 10)  # a view still running after its client left
    threads.give(first)
    assert threads.take() is not first
    release.set()
    first.shutdown(wait=True)
    idle = RequestThread()
    threads.give(idle)
    assert threads.take() is idle


def test_idle_threads_beyond_the_keep_are_let_go():
    threads = RequestThreads(keep=2)
    taken = [threads.take() for _ in range(3)]
    for thread in taken:
        threads.give(thread)
    assert threads._idle == taken[:2]
    assert taken[2]._shutdown
