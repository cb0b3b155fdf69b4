"""What an error shows, and to whom.

Under DEBUG, Django answers an unhandled exception with its technical page: the traceback,
local variables, settings and paths. That page goes only to a signed-in, active superuser;
everyone else gets the plain 500 page, as with DEBUG off. Error mails to admins keep the
whole report. The JSON APIs answer 500 with a short JSON body and never a traceback (django-
ninja would send one as text under DEBUG).
"""

import logging

from django.template import loader
from django.views.debug import ExceptionReporter

logger = logging.getLogger("django.request")

PLAIN_TEXT = "A server error occurred. It has been logged.\n"


class SuperuserOnlyExceptionReporter(ExceptionReporter):
    def _may_see_details(self) -> bool:
        if self.is_email:
            return True
        try:
            user = getattr(self.request, "user", None)
            return bool(user and user.is_authenticated and user.is_active and user.is_superuser)
        except Exception:  # noqa: BLE001 - an error reading the user (its database) shows nothing
            return False

    def get_traceback_html(self) -> str:
        if self._may_see_details():
            return super().get_traceback_html()
        return loader.get_template("500.html").render()

    def get_traceback_text(self) -> str:
        if self._may_see_details():
            return super().get_traceback_text()
        return PLAIN_TEXT


def api_server_error(request, exc, *, api):
    """django-ninja's handler for any exception nobody else handles: logged like Django logs a
    500, answered with JSON."""
    logger.error(
        "Internal Server Error: %s",
        request.path,
        exc_info=(type(exc), exc, exc.__traceback__),
        extra={"status_code": 500, "request": request},
    )
    return api.create_response(request, {"detail": "Internal server error."}, status=500)


def api_unauthorized(request, exc, *, api):
    """No usable key and no session: 401 saying how to authenticate (RFC 9110 §11.6.1)."""
    response = api.create_response(
        request,
        {"detail": "Authentication required: send Authorization: Bearer <API key>."},
        status=401,
    )
    response["WWW-Authenticate"] = 'Bearer realm="Kestrel API"'
    return response


def api_errors_install(api) -> None:
    """The error answers every Kestrel NinjaAPI shares."""
    from functools import partial

    from ninja.errors import AuthenticationError

    api.add_exception_handler(AuthenticationError, partial(api_unauthorized, api=api))
    api.add_exception_handler(Exception, partial(api_server_error, api=api))
