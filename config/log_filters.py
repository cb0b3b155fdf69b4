"""Filters the logging configuration (config.settings.LOGGING) puts on loggers."""

import logging

from django.core.exceptions import PermissionDenied


class PermissionDeniedOneLine(logging.Filter):
    """Django logs every 403 raised as PermissionDenied with the exception's traceback
    (django.core.handlers.exception.response_for_exception). A refusal is an answer, not a
    fault: it is logged as one line, with the reason, and no traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, PermissionDenied):
            reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            record.msg = record.getMessage() + (f" ({reason})" if reason else "")
            record.args = ()
            record.exc_info = None
            record.exc_text = None
        return True
