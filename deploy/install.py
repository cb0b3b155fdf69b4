"""This install's mark, which its endpoints carry (a local process in its environment, a
rented service in its name), so two installs on one machine, or two test workers, each find
and end only their own."""

import hashlib
from pathlib import Path

from django.db import connection


def install_mark() -> str:
    """This install's mark: its database (two installs, or two test workers, on one machine
    have different ones). Read from the connection's settings, so no query is made."""
    db = connection.settings_dict
    name = str(db["NAME"])
    if connection.vendor == "sqlite":
        name = str(Path(name).resolve())
    return hashlib.sha256(f"{connection.vendor}:{name}".encode()).hexdigest()[:16]
