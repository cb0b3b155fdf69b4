"""Import an upload (or a folder or archive on the server's disk) into a dataset.

All rows of one import are written in one transaction: a fatal problem leaves the dataset as it
was. Image bytes are stored once per SHA-256 (byte-identical images are rows of their own sharing
one blob); bytes stored by a failed import are removed again.
"""

import dataclasses
import errno
import json
import logging
import os
import tempfile
import threading
import time
import traceback
import unicodedata
from collections import Counter, deque
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
from django.conf import settings
from django.core.cache import cache
from django.core.files.storage import default_storage
from django.db import connection, transaction
from django.utils import timezone

from core.leases import (
    Lease,
    LeaseLost,
    LongJob,
    database_faults,
    db_connection_reset,
    lease_row,
    lease_take,
    lease_work,
)
from core.storage import storage_is_local, storage_put
from core.tasks import task_send
from datasets.models import (
    PIXEL_TASKS,
    Blob,
    Dataset,
    DatasetClass,
    Image,
    Import,
    ImportStatus,
    Label,
    LabelStatus,
    PixelMap,
    Task,
    UploadChunk,
)
from datasets.services.archive import (
    Archive,
    ArchiveError,
    Entry,
    EntryError,
    FolderSource,
    Limits,
    Source,
    is_nested_archive,
    safe_name,
)
from datasets.services.format_detect import detect_and_parse
from datasets.services.formats import (
    LABEL_SUFFIXES,
    MAX_META_FILE_BYTES,
    SKIP_FILE,
    SKIP_IMAGE,
    SKIP_LABEL,
    SKIP_LABEL_FILE,
    LabelFileError,
    Parsed,
    ParsedImage,
    labels_from_pixels,
)
from datasets.services.images import CheckedImage, ImageRejected, image_check, looks_like_image
from datasets.services.import_report import (
    ALREADY_IN_DATASET,
    CLASSES_KEPT,
    full_report_save,
    labels_found,
    not_imported,
    warning_for,
)
from datasets.services.pixel_formats import MAX_MAP_BYTES, map_read
from datasets.services.pixel_maps import (
    PixelMapError,
    StoredMap,
    labelled_count,
    pixel_map_store,
)
from datasets.services.video import VideoFrames, is_video, video_fps_check
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

logger = logging.getLogger(__name__)

BATCH = 500
# Archive reads: one system call per MiB, not per 8 KiB entry (each call gives up the GIL to
# the check threads and waits to take it back).
READ_BUFFER = 2**20
# Checking decodes (CPU, GIL released) and storing writes (I/O): twice the cores keeps both busy.
CHECK_THREADS = max(4, min(16, 2 * (os.cpu_count() or 2)))
# From this many images on, checking runs in processes (starting them costs ~50 ms).
PROCESS_MIN_IMAGES = 500
CHECK_PROCESSES = max(1, min(16, os.cpu_count() or 1))
# In flight: WINDOW batches a process at most (16 MiB a process at most). Results are taken in
# order, so one slow batch holds the next ones' results: at 3 a process the two processes were
# busy 1.5 cores of 2 (10,000 images checked in 5.2 s), at 8 they keep both (4.5 s).
BATCH_IMAGES, BATCH_BYTES, WINDOW = 64, 2 * 2**20, 8
PREFETCH_AHEAD = 20_000
PROGRESS_SECONDS = 0.5  # how often a running import says how far it is (one Redis write)
MAX_REPORT_LINES = 1000
MAX_NOTES = 50
MAX_IMAGE_BYTES = 64 * 1024 * 1024
META_SUFFIXES = LABEL_SUFFIXES  # what the parsers read (.ndjson, CVAT's .names and .data too)
IGNORED = ("__macosx/", ".ds_store", "thumbs.db", "desktop.ini")
_BIDI_AND_CONTROL = {"Cc", "Cf"}


def _progress_key(import_id: int) -> str:
    return f"import-progress:{import_id}"


def _progress(import_id: int, phase: str, done: int = 0, total: int = 0) -> None:
    cache.set(
        _progress_key(import_id),
        {"phase": phase, "done": done, "total": total, "at": time.time()},
        24 * 3600,
    )


def import_progress(imp: Import) -> dict:
    """Where a running import is: read from Redis while its rows are not yet committed."""
    if imp.is_final:
        return {
            "phase": imp.get_status_display(),
            "done": imp.progress_done,
            "total": imp.progress_total,
        }
    return cache.get(_progress_key(imp.pk)) or {
        "phase": imp.get_status_display(),
        "done": imp.progress_done,
        "total": imp.progress_total,
    }


def display_name(name: str) -> str:
    """The file's own name, without control or bidi characters, at most 255 characters."""
    base = name.rsplit("/", 1)[-1]
    clean = "".join(ch for ch in base if unicodedata.category(ch) not in _BIDI_AND_CONTROL)
    return (clean or "unnamed")[:255]


def _limits_for(dataset: Dataset) -> Limits:
    plan = dataset.workspace.plan
    return Limits(max_total_bytes=plan.max_import_inflated_bytes)


# --- sources ----------------------------------------------------------------------------------


class _UploadedFiles(Source):
    """Several uploaded files (images with their label files), read chunk by chunk."""

    kind = "files"

    def __init__(self, imp: Import, files: list[dict], chunks: dict[int, list[str]]):
        self._files, self._entries = {}, {}
        for index, spec in enumerate(files):
            try:  # a dropped folder keeps its layout (images/val/x.jpg names the split)
                name = safe_name(spec["name"]) or display_name(spec["name"])
            except ArchiveError:
                name = display_name(spec["name"])
            if name in self._entries:
                name = f"{index}-{name}"
            self._entries[name] = Entry(name=name, size=spec["size"])
            self._files[name] = chunks.get(index, [])

    def read(self, name: str) -> bytes:
        entry = self._entries[name]
        if entry.size > MAX_META_FILE_BYTES:
            raise EntryError("larger than a single file may be")
        data = b"".join(default_storage.open(key).read() for key in self._files[name])
        if len(data) != entry.size:
            raise EntryError("its upload is incomplete")
        return data

    def copy_to(self, name: str, out) -> int:
        """A video, chunk by chunk (the upload's size is already within the plan's limit)."""
        size = 0
        for key in self._files[name]:
            with default_storage.open(key) as part:
                while block := part.read(1 << 20):
                    out.write(block)
                    size += len(block)
        if size != self._entries[name].size:
            raise EntryError("its upload is incomplete")
        return size


