"""Read uploaded archives entry by entry, safely, never extracting under their own names.

A fatal problem (unsafe paths, links, a bomb, too many entries or bytes) raises ArchiveError and
nothing is imported; a single odd entry is skipped by the caller with its reason.
"""

import bz2
import lzma
import stat
import struct
import tarfile
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import BinaryIO

READ_CHUNK = 1 << 20
NESTED_ARCHIVE_SUFFIXES = (".zip", ".tar", ".tgz", ".gz", ".bz2", ".xz", ".7z", ".rar")


class ArchiveError(Exception):
    """The archive as a whole cannot be imported; the message says why."""


class EntryError(Exception):
    """One entry cannot be read; it is skipped and listed."""


@dataclass(frozen=True)
class Limits:
    # COCO's train2017 in YOLO layout is 118,287 images and 117,266 label files: 235,553 entries.
    max_entries: int = 500_000
    # One inflated file read into memory (an image, a label file); a video is copied to a temp
    # file instead, held to max_total_bytes.
    max_entry_bytes: int = 256 * 1024 * 1024
    max_total_bytes: int = 8 * 1024 * 1024 * 1024  # all inflated files
    max_ratio: int = 200  # inflated / compressed, for entries over 1 MiB inflated


@dataclass(frozen=True, slots=True)  # one per entry, up to 500,000: no __dict__
class Entry:
    name: str  # normalised posix path inside the archive
    size: int  # declared inflated size (checked against bytes actually read)


def safe_name(raw: str) -> str:
    """The entry's path, normalised; ArchiveError if it could escape a folder."""
    name = raw.replace("\\", "/")
    if "\x00" in name:
        raise ArchiveError(f"An entry name contains a NUL byte ({raw!r}); nothing was imported.")
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise ArchiveError(
            f"The archive contains an absolute path ({raw!r}); nothing was imported."
        )
    parts = [p for p in PurePosixPath(name).parts if p not in ("", ".")]
    if ".." in parts:
        raise ArchiveError(
            f"The archive contains a path with '..' ({raw!r}); nothing was imported."
        )
    return "/".join(parts)


def is_nested_archive(name: str) -> bool:
    return name.lower().endswith(NESTED_ARCHIVE_SUFFIXES)


class Source:
    """Entries read one by one: an archive, a folder, or uploaded files. Subclasses fill
    `_entries` (name -> Entry, in their natural order) and implement `read`."""

    _entries: dict[str, Entry]
    # Whether two threads may read entries at once (a zip or a folder: yes; a tar's one stream,
    # a video's decoder, uploaded files: no).
    parallel_reads = False

    @property
    def entries(self) -> list[Entry]:
        return list(self._entries.values())

    def read(self, name: str) -> bytes:
        raise NotImplementedError

    def copy_to(self, name: str, out: BinaryIO) -> int:
        """Write the entry's bytes to `out` (a video, copied to a temp file to be decoded);
        sources that can stream do so chunk by chunk. Returns the bytes written."""
        data = self.read(name)
        out.write(data)
        return len(data)

    def iter_read(self, names: list[str]) -> Iterator[tuple[str, bytes | EntryError]]:
        """Read entries in the source's order (sequential for tar); errors are yielded."""
        order = {name: i for i, name in enumerate(self._entries)}
        for name in sorted(names, key=order.__getitem__):
            try:
                yield name, self.read(name)
            except EntryError as e:
                yield name, e

    def close(self) -> None:
        pass


class _Counter:
    """Counts inflated bytes actually read, and stops a bomb as soon as it shows."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self.total = 0
        self._lock = threading.Lock()  # an import reads images and labels on two threads

    def read_all(self, stream: BinaryIO, name: str, compressed: int | None) -> bytes:
        return b"".join(self.chunks(stream, name, compressed))

    def copy(self, stream: BinaryIO, out: BinaryIO, name: str, compressed: int | None) -> int:
        """Into a file, never held in memory: one entry (a video) may be as large as the
        archive's whole limit."""
        size = 0
        for chunk in self.chunks(stream, name, compressed, max_bytes=self.limits.max_total_bytes):
            out.write(chunk)
            size += len(chunk)
        return size

    def chunks(
        self, stream: BinaryIO, name: str, compressed: int | None, *, max_bytes: int | None = None
    ) -> Iterator[bytes]:
        limit = self.limits.max_entry_bytes if max_bytes is None else max_bytes
        size = 0
        while True:
            chunk = stream.read(READ_CHUNK)
            if not chunk:
                break
            size += len(chunk)
            with self._lock:
                self.total += len(chunk)
            if size > limit:
                raise ArchiveError(
                    f"{name!r} inflates past {limit // 2**20} MiB, the "
                    "limit for one file; nothing was imported."
                )
            if self.total > self.limits.max_total_bytes:
                raise ArchiveError(
                    f"The archive inflates past {self.limits.max_total_bytes // 2**20} MiB, "
                    "your plan's limit; nothing was imported."
                )
            if (
                compressed is not None
                and size > 2**20
                and size > self.limits.max_ratio * max(compressed, 1)
            ):
                raise ArchiveError(
                    f"{name!r} inflates more than {self.limits.max_ratio}× (a zip bomb?); "
                    "nothing was imported."
                )
            yield chunk


