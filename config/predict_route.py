"""The predict routes' short way through the web (issue 28): a predict call skips Django's
handler, its URL resolving, django-ninja's operation and the middlewares a predict call has no
use for, and runs the very view (deploy.api) on one kept thread.

    POST /api/v1/models/<id>/predict     deploy.api.model_predict
    POST /d/<slug>/predict               deploy.api.deployment_predict

What it skips cost about 1 ms of a call's web time on a small machine (bench/predict.py). What
it keeps is everything a predict call is checked by: the host (ALLOWED_HOSTS), the session and
its person as their middlewares give them, the caller found as django-ninja finds it
(PREDICT_AUTH in order: a key, else the browser session with its CSRF check), then the view
itself (Kestrel's one caller lookup, kept per process while nothing it read changed; the
plan's rate limit; the image; usage), its errors answered by the API's own handlers. A call
with no key and no session cookie, a CSRF check that fails, a host refused, an HTTPS redirect,
or anything that fails before the view runs is handed to Django whole, its body replayed, and
answered by the full way. The body is bounded before it arrives here (core.request_guard).
The answer passes the middlewares that write an API answer's headers and cookies
(SHORT_WAY_MIDDLEWARE, in the chain's order), and is closed as Django closes one: usage
counted and the image offered to collection after it has gone out, the database connection
given back.
"""

import io
import logging
import re

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.conf import settings
from django.core import signals
from django.core.exceptions import DisallowedHost
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpResponse, parse_cookie
from django.utils.log import log_response
from django.utils.module_loading import import_string

from config.api import api
from deploy.api import PREDICT_AUTH, deployment_predict, endpoints, model_predict

logger = logging.getLogger(__name__)

PREDICT_PATH = re.compile(
    r"/(?:api/v1/models/(?P<model>[0-9]{1,18})|d/(?P<slug>[^/]{1,200}))/predict"
)
# Those of settings.MIDDLEWARE a predict call needs (the session and its person, lazily, and
# the CSRF cookie), or whose answer headers it carries (a plain-HTTP call sent to HTTPS is left
# to the full way): run here in the chain's order. The others serve pages (static files,
# messages, htmx, allauth's, the trailing slash).
SHORT_WAY_MIDDLEWARE = (
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
)


class PredictRoute:
    """ASGI: predict calls with credentials answered here, everything else by `app` (the
    OneHopASGIHandler, whose kept threads this shares). `answered`: calls answered here."""

    def __init__(self, app):
        self.app = app
        self.answered = 0
        middleware = [
            import_string(path)(_no_view)
            for path in SHORT_WAY_MIDDLEWARE
            if path in settings.MIDDLEWARE
        ]
        self._on_request = [m.process_request for m in middleware if hasattr(m, "process_request")]
        self._on_response = [
            m.process_response for m in reversed(middleware) if hasattr(m, "process_response")
        ]

    async def __call__(self, scope, receive, send) -> None:
        match = _route(scope)
        if match is None or not _credentials_sent(scope):
            await self.app(scope, receive, send)
            return
        body = await _body(receive)
        if body is None:
            return  # the client left before its body arrived
        thread = self.app.threads.take()
        try:
            async with ThreadSensitiveContext(executor=thread):
                response = await sync_to_async(self._answer, thread_sensitive=True)(
                    scope, body, match
                )
                if response is not None:
                    try:
                        await _send(send, response)
                    finally:
                        await sync_to_async(response.close, thread_sensitive=True)()
        finally:
            self.app.threads.give(thread)
        if response is None:
            await self.app(scope, _replayed(body, receive), send)
        else:
            self.answered += 1

    def _answer(self, scope: dict, body: bytes, match: re.Match) -> HttpResponse | None:
        """The answer, or None for the full way (which then does everything again)."""
        signals.request_started.send(sender=PredictRoute, scope=scope)
        request = ASGIRequest(scope, io.BytesIO(body))
        try:
            request.get_host()
            if any(step(request) is not None for step in self._on_request):
                return _full_way()
            if not _authenticated(request):
                return _full_way()
        except DisallowedHost:
            return _full_way()
        except Exception:  # noqa: BLE001 - the full way meets it again and answers for it
            logger.debug("predict call handed to the full way", exc_info=True)
            return _full_way()
        slug = match["slug"]
        try:
            if slug is None:
                response = model_predict(request, int(match["model"]))
            else:
                response = deployment_predict(request, slug)
        except Exception as exc:  # noqa: BLE001 - answered as the API answers it
            response = (api if slug is None else endpoints).on_exception(request, exc)
        if "Server-Timing" in response:  # which way it took, for the bench and a browser's tools
            response["Server-Timing"] += ", short"
        for step in self._on_response:
            response = step(request, response)
        if response.status_code >= 400:  # logged as Django's handler logs it
            log_response(
                "%s: %s", response.reason_phrase, request.path, response=response, request=request
            )
        return response


def _no_view(request):  # the middlewares' get_response, never called here
    raise AssertionError("not called")


def _full_way() -> None:
    # What this thread took for the call (a pooled connection) goes back before the full way
    # takes the call to a thread of its own.
    signals.request_finished.send(sender=PredictRoute)
    return None


def _route(scope: dict) -> re.Match | None:
    if scope["type"] != "http" or scope["method"] != "POST" or scope.get("root_path"):
        return None
    return PREDICT_PATH.fullmatch(scope["path"])


def _authenticated(request) -> bool:
    """django-ninja's authentication of the predict operations: PREDICT_AUTH in order, the
    first answer kept as request.auth. A CSRF refusal raises (the full way answers it)."""
    for callback in PREDICT_AUTH:
        result = callback(request)
        if result:
            request.auth = result
            return True
    return False


def _credentials_sent(scope: dict) -> bool:
    """A bearer token or a session cookie: a call with neither is refused by the full way,
    without its body being held here."""
    for name, value in scope["headers"]:
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            return True
        if name == b"cookie" and parse_cookie(value.decode("latin-1")).get(
            settings.SESSION_COOKIE_NAME
        ):
            return True
    return False


async def _body(receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replayed(body: bytes, receive):
    given = False

    async def again():
        nonlocal given
        if not given:
            given = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


async def _send(send, response: HttpResponse) -> None:
    headers = [
        (name.encode("latin-1"), str(value).encode("latin-1")) for name, value in response.items()
    ]
    for cookie in response.cookies.values():
        headers.append((b"Set-Cookie", cookie.output(header="").encode("ascii").strip()))
    await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": response.content})