def _with_videos(source: Source, imp: Import) -> Source:
    """`source`, with each video in it presented as the frames sampled from it."""
    if not any(is_video(e.name) for e in source.entries):
        return source
    plan = imp.dataset.workspace.plan
    return VideoFrames(
        source,
        fps=imp.video_fps,
        max_frames=plan.max_video_frames,
        progress=lambda done, total: _progress(imp.pk, "reading videos", done, total),
    )


def _open_upload(imp: Import, limits: Limits):
    chunks: dict[int, list[str]] = {}
    for chunk in UploadChunk.objects.filter(upload=imp).order_by("file_index", "chunk_index"):
        chunks.setdefault(chunk.file_index, []).append(chunk.storage_key)
    files = imp.files or [{"name": imp.filename, "size": imp.total_size}]
    single = files[0]["name"] if len(files) == 1 else None
    if single is not None and not looks_like_image(single) and not is_video(single):
        # One archive: assemble its chunks into a local temp file (zip needs to seek).
        tmp = tempfile.TemporaryFile()
        for key in chunks.get(0, []):
            with default_storage.open(key) as part:
                while block := part.read(1 << 20):
                    tmp.write(block)
        if tmp.tell() != files[0]["size"]:
            raise ArchiveError("The upload is incomplete; send the missing parts and try again.")
        try:
            return _with_videos(Archive(tmp, limits), imp)
        except ArchiveError:
            tmp.close()
            raise
    return _with_videos(_UploadedFiles(imp, files, chunks), imp)


# --- the import -------------------------------------------------------------------------------


