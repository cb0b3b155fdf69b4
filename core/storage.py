"""Stored files, by exact key, in the default storage (a local folder or S3): the one place
that knows which of the two it is.

Storages' own `save()` picks another name when the key exists; Kestrel's keys are exact (content
hashes, an attempt's own checkpoint), so files are written here instead: each to a temporary name
beside its key, moved into place once whole, so that no fault (a full disk, a killed process)
leaves part of a file at a key."""

import hashlib
import logging
import os
import shutil
import uuid
from pathlib import Path
from typing import BinaryIO

from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import FileSystemStorage, default_storage

logger = logging.getLogger(__name__)

BLOCK = 1 << 20
TEMP_SUFFIX = ".part"


def storage_is_local() -> bool:
    """Whether stored files are files of this machine (the quick start), not objects in S3."""
    return isinstance(default_storage, FileSystemStorage)  # the lazy proxy reports its class


def storage_local_path(key: str) -> Path | None:
    """The stored file's own path where storage is a local folder; None with S3."""
    return Path(default_storage.path(key)) if storage_is_local() else None


def storage_temp_path(path: Path) -> Path:
    """Where a file bound for `path` is written first: beside it (the same file system, so it
    moves into place in one step), a dot file that ends in TEMP_SUFFIX."""
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}{TEMP_SUFFIX}")


def storage_is_temp_name(name: str) -> bool:
    """Whether a file's name is one storage_temp_path gives (a write not finished, or one a
    killed process left)."""
    return name.startswith(".") and name.endswith(TEMP_SUFFIX)


def _create(path: Path) -> int:
    """Create `path` exclusively; its folder is made only when it is missing (an import stores
    thousands of files in folders that mostly exist already: two system calls saved each)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL
    try:
        return os.open(path, flags, 0o644)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, 0o644)


def _write_new(path: Path, content: bytes | BinaryIO, hashing: bool) -> tuple[int, str | None]:
    """Write `content` into the new file `path`: the bytes written, and their SHA-256 when
    `hashing`. A failed write (ENOSPC, EIO) raises; the caller removes the file."""
    fd = _create(path)
    try:
        if isinstance(content, bytes):
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            return len(content), hashlib.sha256(content).hexdigest() if hashing else None
        digest = hashlib.sha256() if hashing else None
        written = 0
        while block := content.read(BLOCK):
            view = memoryview(block)
            if digest is not None:
                digest.update(view)
            written += len(view)
            while view:
                view = view[os.write(fd, view) :]
        return written, digest.hexdigest() if digest is not None else None
    finally:
        os.close(fd)  # raises too where the file system reports a failed write only here


def _file_problem(path: Path, size: int, sha256: str | None) -> str:
    """What is wrong with the local file at `path` against the size and SHA-256 it should
    have, in words; "" when it has them."""
    try:
        stored = os.stat(path).st_size
    except FileNotFoundError:
        return "missing"
    if stored != size:
        return f"{stored:,} bytes stored, {size:,} expected"
    if sha256 is not None:
        digest = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                while block := f.read(BLOCK):
                    digest.update(block)
        except OSError as e:
            return f"it cannot be read ({e.strerror or type(e).__name__})"
        if digest.hexdigest() != sha256:
            return "the stored bytes are not the ones recorded (their SHA-256 differs)"
    return ""


def storage_check(key: str, *, size: int, sha256: str | None = None) -> str:
    """What is wrong with the stored object at `key` against the size (and, given, the
    SHA-256) its row records, in words: "missing", "0 bytes stored, 12,739 expected", ...;
    "" when it is whole. With `sha256` its bytes are read back, from S3 too."""
    path = storage_local_path(key)
    if path is not None:
        return _file_problem(path, size, sha256)
    if not default_storage.exists(key):
        return "missing"
    stored = default_storage.size(key)
    if stored != size:
        return f"{stored:,} bytes stored, {size:,} expected"
    if sha256 is not None:
        digest = hashlib.sha256()
        with default_storage.open(key, "rb") as f:
            while block := f.read(BLOCK):
                digest.update(block)
        if digest.hexdigest() != sha256:
            return "the stored bytes are not the ones recorded (their SHA-256 differs)"
    return ""


class StoredWriteError(OSError):
    """What was written is not what was to be stored (its size or its hash differs)."""


def storage_put(
    key: str,
    content: bytes | BinaryIO,
    *,
    replace: bool = False,
    size: int | None = None,
    sha256: str | None = None,
) -> bool:
    """Store `content` (bytes, or a file read from where it is, streamed) at exactly `key`.
    True if this call put it there; False when a whole object was there already (kept).

    Expectations: `size` (bytes are held to their length), and the bytes' `sha256`. What is
    written goes to a temporary name beside the key and moves into place only once complete,
    of the expected size and hash (StoredWriteError otherwise): a reader, or a later import,
    never finds part of a file at the key. A failed write (a full disk) removes what it started, and
    raises. On S3 an object is written whole or not at all.

    Without `replace`, an object already at the key is kept only when it has the expected
    size (and, on local storage with `sha256`, hash): content-addressed keys hold the same
    bytes anyway. One that does not (a truncated or 0-byte file) is replaced by these bytes,
    and False is returned all the same: rows may name it, so it is no new file of the
    caller's to remove. A stream of unknown size keeps whatever is at the key. With `replace`,
    readers see the old file or the new one, never half."""
    if isinstance(content, bytes):
        if size is not None and size != len(content):
            raise StoredWriteError(f"{key}: {len(content):,} bytes given, {size:,} expected")
        expected = len(content)
    else:
        expected = size
    path = storage_local_path(key)
    if path is None:
        return _s3_put(key, content, replace=replace, expected=expected)
    if not replace and expected is not None and not _file_problem(path, expected, sha256):
        return False  # stored before (a second import of the same images): a stat, a read
    tmp = storage_temp_path(path)
    try:
        # Bytes were hashed by the caller that names the key; a stream is hashed as it passes.
        hashing = sha256 is not None and not isinstance(content, bytes)
        written, digest = _write_new(tmp, content, hashing)
        if expected is not None and written != expected:
            raise StoredWriteError(f"{key}: {written:,} bytes written, {expected:,} expected")
        if digest is not None and digest != sha256:
            raise StoredWriteError(f"{key}: the bytes written are not those of its SHA-256")
        if replace:
            os.replace(tmp, path)
            return True
        try:
            os.link(tmp, path)  # never over a file: another writer's whole one stays
            return True
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links
            if not path.exists():
                os.replace(tmp, path)
                return True
        if expected is None and sha256 is None:
            return False  # nothing to hold the stored one to
        problem = _file_problem(path, written, sha256)
        if not problem:
            return False
        logger.warning("stored file %s was damaged (%s): replaced", key, problem)
        os.replace(tmp, path)
        return False
    finally:
        tmp.unlink(missing_ok=True)  # moved into place, linked, or not wanted


def _s3_put(key: str, content: bytes | BinaryIO, *, replace: bool, expected: int | None) -> bool:
    """S3 writes an object whole or not at all; one already there is held to its size."""
    repaired = False
    if default_storage.exists(key):
        if not replace:
            stored = default_storage.size(key) if expected is not None else None
            if stored == expected:
                return False
            logger.warning(
                "stored object %s was damaged (%s bytes, %s expected): replaced",
                key,
                stored,
                expected,
            )
            repaired = True
        default_storage.delete(key)
    file = ContentFile(content) if isinstance(content, bytes) else File(content, name=key)
    saved = default_storage.save(key, file)
    if saved != key:  # another writer got there first with the same key: theirs stands
        default_storage.delete(saved)
        return False
    return not repaired


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
