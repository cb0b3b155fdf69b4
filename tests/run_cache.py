"""Files a test run makes once and every xdist worker of it reads (trained checkpoints, mostly):
the first worker to ask makes one, under a lock, while the others wait for it.

Under scripts/test.sh both databases' runs share one folder (KESTREL_TEST_CACHE, removed when
`make test` ends): a checkpoint trained for the PostgreSQL run serves the SQLite run too. A
plain `pytest` keeps them in a folder of its own run, removed when it ends (tests/conftest.py)."""

import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

CACHE_ENV = "KESTREL_TEST_CACHE"
RUN_MARK = "KESTREL_TEST_RUN"  # tests/conftest.py sets it before the workers start


def run_dir() -> Path:
    """The folder of this test run, the same in every xdist worker of it."""
    if given := os.environ.get(CACHE_ENV):
        path = Path(given)
    else:
        mark = os.environ.get(RUN_MARK) or f"pid{os.getpid()}"
        digest = hashlib.sha256(mark.encode()).hexdigest()[:16]
        path = Path(tempfile.gettempdir()) / f"kestrel-test-run-{digest}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_dir_remove() -> None:
    """The end of a plain run: its folder goes (scripts/test.sh removes a given one itself)."""
    if not os.environ.get(CACHE_ENV):
        shutil.rmtree(run_dir(), ignore_errors=True)


def run_shared(name: str, make: Callable[[Path], Path]) -> Path:
    """run_dir()/name, made once per run: `make(work)` writes the file in the empty folder
    `work` and returns its path; the file is moved into place whole, and `work` removed."""
    target = run_dir() / name
    if target.exists():
        return target
    with open(run_dir() / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be making it right now
        if not target.exists():
            work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=run_dir()))
            try:
                made = make(work)
                tmp = target.with_name(f"{name}.tmp")
                shutil.copyfile(made, tmp)
                os.replace(tmp, target)
            finally:
                shutil.rmtree(work, ignore_errors=True)
    return target


def run_kept(name: str, source) -> Path:
    """Keep `source` (a path, or an open binary file) as run_dir()/name for later callers of
    run_shared(name, ...); a file already kept stays."""
    target = run_dir() / name
    with open(run_dir() / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.exists():
            tmp = target.with_name(f"{name}.tmp")
            if isinstance(source, str | Path):
                shutil.copyfile(source, tmp)
            else:
                with open(tmp, "wb") as out:
                    shutil.copyfileobj(source, out)
            os.replace(tmp, target)
    return target