class _Run:
    def __init__(self, dataset: Dataset, imp: Import, source, lease: Lease):
        self.dataset, self.imp, self.source, self.lease = dataset, imp, source, lease
        self.skipped: list[tuple[str, str, str]] = []  # file, reason, SKIP_* kind
        self.writer = _BlobWriter()  # stores bytes; its list is removed again on failure
        self.unthumbnailed_blob_ids: list[int] = []
        self.rows = _RowWriter(dataset)
        self.prefetch: _Prefetch | None = None
        self.maps: _MapReading | None = None

    def _read_small(self, name: str, limit: int) -> bytes:
        size = self._sizes[name]
        if size > limit:
            raise LabelFileError(f"larger than {limit // 2**20} MiB")
        try:
            return self.source.read(name)
        except EntryError as e:
            raise LabelFileError(str(e)) from None

    def run(self) -> dict:
        started = time.monotonic()
        _progress(self.imp.pk, "reading the archive")
        entries = self.source.entries
        self._sizes = {e.name: e.size for e in entries}
        usable = []
        for entry in entries:
            low = entry.name.lower()
            if any(low.startswith(p) or low.endswith(p) or f"/{p}" in low for p in IGNORED):
                continue
            if low.rsplit("/", 1)[-1].startswith("."):
                continue
            if is_nested_archive(low):
                self.skipped.append((entry.name, "nested archive (not unpacked)", SKIP_FILE))
            elif looks_like_image(low) or low.endswith(META_SUFFIXES):
                usable.append(entry.name)
            else:
                self.skipped.append((entry.name, "unsupported file", SKIP_FILE))
        existing = list(self.dataset.classes.order_by("index").values_list("name", flat=True))
        parsed = None
        to_check = [n for n in usable if looks_like_image(n)]
        if self.dataset.task in PIXEL_TASKS:
            # Masks and depth maps are PNGs too, never images of the dataset: the layout (read
            # from names and a few small files) says which entries are the images.
            parsed = detect_and_parse(
                usable, self._read_small, task=self.dataset.task, classes=existing
            )
            to_check = [n for n in to_check if n in parsed.images]
        if self.source.parallel_reads:
            # Images are checked and stored while this thread reads the labels.
            self.prefetch = _Prefetch(self.source, to_check, self.writer)
        try:
            if parsed is None:
                parsed = detect_and_parse(
                    usable, self._read_small, task=self.dataset.task, classes=existing
                )
            self.skipped += parsed.skipped
            self.skipped += getattr(self.source, "skipped", [])
            with transaction.atomic():
                report = self._write(parsed, existing)
                self._unused_removed()
                report["seconds"] = round(time.monotonic() - started, 2)
                full_report_save(self.imp.pk, report, self.skipped)
                # The import's outcome commits with its rows, and only under this worker's lease:
                # a worker that was given up on rolls back instead of importing a second time.
                imported = report["images_imported"]
                if not self.lease.finish(
                    ImportStatus.SUCCEEDED,
                    report=report,
                    format=report["format"],
                    error="",
                    progress_done=imported,
                    progress_total=imported,
                ):
                    raise LeaseLost(f"import {self.imp.pk}: the lease is gone, its rows roll back")
        finally:
            if self.prefetch is not None:
                self.prefetch.stop()
        return report

    def _class_map(self, parsed: Parsed, existing: list[str]) -> list[DatasetClass | None]:
        dataset = self.dataset
        if not existing:
            DatasetClass.objects.bulk_create(
                DatasetClass(dataset=dataset, index=i, name=n[:100])
                for i, n in enumerate(parsed.class_names)
            )
        by_name = {c.name: c for c in DatasetClass.objects.filter(dataset=dataset)}
        fields = []
        if parsed.keypoint_shape and not dataset.keypoint_shape:
            dataset.keypoint_shape = parsed.keypoint_shape
            fields.append("keypoint_shape")
        if fields:
            dataset.save(update_fields=[*fields, "updated_at"])
        return [by_name.get(n[:100]) for n in parsed.class_names]

    def _write(self, parsed: Parsed, existing: list[str]) -> dict:
        dataset = (
            Dataset.objects.select_for_update()
            .select_related("workspace__plan")
            .get(pk=self.dataset.pk)
        )
        self.dataset = self.rows.dataset = dataset
        classes = self._class_map(parsed, existing)
        if parsed.pixels is not None:
            self.maps = _MapReading(dataset, parsed, classes)
        # Copies of one file within an import are images of their own (each with its labels
        # and split, the bytes stored once); an image already in the dataset under the same
        # name and bytes is not imported again, so importing an archive twice does not double it.
        already = set(Image.objects.filter(dataset=dataset).values_list("filename", "blob__sha256"))
        order = [name for name in (e.name for e in self.source.entries) if name in parsed.images]
        total = len(order)
        counts = Counter()
        per_class = Counter()
        splits = Counter()
        pending: list[tuple[ParsedImage, object]] = []
        duplicates = duplicate_labels = 0
        said = time.monotonic()
        if self.prefetch is not None:
            images = self.prefetch.results(order)
        else:
            images = _checked_images(self.source.iter_read(order), self.writer, total=total)
        for i, (name, checked) in enumerate(images, 1):
            if isinstance(checked, str):
                self.skipped.append((name, checked, SKIP_IMAGE))
            elif (display_name(name), checked.sha256) in already:
                duplicates += 1
                duplicate_labels += len(parsed.images[name].labels)
                self.skipped.append((name, ALREADY_IN_DATASET, SKIP_IMAGE))
            else:
                pending.append((parsed.images[name], checked))
                if len(pending) >= BATCH:
                    self._flush(pending, classes, counts, per_class, splits)
                    pending = []
            if i == total or time.monotonic() - said >= PROGRESS_SECONDS:
                _progress(self.imp.pk, "importing images", i, total)
                said = time.monotonic()
        self._flush(pending, classes, counts, per_class, splits)
        _progress(self.imp.pk, "saving", total, total)
        created = [] if existing else [c.name for c in classes if c is not None]
        if self.maps is not None:
            created += self.maps.classes_made(existing=bool(existing))
        empty = [name for name in created if not per_class[name]]
        found = labels_found(self.skipped, counts["labels"])
        return {
            "format": parsed.format,
            "notes": parsed.notes[:MAX_NOTES],
            "images_imported": counts["images"],
            "labels_imported": counts["labels"],
            "labels_found": found,
            "labels_per_class": dict(per_class),
            "splits": dict(splits),
            "duplicates": duplicates,
            "skipped_count": len(self.skipped),
            "skipped": _listed(self.skipped),
            "not_imported": not_imported(self.skipped),
            # Declared (a data.yaml's or COCO file's list) but of no label: one line of the
            # summary, not a loss.
            "classes_without_labels": empty[:CLASSES_KEPT],
            "classes_without_labels_count": len(empty),
            "warning": warning_for(
                images_imported=counts["images"],
                labels_imported=counts["labels"],
                skipped=self.skipped,
                duplicate_labels=duplicate_labels,
            ),
            "classes": [c.name for c in DatasetClass.objects.filter(dataset=dataset)],
            **({"maps_imported": counts["maps"]} if self.maps is not None else {}),
            **({"depth_scale": dataset.depth_scale} if dataset.task == Task.DEPTH else {}),
        }

    def _flush(self, pending, classes, counts, per_class, splits) -> None:
        if not pending:
            return
        shas = [checked.sha256 for _, checked in pending]
        blob_ids = dict(Blob.objects.filter(sha256__in=shas).values_list("sha256", "id"))
        new_blobs = {}
        for _, checked in pending:
            if checked.sha256 not in blob_ids:
                new_blobs.setdefault(checked.sha256, checked)
        blob_ids.update(self.rows.blobs(list(new_blobs.values())))
        # Another import may have stored the same bytes meanwhile: their row is the one.
        if missing := [sha for sha in new_blobs if sha not in blob_ids]:
            blob_ids.update(Blob.objects.filter(sha256__in=missing).values_list("sha256", "id"))
        # Thumbnails are made as images are checked; the worker makes any that failed to be.
        self.unthumbnailed_blob_ids += [
            blob_ids[sha] for sha, checked in new_blobs.items() if not checked.has_thumbnail
        ]
        stored_maps = self._maps_for(pending)
        map_blob_ids = self._map_blobs(stored_maps)
        images, labels = [], []  # image rows; labels as (index in images, class, kind, data)
        maps = []  # (index in images, map blob id, stats)
        for parsed_image, checked in pending:
            own = self._labels_for(parsed_image, checked, classes)
            count = len(own)
            stored = stored_maps.get(parsed_image.name)
            if stored is not None:
                count = labelled_count(stored.stats, task=self.dataset.task)
                maps.append((len(images), map_blob_ids[stored.sha256], stored.stats))
                for index in stored.stats if self.dataset.task == Task.SEMANTIC else ():
                    per_class[self.maps.class_name(int(index))] += 1
            status = LabelStatus.LABELLED if count else LabelStatus.UNLABELLED
            filename = display_name(parsed_image.name)
            image = (blob_ids[checked.sha256], filename, parsed_image.split, count, status)
            images.append(image)
            splits[parsed_image.split] += 1
            for cls, kind, data in own:
                labels.append((len(images) - 1, cls, kind, data))
                per_class[cls.name] += 1
        ids = self.rows.write(images, labels)
        if maps:
            PixelMap.objects.bulk_create(
                PixelMap(image_id=ids[index], blob_id=blob_id, stats=stats)
                for index, blob_id, stats in maps
            )
        counts["images"] += len(images)
        counts["labels"] += len(labels) + len(maps)
        counts["maps"] += len(maps)

    def _maps_for(self, pending) -> dict[str, StoredMap]:
        """Each pending image's mask or depth map read, checked and stored (by image name), on
        threads (decoding and encoding PNGs release the GIL); one that cannot be taken is in
        the report with why, and its image imported without."""
        if self.maps is None:
            return {}
        task, scale = self.dataset.task, self.dataset.depth_scale

        def one(item) -> tuple[str, str, object]:
            parsed_image, checked = item
            try:
                data = self._read_small(parsed_image.mask, MAX_MAP_BYTES)
                array = self.maps.read(data, size=(checked.width, checked.height))
            except (LabelFileError, PixelMapError) as e:
                return parsed_image.name, parsed_image.mask, str(e)
            return (
                parsed_image.name,
                parsed_image.mask,
                self.writer.store_map(array, task=task, depth_scale=scale),
            )

        with_maps = [item for item in pending if item[0].mask is not None]
        out = {}
        with ThreadPoolExecutor(max_workers=CHECK_THREADS) as pool:
            for image_name, map_name, result in pool.map(one, with_maps):
                if isinstance(result, str):
                    why = f"{result} (its image is imported unlabelled)"
                    self.skipped.append((map_name, why, SKIP_LABEL_FILE))
                else:
                    out[image_name] = result
                    self.maps.seen(result.stats)
        return out

    def _map_blobs(self, stored_maps: dict[str, StoredMap]) -> dict[str, int]:
        """Blob rows of the maps (a map's PNG is content-addressed like an image): sha → id."""
        if not stored_maps:
            return {}
        shas = {m.sha256 for m in stored_maps.values()}
        ids = dict(Blob.objects.filter(sha256__in=shas).values_list("sha256", "id"))
        new = {m.sha256: m for m in stored_maps.values() if m.sha256 not in ids}
        ids.update(self.rows.blobs(list(new.values())))
        if missing := [sha for sha in shas if sha not in ids]:
            ids.update(Blob.objects.filter(sha256__in=missing).values_list("sha256", "id"))
        return ids

    def _labels_for(self, parsed_image: ParsedImage, checked, classes) -> list[tuple]:
        """The labels to write for one image, mapped to the dataset's classes."""
        if not parsed_image.labels:
            return []
        size = (checked.width, checked.height)
        if parsed_image.declared_size and parsed_image.declared_size != size:
            dw, dh = parsed_image.declared_size
            self.skipped.append(
                (
                    parsed_image.name,
                    f"labels drawn for {dw}×{dh} but the image is {size[0]}×{size[1]}",
                    SKIP_LABEL,
                )
            )
            return []
        labels = parsed_image.labels
        if parsed_image.in_pixels:
            dims = (self.dataset.keypoint_shape or [0, 3])[1]
            labels, refused = labels_from_pixels(labels, *size, kpt_dims=dims)
            self.skipped += [(parsed_image.name, reason, SKIP_LABEL) for reason in refused]
        out = []
        for label in labels:
            cls = classes[label.cls] if label.cls < len(classes) else None
            if cls is None:
                self.skipped.append(
                    (parsed_image.name, "label of a class this dataset lacks", SKIP_LABEL)
                )
                continue
            out.append((cls, label.kind, label.data))
        return out

    def _unused_removed(self) -> None:
        """Bytes checked ahead for images the layout then left out (and no row has): removed."""
        unused = set(self.prefetch.unused()) if self.prefetch else set()
        for key in [k for k in self.writer.written if _key_sha(k) in unused]:
            if not Blob.objects.filter(sha256=_key_sha(key)).exists():
                default_storage.delete(key)
                self.writer.written.remove(key)

    def cleanup_failed(self) -> None:
        """After a rollback, remove bytes (and thumbnails) this import stored that no blob row
        names."""
        for key in self.writer.written:
            if not Blob.objects.filter(sha256=_key_sha(key)).exists():
                default_storage.delete(key)


