"""The web server: `python -m config.web [uvicorn options]` serves config.asgi under uvicorn.

uvicorn believes X-Forwarded-For from 127.0.0.1 unless told otherwise, so any client on the
same machine (or behind an open local proxy) could pick the address that allauth's login and
signup limits count, and change it on every try. Here the forwarded address is believed only
from the front servers named in TRUSTED_PROXIES (settings), and from nobody when it is empty.

Its HTTP protocol is uvicorn's own with a deadline and a size cap on each request's headers
(core.request_guard.HeaderGuardProtocol): uvicorn has neither.
"""

import os
import sys


def proxy_arguments(trusted: list[str]) -> list[str]:
    if not trusted:
        return ["--no-proxy-headers"]
    return ["--proxy-headers", "--forwarded-allow-ips", ",".join(trusted)]


def main(argv: list[str] | None = None) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # As config/asgi.py asks, and before settings are read here: read first without it, they
    # kept the pool off, and each request's thread opened a PostgreSQL connection of its own.
    os.environ.setdefault("DB_POOL", "true")
    from django.conf import settings
    from uvicorn.main import main as uvicorn_main

    args = list(sys.argv[1:] if argv is None else argv)
    # Last on the line, so they win over anything passed before them.
    guard = ["--http", "core.request_guard:HeaderGuardProtocol"]
    uvicorn_main(
        ["config.asgi:application", *args, *guard, *proxy_arguments(settings.TRUSTED_PROXIES)]
    )


if __name__ == "__main__":
    main()
