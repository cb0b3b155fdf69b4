"""Stored files, by exact key, in the default storage (a local folder or S3): the one place
that knows which of the two it is.

Storages' own `save()` picks another name when the key exists; Kestrel's keys are exact (content
hashes, an attempt's own checkpoint), so files are written here instead."""

import os
import shutil
import uuid
from pathlib import Path
from typing import BinaryIO

from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, default_storage

BLOCK = 1 << 20


def storage_is_local() -> bool:
    """Whether stored files are files of this machine (the quick start), not objects in S3."""
    return isinstance(default_storage, FileSystemStorage)  # the lazy proxy reports its class


def storage_local_path(key: str) -> Path | None:
    """The stored file's own path where storage is a local folder; None with S3."""
    return Path(default_storage.path(key)) if storage_is_local() else None


def _write(out: BinaryIO, content: bytes | BinaryIO) -> None:
    if isinstance(content, bytes):
        out.write(content)
    else:
        shutil.copyfileobj(content, out, BLOCK)


def _create(path: Path) -> int:
    """Create `path` exclusively; its folder is made only when it is missing (an import stores
    thousands of files in folders that mostly exist already: two system calls saved each)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        return os.open(path, flags, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, 0o644)


def storage_put(key: str, content: bytes | BinaryIO, *, replace: bool = False) -> bool:
    """Store `content` (bytes, or a file read from where it is, streamed) at exactly `key`;
    True if written. Without `replace`, an existing object stays (content-addressed keys hold
    the same bytes anyway); with it, readers see the old file or the new one, never half.

    On the local file system one exclusive create is several times faster for small files
    than storage.save(), which writes in chunks."""
    path = storage_local_path(key)
    if path is not None:
        if replace:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
            try:
                with open(tmp, "wb") as out:
                    _write(out, content)
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
            return True
        try:
            fd = _create(path)
        except FileExistsError:
            return False
        if isinstance(content, bytes):
            try:
                view = memoryview(content)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
        else:
            with os.fdopen(fd, "wb") as out:
                _write(out, content)
        return True
    if default_storage.exists(key):
        if not replace:
            return False
        default_storage.delete(key)
    file = ContentFile(content) if isinstance(content, bytes) else File(content, name=key)
    saved = default_storage.save(key, file)
    if saved != key:  # another writer got there first with the same key: theirs stands
        default_storage.delete(saved)
        return False
    return True


def storage_put_file(key: str, path: Path) -> None:
    """Store the local file at `path` (possibly large) at exactly `key`, replacing what was
    there."""
    with open(path, "rb") as f:
        storage_put(key, f, replace=True)


def storage_get_file(key: str, path: Path, *, link: bool = False) -> None:
    """The stored file at `key` as the local file `path`. With `link`, where storage is a local
    folder on the same file system, `path` is a hard link to it: the same bytes under a second
    name, without copying them (and kept while the link is, should the key be deleted)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    local = storage_local_path(key) if link else None
    if local is not None:
        try:
            os.link(local, path)
            return
        except OSError:
            pass  # another file system: copy
    with default_storage.open(key, "rb") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst, BLOCK)


def storage_exists(key: str) -> bool:
    return default_storage.exists(key)


def storage_delete(key: str) -> None:
    default_storage.delete(key)