def _key_sha(key: str) -> str:
    """The SHA-256 a stored key holds the bytes or thumbnail of."""
    return key.rsplit("/", 1)[-1].split(".", 1)[0]


class _RowWriter:
    """Writes an import's blob, image and label rows, in the import's transaction.

    On PostgreSQL with COPY (psycopg 3, which escapes every value: names may hold tabs,
    newlines, backslashes, quotes), the images' ids taken from their sequence first so the
    labels can name them: 0.38 s of the import's CPU for 10,000 images, 30,000 labels and
    their blobs, against 2.85 s with model instances and bulk_create. Elsewhere
    (SQLite) with bulk_create. Columns not given here get their model default, so a column
    added to Image or Label later is written too.
    """

    IMAGE_COLUMNS = ("id", "dataset_id", "blob_id", "filename", "split", "label_count", "status")
    LABEL_COLUMNS = ("image_id", "dataset_class_id", "kind", "data")

    def __init__(self, dataset: Dataset):
        self.dataset = dataset
        self.copy = connection.vendor == "postgresql"
        if self.copy:
            now = timezone.now()
            self._image_sql, self._image_rest = _copy_statement(Image, self.IMAGE_COLUMNS, now)
            self._label_sql, self._label_rest = _copy_statement(Label, self.LABEL_COLUMNS, now)
            self._blob_sql, self._blob_rest = _blob_insert_statement(self.BLOB_COLUMNS, now)

    def write(self, images: list[tuple], labels: list[tuple]) -> list[int]:
        """The image rows' ids, in the order given."""
        if not images:
            return []
        if not self.copy:
            return self._bulk_create(images, labels)
        with connection.cursor() as wrapper:
            cursor = wrapper.cursor  # psycopg's own, in Django's transaction
            cursor.execute(
                "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
                [Image._meta.db_table, len(images)],
            )
            ids = sorted(row[0] for row in cursor.fetchall())
            dataset_id, rest = self.dataset.pk, self._image_rest
            with cursor.copy(self._image_sql) as copy:
                for image_id, row in zip(ids, images, strict=True):
                    copy.write_row((image_id, dataset_id, *row, *rest))
            if labels:
                rest, dumps = self._label_rest, _JSON.encode
                with cursor.copy(self._label_sql) as copy:
                    for index, cls, kind, data in labels:
                        copy.write_row((ids[index], cls.pk, kind, dumps(data), *rest))
        return ids

    BLOB_COLUMNS = ("sha256", "size", "content_type", "width", "height", "has_thumbnail")

    def blobs(self, new: list[CheckedImage]) -> dict[str, int]:
        """Blob rows for these images, but where one has the same bytes already: sha256 → id."""
        if not new:
            return {}
        if not self.copy:
            Blob.objects.bulk_create(
                [Blob(**{c: getattr(checked, c) for c in self.BLOB_COLUMNS}) for checked in new],
                ignore_conflicts=True,
            )
            return {}
        # One statement for the batch: its columns as arrays, ON CONFLICT for bytes another
        # import stored meanwhile (COPY cannot skip those).
        with connection.cursor() as wrapper:
            wrapper.cursor.execute(
                self._blob_sql,
                [*self._blob_rest, *([getattr(c, k) for c in new] for k in self.BLOB_COLUMNS)],
            )
            return dict(wrapper.cursor.fetchall())

    def _bulk_create(self, images: list[tuple], labels: list[tuple]) -> list[int]:
        rows = [
            Image(
                dataset=self.dataset,
                blob_id=blob_id,
                filename=filename,
                split=split,
                label_count=label_count,
                status=status,
            )
            for blob_id, filename, split, label_count, status in images
        ]
        Image.objects.bulk_create(rows)
        Label.objects.bulk_create(
            (
                Label(image=rows[index], dataset_class=cls, kind=kind, data=data)
                for index, cls, kind, data in labels
            ),
            batch_size=2000,
        )
        return [row.pk for row in rows]


