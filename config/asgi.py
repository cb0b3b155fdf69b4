"""The ASGI application: what uvicorn serves (`make run`, compose)."""

import os

import django
from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# A pool of PostgreSQL connections for this process (see DATABASES in config/settings.py).
os.environ.setdefault("DB_POOL", "true")


class OneHopASGIHandler(ASGIHandler):
    """Django's ASGI handler with the middleware chain in sync mode, run on the request's thread
    in one hop.

    Stock Django builds the chain in async mode under ASGI, and WhiteNoise (sync only) splits it,
    so each of the other middlewares' request and response steps crosses between the event loop
    and a thread: about a dozen crossings a request, several milliseconds on a small machine.
    Here the whole chain and a sync view run on one thread. Async views still work: Django
    runs them on the event loop for the moment they take to return, and a streaming response
    (the live training page) is still sent from the loop, never holding a thread."""

    def load_middleware(self, is_async=False):
        super().load_middleware(is_async=False)

    async def get_response_async(self, request):
        return await sync_to_async(self.get_response, thread_sensitive=True)(request)


django.setup(set_prefix=False)
# Imported once Django is set up: the route table reads the apps' own limits.
from config.body_limits import BodyLimits  # noqa: E402
from core.request_guard import RequestGuard  # noqa: E402

# Every request's body is bounded before Django reads any of it (core/request_guard.py).
application = RequestGuard(OneHopASGIHandler(), BodyLimits())
