"""Image bytes in storage held to their rows: every Blob's stored file must be the size (and
SHA-256) its row records. `manage.py blobs_check` finds the ones that are not (missing,
truncated, 0 bytes, changed), repairs those a good copy exists of, and marks the rest on the
health page of each dataset that uses them.

A good copy is a file with the blob's SHA-256: in a stored training archive of a dataset
version (training/datasets/*.zip, which hold the stored bytes), or in a folder or zip the
operator names (the original images: their stored form is made again, as the import does, when
their own bytes differ, e.g. a photo turned upright).
"""

import hashlib
import logging
import os
import time
import zipfile
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from django.core.files.storage import default_storage

from core.storage import (
    storage_check,
    storage_is_temp_name,
    storage_local_path,
    storage_put,
)
from datasets.models import Blob, Dataset, HealthFinding, Image
from datasets.services.health import health_stored_damage_mark
from datasets.services.health_checks import Kind
from datasets.services.images import ImageRejected, image_check, looks_like_image

logger = logging.getLogger(__name__)

CHECK_THREADS = 8  # a stat each (local), a HEAD (S3): waiting, not computing
CHUNK = 2000
MAX_COPY_BYTES = 64 * 1024 * 1024  # as the import's largest image
TRAINING_ARCHIVES = "training/datasets"
STALE_TEMP_SECONDS = 3600  # a write still this old was a process killed mid-write


@dataclass(frozen=True)
class BlobDamage:
    blob_id: int
    sha256: str
    size: int
    problem: str  # in words: "missing", "0 bytes stored, 12,739 expected", ...

    @property
    def key(self) -> str:
        return Blob(sha256=self.sha256).storage_key


def blobs_damaged(
    *, hash_check: bool = False, progress: Callable[[int], None] | None = None
) -> tuple[int, list[BlobDamage]]:
    """Every blob's stored file against its row: (blobs checked, the damaged ones). Sizes only
    (a stat each, or a HEAD on S3); with `hash_check`, every file is read and hashed too."""

    def check(row: tuple[int, str, int]) -> BlobDamage | None:
        blob_id, sha256, size = row
        key = Blob(sha256=sha256).storage_key
        problem = storage_check(key, size=size, sha256=sha256 if hash_check else None)
        return BlobDamage(blob_id, sha256, size, problem) if problem else None

    rows = Blob.objects.order_by("pk").values_list("pk", "sha256", "size").iterator(CHUNK)
    checked, damaged, chunk = 0, [], []
    with ThreadPoolExecutor(max_workers=CHECK_THREADS) as pool:
        for row in rows:
            chunk.append(row)
            if len(chunk) >= CHUNK:
                damaged += [d for d in pool.map(check, chunk) if d is not None]
                checked += len(chunk)
                chunk = []
                if progress is not None:
                    progress(checked)
        damaged += [d for d in pool.map(check, chunk) if d is not None]
        checked += len(chunk)
    return checked, damaged


# --- good copies ------------------------------------------------------------------------------

# (name shown, size, read) of each file a source holds
Entry = tuple[str, int, Callable[[], bytes]]


def _zip_entries(zf: zipfile.ZipFile, where: str) -> Iterator[Entry]:
    for info in zf.infolist():
        if info.is_dir() or info.file_size > MAX_COPY_BYTES:
            continue
        yield f"{where}: {info.filename}", info.file_size, lambda info=info: zf.read(info)


def _folder_entries(folder: Path) -> Iterator[Entry]:
    for root, _, names in os.walk(folder):
        for name in sorted(names):
            path = Path(root) / name
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if size <= MAX_COPY_BYTES:
                yield str(path), size, path.read_bytes


def _operator_entries(path: Path) -> Iterator[Entry]:
    if path.is_dir():
        yield from _folder_entries(path)
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            yield from _zip_entries(zf, str(path))
    elif path.is_file():
        yield str(path), path.stat().st_size, path.read_bytes