_JSON = json.JSONEncoder()  # as JSONField stores it


def _copy_statement(model, given: tuple[str, ...], now) -> tuple[str, tuple]:
    """COPY of `model`'s rows: the `given` columns, then every other concrete column with the
    value its model default gives (auto_now fields: `now`)."""
    columns, rest = list(given), []
    for f in model._meta.concrete_fields:
        if f.column in given or f.primary_key:
            continue
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            value = now
        else:  # as a model instance would have it ("" for text without a default)
            value = f.get_db_prep_save(f.get_default(), connection)
            if value is None and not f.null:
                raise ValueError(f"{model.__name__}.{f.name} has no default to copy rows with")
        columns.append(f.column)
        rest.append(value)
    quote = connection.ops.quote_name
    names = ", ".join(quote(c) for c in columns)
    return f"COPY {quote(model._meta.db_table)} ({names}) FROM STDIN", tuple(rest)


def _blob_insert_statement(given: tuple[str, ...], now) -> tuple[str, list]:
    """INSERT of Blob rows from one array per `given` column (the other columns: their model
    default), skipping bytes already stored; and the parameters of those defaults, which come
    before the arrays'."""
    fields = {f.column: f for f in Blob._meta.concrete_fields if not f.primary_key}
    quote = connection.ops.quote_name
    arrays = ", ".join(f"%s::{fields[c].db_type(connection)}[]" for c in given)
    rest_columns, casts, values = [], [], []
    for column, f in fields.items():
        if column in given:
            continue
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            value = now
        else:
            value = f.get_db_prep_save(f.get_default(), connection)
        rest_columns.append(column)
        casts.append(f"%s::{f.db_type(connection)}")
        values.append(value)
    columns = ", ".join(quote(c) for c in (*given, *rest_columns))
    sql = (
        f"INSERT INTO {quote(Blob._meta.db_table)} ({columns}) "  # noqa: S608
        f"SELECT u.*, {', '.join(casts)} FROM unnest({arrays}) AS u "
        f"ON CONFLICT ({quote('sha256')}) DO NOTHING RETURNING {quote('sha256')}, {quote('id')}"
    )
    return sql, values


def _listed(skipped: list[tuple[str, str, str]]) -> list[dict]:
    return [{"file": f, "reason": r, "kind": k} for f, r, k in skipped[:MAX_REPORT_LINES]]


class _BlobWriter:
    """Stores each new image's bytes once, from the checking threads; remembers what it wrote."""

    def __init__(self):
        self._lock = threading.Lock()
        self._claimed: set[str] = set()
        self.written: list[str] = []

    def store(self, checked: CheckedImage) -> bool:
        """Its bytes and thumbnail stored (by this writer, an earlier import, or another
        image of this one); True if the thumbnail was."""
        sha = checked.sha256
        blob = Blob(sha256=sha)  # for its keys
        key = blob.storage_key
        with self._lock:
            if sha in self._claimed:
                return bool(checked.thumbnail)
            self._claimed.add(sha)
        # A file at the key is kept only when it is whole (its size and hash): a 0-byte file
        # an import left on a full disk is written again, not trusted.
        if storage_put(key, checked.data, sha256=sha):
            with self._lock:
                self.written.append(key)
        if not checked.thumbnail:
            return False
        if storage_put(blob.thumbnail_key, checked.thumbnail):
            with self._lock:
                self.written.append(blob.thumbnail_key)
        return True

    def store_map(self, array, *, task: str, depth_scale: float | None) -> StoredMap:
        """A mask's or depth map's PNG and overlay stored once (pixel_map_store), what this
        import wrote kept so a failed import removes it."""
        stored = pixel_map_store(array, task=task, depth_scale=depth_scale)
        with self._lock:
            self.written += stored.written
        return stored


