"""Django's ASGI handler as Kestrel's web serves it (config/asgi.py): the middleware chain in
sync mode, in one hop, on threads kept from request to request."""

import threading
from concurrent.futures import ThreadPoolExecutor

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.core.handlers.asgi import ASGIHandler


class RequestThread(ThreadPoolExecutor):
    """One thread that runs one request's sync work at a time, kept for the next request.
    `busy`: work submitted and not yet finished (a view still running after its client left)."""

    def __init__(self):
        super().__init__(max_workers=1, thread_name_prefix="request")
        self._lock = threading.Lock()
        self._pending = 0

    def submit(self, fn, /, *args, **kwargs):
        with self._lock:
            self._pending += 1
        future = super().submit(fn, *args, **kwargs)
        future.add_done_callback(self._done)
        return future

    def _done(self, _future) -> None:
        with self._lock:
            self._pending -= 1

    @property
    def busy(self) -> bool:
        with self._lock:
            return self._pending > 0


class RequestThreads:
    """The threads requests run their sync work on, each request on one thread of its own for
    its whole life, as Django's ThreadSensitiveContext gives it, but kept for the next request.

    Stock Django starts a thread for every request and, as it ends, starts another to join it
    (asgiref 3.13): two thread starts and a join per call, 0.7 ms of CPU a predict call on a
    2-core machine (measured side by side in one process). Idle threads beyond `keep` are let
    go."""

    def __init__(self, keep: int = 64):
        self._idle: list[RequestThread] = []  # touched only on the event loop's thread
        self.keep = keep

    def take(self) -> RequestThread:
        return self._idle.pop() if self._idle else RequestThread()

    def give(self, thread: RequestThread) -> None:
        # A thread still running a request's work (its client left mid-view) is not handed to
        # another request, which would wait behind it: it ends once that work is done.
        if thread.busy or len(self._idle) >= self.keep:
            thread.shutdown(wait=False)
        else:
            self._idle.append(thread)


class OneHopASGIHandler(ASGIHandler):
    """Django's ASGI handler with the middleware chain in sync mode, run on the request's thread
    in one hop, on a thread kept from earlier requests (RequestThreads).

    Stock Django builds the chain in async mode under ASGI, and WhiteNoise (sync only) splits it,
    so each of the other middlewares' request and response steps crosses between the event loop
    and a thread: about a dozen crossings a request, several milliseconds on a small machine.
    Here the whole chain and a sync view run on one thread. Async views still work: Django
    runs them on the event loop for the moment they take to return, and a streaming response
    (the live training page) is still sent from the loop, never holding a thread."""

    threads = RequestThreads()

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)  # Django's own refusal
        thread = self.threads.take()
        try:
            # Every thread-sensitive call of this request (its signals, the chain and view,
            # the response's close) runs on `thread`, as on the thread stock Django starts.
            async with ThreadSensitiveContext(executor=thread):
                await self.handle(scope, receive, send)
        finally:
            self.threads.give(thread)

    async def get_response_async(self, request):
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)