def _stored_archive_entries() -> Iterator[Entry]:
    """The files of the training archives stored for remote trainers: the stored bytes of a
    version's images, as they were when it was built."""
    try:
        _, names = default_storage.listdir(TRAINING_ARCHIVES)
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in sorted(n for n in names if n.endswith(".zip") and not storage_is_temp_name(n)):
        key = f"{TRAINING_ARCHIVES}/{name}"
        try:
            with default_storage.open(key, "rb") as f, zipfile.ZipFile(f) as zf:
                yield from _zip_entries(zf, key)
        except (OSError, zipfile.BadZipFile) as e:
            logger.warning("stored archive %s cannot be read: %s", key, e)


def blobs_repair(*, damaged: list[BlobDamage], sources: list[Path] = ()) -> dict[int, str]:
    """Store again each damaged blob a good copy is found of: blob id → where the copy was.

    Stored training archives are looked through first, then the `sources` (folders and zip
    files on this machine), reading only files of a size some damaged blob has; in `sources`,
    images of other sizes are checked as an import checks them, for a stored form that is."""
    wanted = {d.sha256: d for d in damaged}
    sizes = {d.size for d in damaged}
    repaired: dict[int, str] = {}

    def store(data: bytes, sha256: str, where: str) -> None:
        d = wanted.pop(sha256)
        storage_put(d.key, data, replace=True, sha256=sha256)
        repaired[d.blob_id] = where
        sizes.clear()
        sizes.update(w.size for w in wanted.values())
        logger.info("blob %s stored again from %s", d.key, where)

    feeds = [(_stored_archive_entries(), False)]
    feeds += [(_operator_entries(Path(p)), True) for p in sources]
    for entries, recheck in feeds:
        for where, size, read in entries:
            if not wanted:
                return repaired
            recheck_this = recheck and looks_like_image(where)
            if size not in sizes and not recheck_this:
                continue
            try:
                data = read()
            except OSError as e:
                logger.warning("%s cannot be read: %s", where, e)
                continue
            if len(data) in sizes and (sha256 := _sha256(data)) in wanted:
                store(data, sha256, where)
            elif recheck_this:
                try:
                    checked = image_check(data)
                except ImageRejected:
                    continue
                if checked.sha256 in wanted:
                    store(checked.data, checked.sha256, where)
    return repaired


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- what the health pages show ---------------------------------------------------------------


def blobs_damage_mark(*, damaged: list[BlobDamage]) -> list[int]:
    """Mark, on the health page of every dataset that uses them, the images whose stored file
    is still damaged; a dataset marked before whose images are whole again is cleared. The ids
    of the datasets marked."""
    problem_of = {d.blob_id: d.problem for d in damaged}
    per_dataset: dict[int, list[tuple[int, str, str]]] = defaultdict(list)
    ids = list(problem_of)
    for start in range(0, len(ids), CHUNK):
        rows = (
            Image.objects.filter(blob_id__in=ids[start : start + CHUNK])
            .order_by("dataset_id", "pk")
            .values_list("dataset_id", "pk", "filename", "blob_id")
        )
        for dataset_id, image_id, filename, blob_id in rows:
            per_dataset[dataset_id].append((image_id, filename, problem_of[blob_id]))
    marked_before = set(
        HealthFinding.objects.filter(kind=Kind.STORED_DAMAGED).values_list("dataset_id", flat=True)
    )
    for dataset in Dataset.objects.filter(pk__in=set(per_dataset) | marked_before).order_by("pk"):
        health_stored_damage_mark(dataset=dataset, damaged=per_dataset.get(dataset.pk, []))
    return sorted(per_dataset)


def stale_temp_files(*, older_than: float = STALE_TEMP_SECONDS) -> list[Path]:
    """Files a write left under a temporary name (its process was killed mid-write) in the
    folders of image bytes and thumbnails, older than `older_than` seconds. Local storage only:
    an S3 object is written whole or not at all."""
    stale = []
    cutoff = time.time() - older_than
    for top in ("blobs", "thumbs"):
        root = storage_local_path(top)
        if root is None or not root.is_dir():
            continue
        for folder in os.scandir(root):
            if not folder.is_dir():
                continue
            for entry in os.scandir(folder.path):
                if storage_is_temp_name(entry.name) and entry.stat().st_mtime < cutoff:
                    stale.append(Path(entry.path))
    return sorted(stale)