class _MapReading:
    """How one import reads its masks or depth maps into the dataset: the layout's values
    mapped to the dataset's class indexes (matched by name), and the depth scale."""

    def __init__(self, dataset: Dataset, parsed: Parsed, classes: list[DatasetClass | None]):
        self.dataset, self.layout, self.task = dataset, parsed.pixels, dataset.task
        self.from_maps = self.layout.classes_from_maps and not classes
        self.largest = -1  # classes made from the maps: the largest index seen
        self.names = {c.index: c.name for c in DatasetClass.objects.filter(dataset=dataset)}
        self.parsed_count = len(parsed.class_names)
        self.remap = None  # parsed class index → the dataset's, where they differ
        self.lacking: dict[int, str] = {}
        if self.task == Task.SEMANTIC and not self.from_maps:
            lut = np.arange(256, dtype=np.uint8)
            for i, cls in enumerate(classes):
                if cls is None:
                    self.lacking[i] = parsed.class_names[i]
                else:
                    lut[i] = cls.index
            if not np.array_equal(lut, np.arange(256)):
                self.remap = lut
        if self.task == Task.DEPTH:
            self._depth_scale_take(parsed)

    def _depth_scale_take(self, parsed: Parsed) -> None:
        """The upload's depth_scale becomes the dataset's while it holds no depth map; one
        that differs from the scale of maps already stored is refused (the values would mean
        other distances)."""
        given, dataset = self.layout.depth_scale, self.dataset
        if given is None or given == dataset.depth_scale:
            return
        if (
            dataset.depth_scale is None
            or not PixelMap.objects.filter(image__dataset=dataset).exists()
        ):
            dataset.depth_scale = given
            dataset.save(update_fields=["depth_scale", "updated_at"])
            parsed.notes.append(f"the dataset's depth scale set to {given:g} (PNG value of 1 m)")
            return
        self.layout.depth_scale_refused = (
            f"not read: the upload's depth_scale is {given:g} but this dataset's depth maps use "
            f"{dataset.depth_scale:g} (PNG value of one metre); import it into a dataset of its "
            "own scale"
        )

    def read(self, data: bytes, *, size: tuple[int, int]) -> np.ndarray:
        classes = 255 if self.from_maps else self.parsed_count
        array = map_read(data, task=self.task, layout=self.layout, size=size, classes=classes)
        if self.task != Task.SEMANTIC:
            return array
        if self.lacking:
            present = [i for i in np.unique(array).tolist() if i in self.lacking]
            if present:
                raise PixelMapError(
                    f"it holds class “{self.lacking[present[0]]}”, which this dataset lacks"
                )
        if self.remap is not None:
            array = cv2.LUT(array, self.remap)
        return array

    def seen(self, stats: dict) -> None:
        """A stored map's classes (its stats): the largest, where the maps make the classes."""
        if self.from_maps and self.task == Task.SEMANTIC and stats:
            self.largest = max(self.largest, *(int(k) for k in stats))

    def class_name(self, index: int) -> str:
        return self.names.get(index, f"class{index}")

    def classes_made(self, *, existing: bool) -> list[str]:
        """Classes class0… up to the largest value in the masks, where no list named them."""
        if not self.from_maps or existing or self.largest < 0:
            return []
        made = [f"class{i}" for i in range(self.largest + 1)]
        DatasetClass.objects.bulk_create(
            DatasetClass(dataset=self.dataset, index=i, name=n) for i, n in enumerate(made)
        )
        return made


def _check_one(item: tuple[str, bytes | EntryError], writer: "_BlobWriter") -> tuple:
    name, data = item
    if isinstance(data, EntryError):
        return name, str(data)
    if len(data) > MAX_IMAGE_BYTES:
        return name, f"image larger than {MAX_IMAGE_BYTES // 2**20} MiB"
    try:
        checked = image_check(data, thumbnail_px=settings.DATASET_THUMBNAIL_PX)
    except ImageRejected as e:
        return name, str(e)
    stored = writer.store(checked)
    # Bytes and thumbnail are stored: let them go.
    return name, dataclasses.replace(checked, data=b"", thumbnail=b"", has_thumbnail=stored)


def _checked_images(items: Iterator, writer: "_BlobWriter", *, total: int = 0) -> Iterator[tuple]:
    """Check and store images, in order, with a bounded read-ahead so memory stays flat whatever
    the archive size. A large import on local storage checks in processes (billiard's pool,
    which Celery's worker processes may start, where the standard library's refuses): the
    reading, label and row work of this thread then holds the GIL alone. Otherwise, threads
    (Pillow, hashlib and file writes release the GIL)."""
    pool = _check_pool() if total >= PROCESS_MIN_IMAGES and storage_is_local() else None
    if pool is None:
        yield from _checked_on_threads(items, writer)
        return
    window: deque = deque()
    try:
        for batch in _batches(items):
            window.append(pool.apply_async(_check_batch, (batch,)))
            if len(window) >= WINDOW * CHECK_PROCESSES:
                yield from _batch_results(window.popleft(), writer)
        while window:
            yield from _batch_results(window.popleft(), writer)
    finally:
        # Stopped early (the import failed): the batches in flight are waited for, not killed
        # mid-write, and what they stored is recorded, so the failed import removes it.
        for pending in window:
            try:
                _batch_results(pending, writer)
            except Exception:
                logger.warning("a checking process failed", exc_info=True)
        # Every batch has answered, so no process writes any more: they are let go while the
        # import goes on (billiard's join takes a second, waiting on its handler threads).
        pool.close()
        threading.Thread(target=pool.join, name="import-pool-join", daemon=True).start()


