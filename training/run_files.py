"""The files of a training attempt, as the supervisor reads them: only from folders it made
itself under the machine's work folder (the run folder Ultralytics writes, the attempt's
checkpoint folder), only by names it expects, never through a link, and never larger than a cap.

Events name files by what they are (`training.event_schema`); a name becomes a file here alone.
Every folder below the work folder is opened with O_NOFOLLOW relative to its parent's
descriptor, so a link planted anywhere on the way (the run folder itself, weights/, the file)
is refused, not followed, and nothing can swap a folder between the check and the open.
"""

import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

RUN_NAME = "run"  # Ultralytics' `name`: the run folder is <job folder>/run
CHECKPOINTS = "checkpoints"
RESULTS_CSV = "results.csv"
BEST_WEIGHTS = ("weights", "best.pt")
CHECKPOINT_NAME = re.compile(r"^(?:last|best)-(\d{1,6})\.pt$")
MAX_PLOT_BYTES = 20 * 2**20
MAX_RESULTS_CSV_BYTES = 20 * 2**20
MAX_WEIGHTS_BYTES = 8 * 2**30

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
# Opening a planted FIFO must not hang the supervisor; fstat then refuses it.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_BY_DESCRIPTOR = bool(_NOFOLLOW and _DIRECTORY) and os.open in os.supports_dir_fd


class RunFileRefused(OSError):
    """The name is not a plain file of the folder (a link, a folder, too big, ...)."""


def _check_part(part: str) -> str:
    if not part or part in (".", "..") or "/" in part or "\\" in part or "\0" in part:
        raise RunFileRefused(f"{part!r} is not a plain name")
    return part


def _dir_open(base: Path, parts: tuple[str, ...]) -> int:
    """A descriptor of base/parts..., each part a real folder, not a link."""
    fd = os.open(base, os.O_RDONLY | _DIRECTORY)
    try:
        for part in parts:
            child = os.open(
                _check_part(part), os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _NONBLOCK, dir_fd=fd
            )
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _path_checked(base: Path, parts: tuple[str, ...]) -> Path:
    """Where descriptors relative to a folder are not available: each part checked by lstat
    (no link) and the whole resolved inside base."""
    path = base
    for part in parts:
        path = path / _check_part(part)
        if path.is_symlink():
            raise RunFileRefused(f"{path} is a link")
    if not path.resolve().is_relative_to(base.resolve()):
        raise RunFileRefused(f"{path} is outside {base}")
    return path


@contextmanager
def run_file_open(base: Path, *parts: str, max_bytes: int) -> Iterator[BinaryIO]:
    """base/parts... for reading: a regular file with one name (no hard link into it from
    elsewhere) of at most `max_bytes`, reached without following any link below `base`.
    Raises OSError (FileNotFoundError, RunFileRefused, ...) otherwise."""
    folders, name = parts[:-1], _check_part(parts[-1])
    if _BY_DESCRIPTOR:
        fd = _dir_open(base, folders)
        try:
            file_fd = os.open(name, os.O_RDONLY | _NOFOLLOW | _NONBLOCK, dir_fd=fd)
        finally:
            os.close(fd)
    else:
        path = _path_checked(base, parts)
        file_fd = os.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_BINARY", 0))
    try:
        info = os.fstat(file_fd)
        if not stat.S_ISREG(info.st_mode):
            raise RunFileRefused(f"{name} is not a regular file")
        if info.st_nlink != 1:
            raise RunFileRefused(f"{name} has other names (a hard link)")
        if info.st_size > max_bytes:
            raise RunFileRefused(f"{name} is larger than {max_bytes} bytes")
        if _NONBLOCK:
            os.set_blocking(file_fd, True)
        f = os.fdopen(file_fd, "rb")
    except BaseException:
        os.close(file_fd)
        raise
    with f:
        yield f


def checkpoints_prune(base: Path, *parts: str, stored: int) -> None:
    """Delete the attempt's stored-already checkpoints (last-<n>.pt, best-<n>.pt) in that one
    folder: those of epochs before `stored`. Later ones stay (their events may not have been
    read yet: the supervisor can be behind the trainer). A link among them is removed itself,
    never what it points to."""

    def older(name: str) -> bool:
        match = CHECKPOINT_NAME.match(name)
        return bool(match) and int(match.group(1)) < stored

    if _BY_DESCRIPTOR:
        fd = _dir_open(base, parts)
        try:
            for name in os.listdir(fd):
                if older(name):
                    os.unlink(name, dir_fd=fd)
        finally:
            os.close(fd)
        return
    folder = _path_checked(base, parts)
    for entry in folder.iterdir():
        if older(entry.name):
            entry.unlink(missing_ok=True)