class Archive(Source):
    """A zip or tar (optionally gzip/bzip2/xz) opened for safe, entry-by-entry reading."""

    @property
    def parallel_reads(self) -> bool:
        return self.kind == "zip"  # zipfile serialises its reads; a tar is one stream

    def __init__(self, fileobj: BinaryIO, limits: Limits | None = None):
        self.fileobj = fileobj
        self.limits = limits or Limits()
        self._counter = _Counter(self.limits)
        fileobj.seek(0)
        if zipfile.is_zipfile(fileobj):
            fileobj.seek(0)
            self.kind = "zip"
            try:
                self._zip = zipfile.ZipFile(fileobj)
            except (zipfile.BadZipFile, OSError) as e:
                raise ArchiveError(
                    f"The zip file is damaged ({e}); nothing was imported."
                ) from None
            self._entries = self._zip_entries()
        else:
            fileobj = self._decompressed(fileobj)
            try:
                self._tar = tarfile.open(fileobj=fileobj, mode="r:")
                members = self._tar.getmembers()
            except (tarfile.TarError, OSError, EOFError) as e:
                raise ArchiveError(
                    f"This is not a zip or tar archive we can read ({e}); nothing was imported."
                ) from None
            self.kind = "tar"
            self._entries = self._tar_entries(members)

    def _decompressed(self, fileobj: BinaryIO) -> BinaryIO:
        """A gzip/bzip2/xz tar, inflated once into a temp file (counted against the limits), so
        entries can be read in any order without decompressing from the start again."""
        fileobj.seek(0)
        magic = fileobj.read(6)
        fileobj.seek(0)
        if magic[:2] == b"\x1f\x8b":
            decomp = zlib.decompressobj(wbits=47)
        elif magic[:3] == b"BZh":
            decomp = bz2.BZ2Decompressor()
        elif magic[:6] == b"\xfd7zXZ\x00":
            decomp = lzma.LZMADecompressor()
        else:
            return fileobj
        out = tempfile.TemporaryFile()
        self._tmp = out
        compressed = inflated = 0
        while chunk := fileobj.read(READ_CHUNK):
            compressed += len(chunk)
            try:
                data = decomp.decompress(chunk)
            except (zlib.error, OSError, EOFError, lzma.LZMAError) as e:
                raise ArchiveError(f"The compressed archive is damaged ({e}).") from None
            inflated += len(data)
            if inflated > self.limits.max_total_bytes:
                raise ArchiveError(
                    f"The archive inflates past {self.limits.max_total_bytes // 2**20} MiB, "
                    "your plan's limit; nothing was imported."
                )
            if inflated > 2**24 and inflated > self.limits.max_ratio * compressed * 4:
                raise ArchiveError("The archive inflates absurdly (a bomb?); nothing was imported.")
            out.write(data)
        out.seek(0)
        return out

    def _check_count(self, n: int) -> None:
        if n > self.limits.max_entries:
            raise ArchiveError(
                f"The archive has {n} entries; the limit is {self.limits.max_entries}. "
                "Nothing was imported."
            )

    def _zip_entries(self) -> dict[str, Entry]:
        infos = self._zip.infolist()
        self._check_count(len(infos))
        self._check_zip_overlap(infos)
        entries: dict[str, Entry] = {}
        self._zip_infos: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise ArchiveError(
                    f"The archive contains a link ({info.filename!r}); nothing was imported."
                )
            name = safe_name(info.filename)
            if info.is_dir() or not name:
                continue
            if info.flag_bits & 0x1:
                raise ArchiveError(f"{name!r} is encrypted; upload an archive without a password.")
            if name in entries:
                raise ArchiveError(f"The archive names {name!r} twice; nothing was imported.")
            entries[name] = Entry(name=name, size=info.file_size)
            self._zip_infos[name] = info
        return entries

    def _check_zip_overlap(self, infos: list[zipfile.ZipInfo]) -> None:
        """Refuse archives whose entries share bytes (the overlapping-entry zip bomb)."""
        spans = []
        fp = self.fileobj
        for info in infos:
            fp.seek(info.header_offset)
            header = fp.read(30)
            if len(header) < 30 or header[:4] != b"PK\x03\x04":
                raise ArchiveError(
                    f"The zip entry {info.filename!r} is damaged; nothing was imported."
                )
            name_len, extra_len = struct.unpack("<HH", header[26:30])
            end = info.header_offset + 30 + name_len + extra_len + info.compress_size
            spans.append((info.header_offset, end, info.filename))
        spans.sort()
        for (_, end_a, name_a), (start_b, _, name_b) in zip(spans, spans[1:], strict=False):
            if start_b < end_a:
                raise ArchiveError(
                    f"The zip entries {name_a!r} and {name_b!r} overlap (a zip bomb?); "
                    "nothing was imported."
                )

    def _tar_entries(self, members: list[tarfile.TarInfo]) -> dict[str, Entry]:
        self._check_count(len(members))
        entries: dict[str, Entry] = {}
        self._tar_members: dict[str, tarfile.TarInfo] = {}
        for member in members:
            if member.issym() or member.islnk():
                raise ArchiveError(
                    f"The archive contains a link ({member.name!r}); nothing was imported."
                )
            name = safe_name(member.name)
            if member.isdir() or not name:
                continue
            if not member.isfile():
                raise ArchiveError(
                    f"The archive contains a device or special file ({member.name!r}); "
                    "nothing was imported."
                )
            if name in entries:
                raise ArchiveError(f"The archive names {name!r} twice; nothing was imported.")
            entries[name] = Entry(name=name, size=member.size)
            self._tar_members[name] = member
        return entries

    def read(self, name: str) -> bytes:
        """The entry's bytes, counting what is really inflated against the limits."""
        if self.kind == "zip":
            info = self._zip_infos[name]
            try:
                with self._zip.open(info) as stream:
                    data = self._counter.read_all(stream, name, info.compress_size)
            except (zipfile.BadZipFile, OSError, EOFError) as e:
                raise EntryError(f"damaged in the archive ({e})") from None
            if len(data) != info.file_size:
                raise EntryError("its size differs from what the archive declares")
            return data
        member = self._tar_members[name]
        stream = self._tar.extractfile(member)
        if stream is None:
            raise EntryError("not a regular file")
        try:
            return self._counter.read_all(stream, name, None)
        except (tarfile.TarError, OSError, EOFError) as e:
            raise EntryError(f"damaged in the archive ({e})") from None

    def copy_to(self, name: str, out: BinaryIO) -> int:
        """As `read`, a chunk at a time into `out`."""
        if self.kind == "zip":
            info = self._zip_infos[name]
            try:
                with self._zip.open(info) as stream:
                    size = self._counter.copy(stream, out, name, info.compress_size)
            except (zipfile.BadZipFile, OSError, EOFError) as e:
                raise EntryError(f"damaged in the archive ({e})") from None
            if size != info.file_size:
                raise EntryError("its size differs from what the archive declares")
            return size
        stream = self._tar.extractfile(self._tar_members[name])
        if stream is None:
            raise EntryError("not a regular file")
        try:
            return self._counter.copy(stream, out, name, None)
        except (tarfile.TarError, OSError, EOFError) as e:
            raise EntryError(f"damaged in the archive ({e})") from None

    def close(self) -> None:
        if self.kind == "zip":
            self._zip.close()
        else:
            self._tar.close()
        if getattr(self, "_tmp", None) is not None:
            self._tmp.close()