def _checked_on_threads(items: Iterator, writer: "_BlobWriter") -> Iterator[tuple]:
    with ThreadPoolExecutor(max_workers=CHECK_THREADS) as pool:
        window: deque = deque()
        for item in items:
            window.append(pool.submit(_check_one, item, writer))
            if len(window) >= CHECK_THREADS * 4:
                yield window.popleft().result()
        while window:
            yield window.popleft().result()


class _Prefetch:
    """Checks and stores a source's images on a thread of its own, in the source's order,
    while the import's thread reads and parses the label files; `results` then hands them
    over in the order the import writes them (the same order, less what the layout left
    out). It runs at most PREFETCH_AHEAD images ahead of the import, so what it holds stays
    small whatever the archive's size (no image bytes; about 300 bytes an image)."""

    def __init__(self, source: Source, names: list[str], writer: "_BlobWriter"):
        self._index = {name: i for i, name in enumerate(names)}
        self._source, self._writer = source, writer
        self._done: dict[str, object] = {}  # checked, not yet taken, in the source's order
        self._unused: list[str] = []  # SHA-256 of images checked that the import passed over
        self._cond = threading.Condition()
        self._finished = False
        self._stopping = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(source, names, writer), name="import-prefetch", daemon=True
        )
        self._thread.start()

    def _run(self, source: Source, names: list[str], writer: "_BlobWriter") -> None:
        try:
            checked = _checked_images(source.iter_read(names), writer, total=len(names))
            for name, result in checked:
                with self._cond:
                    self._done[name] = result
                    self._cond.notify_all()
                    while len(self._done) >= PREFETCH_AHEAD and not self._stopping:
                        self._cond.wait()
                if self._stopping:
                    checked.close()
                    break
        except BaseException as e:  # handed to the import's thread, which raises it
            self._error = e
        finally:
            with self._cond:
                self._finished = True
                self._cond.notify_all()

    def _passed_over(self, index: int) -> None:
        """Images before `index` are never asked for: the layout left them out."""
        while self._done:
            first = next(iter(self._done))
            if self._index[first] >= index:
                break
            result = self._done.pop(first)
            if isinstance(result, CheckedImage):
                self._unused.append(result.sha256)

    def _take(self, name: str):
        with self._cond:
            self._passed_over(self._index[name])
            self._cond.notify_all()
            while name not in self._done:
                if self._error is not None:
                    raise self._error
                if self._finished:
                    raise RuntimeError(f"{name!r} was not checked")  # cannot happen
                self._cond.wait()
            result = self._done.pop(name)
            self._cond.notify_all()
            return result

    def results(self, order: list[str]) -> Iterator[tuple]:
        for name in order:
            if name in self._index:
                yield name, self._take(name)
            else:  # the layout names as an image what is not one by its name: checked here
                try:
                    item = (name, self._source.read(name))
                except EntryError as e:
                    item = (name, e)
                yield _check_one(item, self._writer)

    def unused(self) -> list[str]:
        """The SHA-256 of images checked ahead that the import did not take."""
        with self._cond:
            self._passed_over(len(self._index))
            self._cond.notify_all()
        self._thread.join()
        with self._cond:
            self._passed_over(len(self._index))
        return self._unused

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()


def _check_pool():
    """A pool of checking processes, or None where this process cannot start one."""
    import billiard

    try:
        return billiard.get_context("fork").Pool(CHECK_PROCESSES, initializer=_checker_start)
    except (OSError, ValueError, AssertionError):
        logger.warning("no checking processes here: checking on threads", exc_info=True)
        return None


def _checker_start() -> None:
    """In a checking process: OpenCV (the thumbnails' last resize) on this process's thread
    only. Its own pool of a thread per core, for a 0.1 ms resize, cost more than it gave with
    a process per core already (0.75 ms of CPU an image against 1.0)."""
    import cv2

    cv2.setNumThreads(1)


def _batches(items: Iterator) -> Iterator[list]:
    """Runs of entries for one process at a time: BATCH_IMAGES of them or BATCH_BYTES."""
    batch, size = [], 0
    for item in items:
        batch.append(item)
        size += len(item[1]) if isinstance(item[1], bytes) else 0
        if len(batch) >= BATCH_IMAGES or size >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _check_batch(batch: list) -> tuple[list, list[str], tuple | None]:
    """In a checking process: each entry checked and stored; the keys it wrote; and why it
    stopped, when an entry failed (a full disk): the keys written before it still come back,
    so the failed import removes them."""
    writer = _BlobWriter()
    results = []
    try:
        for item in batch:
            results.append(_check_one(item, writer))
    except Exception as e:
        return results, writer.written, (traceback.format_exc(), getattr(e, "errno", None))
    return results, writer.written, None


class CheckingFailed(Exception):
    """An image's check or store failed in a checking process: its traceback is the message,
    its `errno` the failure's where it was an OSError (ENOSPC: the disk is full)."""

    def __init__(self, message: str, code: int | None):
        super().__init__(message)
        self.errno = code


def _batch_results(pending, writer: "_BlobWriter") -> list:
    results, written, failure = pending.get()
    writer.written += written
    if failure is not None:
        raise CheckingFailed(*failure)
    return results


def _storage_full(e: BaseException) -> bool:
    return getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT)


def _after_commit(dataset_id: int, blob_ids: list[int]) -> None:
    from datasets.services.health_runs import health_run_enqueue

    for start in range(0, len(blob_ids), 500):
        task_send("datasets.thumbnails_make", blob_ids[start : start + 500])
    health_run_enqueue(dataset_id=dataset_id, after_change=True)


