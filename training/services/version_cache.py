"""Figures that depend only on the installed Ultralytics (its configuration, a model's FLOPs),
kept on this machine's disk beside the shared cache: they are measured in a subprocess that
takes seconds (tens on a busy machine), and a page must not wait on that again after Redis
restarts or its cache is emptied. Keyed by Ultralytics' version and where it is installed, so
an upgrade measures afresh; written atomically, so processes that race read whole files."""

import hashlib
import json
import os
import tempfile
from pathlib import Path

from django.conf import settings


def _path(key: str) -> Path:
    digest = hashlib.sha256(key.encode()).hexdigest()[:32]
    return Path(settings.VAR_DIR) / "cache" / "ultralytics" / f"{digest}.json"


def version_cache_get(key: str):
    try:
        with _path(key).open(encoding="utf-8") as f:
            stored = json.load(f)
    except (OSError, ValueError):
        return None
    return stored.get("value") if isinstance(stored, dict) and stored.get("key") == key else None


def version_cache_set(key: str, value) -> None:
    path = _path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"key": key, "value": value}, f)
        os.replace(tmp, path)
    except OSError:  # a read-only disk: the shared cache still has it
        pass


def version_cache_forget(key: str) -> None:
    _path(key).unlink(missing_ok=True)