class FolderSource(Source):
    """A folder on the server's disk, read with the same rules as an archive (no links)."""

    kind = "folder"
    parallel_reads = True

    def __init__(self, root, limits: Limits | None = None, *, only: str | None = None):
        """`only`: read just this one file of the folder (a single image), without listing it."""
        from pathlib import Path

        self.root = Path(root)
        self.limits = limits or Limits()
        self._counter = _Counter(self.limits)
        found: dict[str, Entry] = {}
        paths = [self.root / only] if only else sorted(self.root.rglob("*"))
        for path in paths:
            rel = path.relative_to(self.root).as_posix()
            if path.is_symlink():
                raise ArchiveError(f"The folder contains a link ({rel!r}); nothing was imported.")
            if path.is_file():
                found[rel] = Entry(name=rel, size=path.stat().st_size)
                if len(found) > self.limits.max_entries:
                    raise ArchiveError(
                        f"The folder has more than {self.limits.max_entries} files; "
                        "nothing was imported."
                    )
        self._entries = found

    def read(self, name: str) -> bytes:
        try:
            with (self.root / name).open("rb") as stream:
                return self._counter.read_all(stream, name, None)
        except OSError as e:
            raise EntryError(f"unreadable ({e.strerror})") from None

    def copy_to(self, name: str, out: BinaryIO) -> int:
        try:
            with (self.root / name).open("rb") as stream:
                return self._counter.copy(stream, out, name, None)
        except OSError as e:
            raise EntryError(f"unreadable ({e.strerror})") from None