def _execute(imp: Import, source, lease: Lease) -> Import:
    """Run the import of `source` into `imp.dataset` and record the outcome on `imp`, under
    `lease` (LeaseLost: another attempt owns the import now, and nothing of this one stays)."""
    run = _Run(imp.dataset, imp, source, lease)
    try:
        run.run()
    except LeaseLost:
        raise  # its bytes stay: the newer attempt may be storing the same ones right now
    except database_faults():
        # Its rows rolled back with the connection, and it runs again (core.leases.lease_work):
        # the bytes it stored are removed, on a new connection, as after any failure.
        _cleanup_after_fault(run, imp)
        raise
    except ArchiveError as e:
        run.cleanup_failed()
        lease.finish(
            ImportStatus.FAILED,
            error=str(e),
            report={"skipped": _listed(run.skipped), "skipped_count": len(run.skipped)},
        )
    except Exception as e:
        run.cleanup_failed()
        logger.exception("import %s failed", imp.pk)
        if _storage_full(e):
            error = (
                "The import failed: the disk that stores images is full. Nothing was imported "
                "and nothing of it is left stored; import again once there is space."
            )
        else:
            error = "The import failed because of an internal error; nothing was imported."
        lease.finish(ImportStatus.FAILED, error=error)
    else:
        blob_ids, dataset_id = run.unthumbnailed_blob_ids, imp.dataset_id
        transaction.on_commit(lambda: _after_commit(dataset_id, blob_ids))
    finally:
        source.close()
    cache.delete(_progress_key(imp.pk))
    imp.refresh_from_db()
    return imp


def _cleanup_after_fault(run: _Run, imp: Import) -> None:
    db_connection_reset()
    try:
        run.cleanup_failed()
    except database_faults() as e:
        logger.warning(
            "import %s: the database is away (%s), the bytes it stored are left", imp.pk, e
        )


def import_run(*, import_id: int) -> Import | None:
    """Run a queued upload's import (the Celery task calls this). One that is not queued
    (final, or running under another worker's lease) is left alone."""
    lease = lease_take(IMPORT_JOB, import_id)
    if lease is None:
        return Import.objects.filter(pk=import_id).first()
    imp = lease_row(
        lease, lambda: Import.objects.select_related("dataset__workspace__plan").get(pk=import_id)
    )
    if imp is None:
        return Import.objects.filter(pk=import_id).first()
    _progress(imp.pk, "starting")
    return import_execute(imp, lease)


def import_execute(imp: Import, lease: Lease) -> Import:
    """The body of an upload's import, run from its stored chunks while `lease` is renewed. A
    fault of the database connection runs it again from the chunks (an attempt commits nothing
    but with its end), or puts it back in the queue at once (core.leases.lease_work)."""

    def attempt() -> None:
        try:
            source = _open_upload(imp, _limits_for(imp.dataset))
        except ArchiveError as e:
            lease.finish(ImportStatus.FAILED, error=str(e))
        else:
            _execute(imp, source, lease)

    try:
        if not lease_work(lease, attempt):
            return imp  # back in the queue (its chunks kept for the next attempt), or the reaper's
    except LeaseLost:
        logger.warning("import %s: attempt %s lost its lease", imp.pk, lease.attempt)
        imp.refresh_from_db()
        if imp.is_final:  # finished by this attempt after all (its reply lost with a connection)
            _delete_chunks(imp)
        return imp
    _delete_chunks(imp)
    imp.refresh_from_db()
    return imp


def _send(imp: Import) -> None:
    task_send("datasets.import_run", imp.pk)


def _has_chunks(imp: Import) -> bool:
    """An upload can run again from its chunks; an import from the server's disk cannot."""
    return UploadChunk.objects.filter(upload=imp).exists()


def _delete_chunks(imp: Import) -> None:
    from datasets.services.uploads import upload_chunks_delete

    upload_chunks_delete(imp=imp)


# An import whose worker died runs again from its chunks: its rows were never committed (the
# outcome commits with them).
IMPORT_JOB = LongJob(
    label="import",
    model=Import,
    queued=ImportStatus.QUEUED,
    running=ImportStatus.RUNNING,
    failed=ImportStatus.FAILED,
    send=_send,
    started_field="started_at",
    gave_up_note="Nothing was imported.",
    resumable=_has_chunks,
    gave_up=_delete_chunks,
)


def dataset_import_path(
    *, access: WorkspaceAccess, dataset: Dataset, path: Path, video_fps=None
) -> Import:
    """Import an archive or folder from the server's disk, synchronously (CLI and tests).
    `video_fps`: frames per second sampled from videos (default 1)."""
    access.require(Perm.WRITE)
    video_fps = video_fps_check(video_fps)
    path = Path(path)
    if not path.exists():
        raise ArchiveError(f"{path} does not exist.")
    imp = Import.objects.create(
        dataset=dataset,
        status=ImportStatus.QUEUED,
        filename=display_name(path.name),
        files=[{"name": path.name, "size": path.stat().st_size if path.is_file() else 0}],
        total_size=path.stat().st_size if path.is_file() else 0,
        video_fps=video_fps,
        created_by=access.user,
    )
    lease = lease_take(IMPORT_JOB, imp.pk)  # this process runs it: if it dies, beat fails it
    imp.refresh_from_db()
    imp.dataset = dataset
    limits = _limits_for(dataset)

    def attempt() -> None:
        try:
            if path.is_dir():
                source = FolderSource(path, limits)
            elif looks_like_image(path.name) or is_video(path.name):
                source = FolderSource(path.parent, limits, only=path.name)
            else:
                source = Archive(path.open("rb", buffering=READ_BUFFER), limits)
            source = _with_videos(source, imp)
        except ArchiveError as e:
            lease.finish(ImportStatus.FAILED, error=str(e))
        else:
            _execute(imp, source, lease)

    # A fault of the database runs it again from the disk; past LONG_JOB_DB_RETRY_SECONDS it
    # fails, saying so (no chunks to run it again from later).
    lease_work(lease, attempt)
    imp.refresh_from_db()
    return imp
