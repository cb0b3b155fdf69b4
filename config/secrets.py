"""The quick start's secret key: random, made once per install, kept in a file only its owner
can read. Settings import this, so it uses nothing but the standard library."""

import os
import secrets
import time
from pathlib import Path


def install_secret(path: Path) -> str:
    """The key stored at `path`, created on first use.

    Several processes start at once on the first `make run` (web, workers, beat): the key is
    written to a private temporary file and linked into place, which fails for all but the
    first, so every process ends up reading the same complete key.
    """
    path = Path(path)
    for _ in range(50):
        try:
            key = path.read_text().strip()
        except FileNotFoundError:
            key = ""
        if key:
            return key
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                os.write(fd, (secrets.token_urlsafe(50) + "\n").encode())
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)
            except FileExistsError:
                pass  # another process won; read its key
            finally:
                tmp.unlink(missing_ok=True)
            continue
        time.sleep(0.02)  # an empty file: someone else's write is under way
    raise RuntimeError(f"{path} exists but holds no key; delete it to make a new one")
