"""Resumable uploads into a dataset.

An upload is an Import row that declares its files ([{name, size}]) before any byte is sent.
Each file then arrives as chunks of settings.DATASET_UPLOAD_CHUNK_BYTES (the last one shorter),
in any order, each stored once under "uploads/<import>/<file>/<chunk>". Resending a chunk the
server already has changes nothing, so a client that lost a response simply sends it again.
`upload_complete` checks that every chunk is there and hands the import to the worker.

File names are stored as given, for the report; they never become a storage path.
"""

import logging
import math
import shutil
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from datetime import datetime, timedelta
from typing import BinaryIO

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import QuerySet, Sum
from django.template.defaultfilters import filesizeformat
from django.utils import timezone

from core.errors import ServiceError
from core.storage import storage_delete, storage_local_path, storage_put
from core.tasks import task_send_on_commit
from datasets.models import Dataset, Import, ImportStatus, UploadChunk
from datasets.services.import_report import (
    EMPTY_CLASS,
    classes_without_labels_line,
    format_title,
)
from datasets.services.video import video_fps_check
from workspaces.models import User
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

logger = logging.getLogger(__name__)

MAX_FILES = 10_000
MAX_NAME_CHARS = 1024  # generous: real file names stop at 255 bytes, folder drops add a path
STALE_AFTER = timedelta(hours=24)
STALE_ERROR = (
    "The upload was not finished within 24 hours, so its parts were deleted. "
    "Upload the files again."
)


class UploadConflict(ServiceError):
    """The import takes no more chunks: it is already queued, importing or finished (HTTP 409)."""


class UploadIncomplete(ServiceError):
    """Completing was asked for while chunks are still missing; `missing` lists them."""

    def __init__(self, message: str, missing: list[tuple[int, int]]):
        super().__init__(message)
        self.missing = missing


def chunk_bytes() -> int:
    return settings.DATASET_UPLOAD_CHUNK_BYTES


def file_chunk_count(size: int) -> int:
    """How many chunks a file of `size` bytes is sent in (an empty file: none)."""
    return math.ceil(size / chunk_bytes())


def chunk_expected_size(size: int, chunk_index: int) -> int:
    return min(chunk_bytes(), size - chunk_index * chunk_bytes())


def _shown(name: str, limit: int = 80) -> str:
    """A name fit for a message: control characters made visible, long names shortened."""
    clean = "".join(ch if ch.isprintable() else "�" for ch in name)
    return clean if len(clean) <= limit else clean[: limit - 1] + "…"


def upload_files_parse(raw) -> list[dict]:
    """The declared file list, checked: [{"name": str, "size": int}, ...] as the client sent it."""
    if not isinstance(raw, list) or not raw:
        raise ServiceError("Choose at least one file to upload.")
    if len(raw) > MAX_FILES:
        raise ServiceError(
            f"One upload holds at most {MAX_FILES:,} files; this one has {len(raw):,}. "
            "Put them in an archive (zip, tar, tar.gz) or upload them in parts."
        )
    files: list[dict] = []
    seen: set[str] = set()
    for position, item in enumerate(raw, 1):
        if not isinstance(item, dict):
            raise ServiceError(f"File {position} is not described as {{name, size}}.")
        name, size = item.get("name"), item.get("size")
        if not isinstance(name, str) or not name:
            raise ServiceError(f"File {position} has no name.")
        if "\x00" in name:
            raise ServiceError(
                f"The name of file {position} (“{_shown(name)}”) contains a NUL character; "
                "rename the file and try again."
            )
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise ServiceError(f"The name of file {position} is not valid text.") from None
        if len(name) > MAX_NAME_CHARS:
            raise ServiceError(
                f"The name of file {position} is {len(name):,} characters long; "
                f"at most {MAX_NAME_CHARS:,} are accepted."
            )
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ServiceError(f"File {position} (“{_shown(name)}”) has no valid size.")
        if name in seen:
            raise ServiceError(f"“{_shown(name)}” is listed twice; each file once, please.")
        seen.add(name)
        files.append({"name": name, "size": size})
    return files


@transaction.atomic
def upload_create(
    *, access: WorkspaceAccess, dataset: Dataset, files, resume: bool = True, video_fps=None
) -> tuple[Import, bool]:
    """Declare an upload. Returns (import, resumed).

    With `resume`, the same person's unfinished upload of exactly these files (same names and
    sizes, same order) into this dataset is returned instead of a new one, so a reloaded page
    continues where it stopped.
    """
    access.require(Perm.WRITE)
    declared = upload_files_parse(files)
    video_fps = video_fps_check(video_fps)
    total = sum(f["size"] for f in declared)
    if total == 0:
        raise ServiceError(
            "The file is empty; nothing to upload."
            if len(declared) == 1
            else "All the files are empty; nothing to upload."
        )
    limit = access.workspace.plan.max_upload_bytes
    if total > limit:
        raise ServiceError(
            f"This upload is {filesizeformat(total)}; the {access.workspace.plan.name} plan "
            f"allows {filesizeformat(limit)} in one upload. Split it into smaller uploads."
        )
    if resume:
        existing = (
            Import.objects.select_for_update()
            .filter(
                dataset=dataset,
                created_by=access.user,
                status=ImportStatus.UPLOADING,
                files=declared,
            )
            .order_by("-created_at")
            .first()
        )
        if existing is not None:
            if existing.video_fps != video_fps:
                existing.video_fps = video_fps
                existing.save(update_fields=["video_fps"])
            return existing, True
    imp = Import.objects.create(
        dataset=dataset,
        status=ImportStatus.UPLOADING,
        filename=declared[0]["name"][:255] if len(declared) == 1 else f"{len(declared):,} files",
        files=declared,
        total_size=total,
        chunk_count=sum(file_chunk_count(f["size"]) for f in declared),
        video_fps=video_fps,
        created_by=access.user,
    )
    return imp, False


def _locked(imp: Import) -> Import:
    # The import's row only: locking its dataset too would make every chunk wait for a
    # running import of the same dataset, which holds that row for minutes.
    return Import.objects.select_for_update().get(pk=imp.pk)


def _storage_put(key: str, data: bytes) -> None:
    # A stray file can sit at the key when an earlier attempt stored it but its transaction
    # rolled back: it is replaced.
    if not storage_put(key, data, replace=True):
        raise ServiceError("The chunk could not be stored under its name; send it again.")


@transaction.atomic
def upload_chunk_put(
    *, access: WorkspaceAccess, imp: Import, file_index: int, chunk_index: int, data: bytes
) -> tuple[Import, bool]:
    """Store one chunk. Returns (import, stored): stored is False for a chunk already held."""
    access.require(Perm.WRITE)
    imp = _locked(imp)
    if imp.status != ImportStatus.UPLOADING:
        raise UploadConflict(
            f"This upload is already {imp.get_status_display().lower()}; it takes no more data."
        )
    files = imp.files
    if not 0 <= file_index < len(files):
        raise ServiceError(
            f"This upload has {len(files)} file{'s' if len(files) != 1 else ''}; "
            f"there is no file number {file_index}."
        )
    size = files[file_index]["size"]
    count = file_chunk_count(size)
    if not 0 <= chunk_index < count:
        raise ServiceError(
            f"File {file_index} is sent in {count} chunk{'s' if count != 1 else ''}; "
            f"there is no chunk number {chunk_index}."
        )
    expected = chunk_expected_size(size, chunk_index)
    if len(data) != expected:
        raise ServiceError(
            f"Chunk {chunk_index} of file {file_index} should be {expected:,} bytes; "
            f"{len(data):,} arrived. Send it again."
        )
    chunk, created = UploadChunk.objects.get_or_create(
        upload=imp, file_index=file_index, chunk_index=chunk_index, defaults={"size": expected}
    )
    if not created:
        return imp, False  # held already: its bytes were stored before its row was committed
    chunk.upload = imp
    _storage_put(chunk.storage_key, data)
    imp.received_size += expected
    imp.save(update_fields=["received_size"])
    return imp, True


def upload_missing_chunks(*, imp: Import) -> list[tuple[int, int]]:
    """(file index, chunk index) of every chunk not received yet, in order."""
    have = set(UploadChunk.objects.filter(upload=imp).values_list("file_index", "chunk_index"))
    return [
        (fi, ci)
        for fi, f in enumerate(imp.files)
        for ci in range(file_chunk_count(f["size"]))
        if (fi, ci) not in have
    ]


def _missing_message(imp: Import, missing: list[tuple[int, int]]) -> str:
    shown = ", ".join(
        f"“{_shown(imp.files[fi]['name'], 40)}” chunk {ci}" for fi, ci in missing[:10]
    )
    more = f" and {len(missing) - 10:,} more" if len(missing) > 10 else ""
    return (
        f"{len(missing):,} chunk{'s' if len(missing) != 1 else ''} still missing: "
        f"{shown}{more}. Send them, then complete the upload again."
    )


@transaction.atomic
def upload_complete(*, access: WorkspaceAccess, imp: Import) -> Import:
    """Check every chunk is in and the sizes add up, then queue the import.

    Completing an upload that is already queued or further along changes nothing.
    """
    access.require(Perm.WRITE)
    imp = _locked(imp)
    if imp.status != ImportStatus.UPLOADING:
        return imp
    missing = upload_missing_chunks(imp=imp)
    if missing:
        raise UploadIncomplete(_missing_message(imp, missing), missing)
    received = dict(
        UploadChunk.objects.filter(upload=imp)
        .values("file_index")
        .annotate(total=Sum("size"))
        .values_list("file_index", "total")
    )
    for index, f in enumerate(imp.files):
        got = received.get(index, 0)
        if got != f["size"]:
            raise ServiceError(
                f"“{_shown(f['name'])}” should be {f['size']:,} bytes; {got:,} arrived. "
                "Upload it again."
            )
    declared = sum(f["size"] for f in imp.files)
    if declared != imp.total_size or sum(received.values()) != imp.total_size:
        raise ServiceError(
            f"The upload should total {imp.total_size:,} bytes; the files add up to "
            f"{declared:,} and {sum(received.values()):,} arrived. Start a new upload."
        )
    imp.status = ImportStatus.QUEUED
    imp.received_size = imp.total_size
    imp.save(update_fields=["status", "received_size"])
    import_id = imp.pk

    task_send_on_commit("datasets.import_run", import_id)
    return imp


@transaction.atomic
def upload_store_whole(
    *,
    access: WorkspaceAccess,
    dataset: Dataset,
    name: str,
    stream: BinaryIO,
    size: int,
    video_fps=None,
) -> Import:
    """A whole file in one request (the plain form, the API): stored as chunks, then queued.

    Any failure leaves neither rows nor bytes behind.
    """
    imp, _ = upload_create(
        access=access,
        dataset=dataset,
        files=[{"name": name, "size": size}],
        resume=False,
        video_fps=video_fps,
    )
    prefix = imp.upload_prefix
    try:
        stream.seek(0)
        index = 0
        while piece := stream.read(chunk_bytes()):
            if index >= imp.chunk_count:
                raise ServiceError("The file is larger than it said; send it again.")
            upload_chunk_put(access=access, imp=imp, file_index=0, chunk_index=index, data=piece)
            index += 1
        return upload_complete(access=access, imp=imp)
    except BaseException:
        _storage_delete_tree(prefix, [])
        raise


def _storage_walk(prefix: str):
    try:
        dirs, files = default_storage.listdir(prefix)
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in files:
        yield f"{prefix}{name}"
    for name in dirs:
        yield from _storage_walk(f"{prefix}{name}/")


def _storage_delete_tree(prefix: str, keys: list[str]) -> None:
    """Delete the chunks' bytes, and anything else left under the upload's prefix."""
    for key in keys:
        storage_delete(key)
    for key in _storage_walk(prefix):
        storage_delete(key)
    folder = storage_local_path(prefix)
    if folder is not None:  # object storage has no folders to remove
        shutil.rmtree(folder, ignore_errors=True)


@transaction.atomic
def upload_chunks_delete(*, imp: Import) -> int:
    """Delete a finished import's chunks: rows now, bytes once this transaction commits.

    Returns how many chunk rows were deleted. Refuses while the import may still need them.
    """
    locked = _locked(imp)
    if not locked.is_final:
        raise ServiceError(
            f"Upload {locked.pk} is {locked.get_status_display().lower()}; its parts are "
            "deleted only once its import has finished."
        )
    prefix = locked.upload_prefix
    rows = UploadChunk.objects.filter(upload=locked)
    keys = [f"{prefix}{fi}/{ci}" for fi, ci in rows.values_list("file_index", "chunk_index")]
    deleted, _ = rows.delete()
    transaction.on_commit(lambda: _storage_delete_tree(prefix, keys))
    return deleted


def uploads_expire_stale(*, now: datetime | None = None) -> int:
    """Fail uploads left unfinished for more than 24 hours and delete their parts.

    Returns how many were expired. For the beat schedule; safe to run in parallel.
    """
    now = now or timezone.now()
    stale = Import.objects.filter(
        status=ImportStatus.UPLOADING, created_at__lt=now - STALE_AFTER
    ).values_list("pk", flat=True)
    expired = 0
    for pk in list(stale):
        with transaction.atomic():
            imp = (
                Import.objects.select_for_update(skip_locked=True)
                .filter(pk=pk, status=ImportStatus.UPLOADING)
                .first()
            )
            if imp is None:
                continue
            imp.status = ImportStatus.FAILED
            imp.error = STALE_ERROR
            imp.finished_at = now
            imp.save(update_fields=["status", "error", "finished_at"])
            upload_chunks_delete(imp=imp)
            expired += 1
    if expired:
        logger.info("expired %s unfinished uploads", expired)
    return expired


def upload_list_unfinished(*, dataset: Dataset, user: User) -> QuerySet[Import]:
    """This person's uploads into this dataset that still wait for data (newest first)."""
    return Import.objects.filter(
        dataset=dataset, created_by=user, status=ImportStatus.UPLOADING
    ).order_by("-created_at")


@dataclass(frozen=True)
class ReportView:
    """An import report, made safe to render: lists of pairs, never dict lookups in templates
    (a class named "items" must not turn into a method call)."""

    format: str
    images_imported: int
    labels_imported: int
    duplicates: int
    splits: list[tuple[str, int]]
    labels_per_class: list[tuple[str, int]]
    skipped: list[tuple[str, str]]
    skipped_count: int
    labels_found: int = 0
    warning: str = ""
    notes: list[str] = dataclass_field(default_factory=list)
    not_imported: list["NotImportedGroup"] = dataclass_field(default_factory=list)
    maps_imported: int | None = None  # semantic and depth imports: masks or depth maps
    classes_without_labels: str = ""  # the summary's one line, or ""

    @property
    def format_title(self) -> str:
        return format_title(self.format)

    @property
    def skipped_not_listed(self) -> int:
        return max(0, self.skipped_count - len(self.skipped))


@dataclass(frozen=True)
class NotImportedGroup:
    kind: str
    title: str
    count: int
    reasons: list[tuple[str, int]]
    files: list[tuple[str, str]]

    @property
    def files_not_listed(self) -> int:
        return max(0, self.count - len(self.files))

    @property
    def by_reason(self) -> list[tuple[str, int, list[str]]]:
        """Each of the commonest reasons once, with its count and the listed files it holds
        for: the page says a reason once, its files under it."""
        files: dict[str, list[str]] = {reason: [] for reason, _ in self.reasons}
        for file, reason in self.files:
            if reason in files:
                files[reason].append(file)
        return [(reason, n, files[reason]) for reason, n in self.reasons]

    @property
    def files_of_other_reasons(self) -> list[tuple[str, str]]:
        """The listed files whose reason is not among the commonest, each with its own."""
        named = {reason for reason, _ in self.reasons}
        return [(file, reason) for file, reason in self.files if reason not in named]


def _groups(value) -> list[NotImportedGroup]:
    groups = []
    for g in value if isinstance(value, list) else []:
        if not isinstance(g, dict):
            continue
        groups.append(
            NotImportedGroup(
                kind=str(g.get("kind", "")),
                title=str(g.get("title", "")),
                count=_int(g.get("count")),
                reasons=[
                    (str(r.get("reason", "")), _int(r.get("count")))
                    for r in g.get("reasons") or []
                    if isinstance(r, dict)
                ],
                files=[
                    (str(f.get("file", "")), str(f.get("reason", "")))
                    for f in g.get("files") or []
                    if isinstance(f, dict)
                ],
            )
        )
    return groups


def _int(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _pairs(value) -> list[tuple[str, int]]:
    if not isinstance(value, dict):
        return []
    return [(str(k), _int(v)) for k, v in value.items()]


def import_report_view(report) -> ReportView | None:
    if not isinstance(report, dict) or not report:
        return None
    skipped = [
        (str(s.get("file", "")), str(s.get("reason", "")))
        for s in report.get("skipped") or []
        if isinstance(s, dict)
    ]
    groups = _groups(report.get("not_imported"))
    empty_names = [str(n) for n in report.get("classes_without_labels") or [] if isinstance(n, str)]
    empty_count = _int(report.get("classes_without_labels_count"))
    # Kept before issue 33: the classes were a group of "not imported"; they are a line now.
    for group in [g for g in groups if g.kind == EMPTY_CLASS]:
        groups.remove(group)
        empty_names, empty_count = [f for f, _ in group.files], group.count
    maps = report.get("maps_imported")
    return ReportView(
        format=str(report.get("format") or ""),
        images_imported=_int(report.get("images_imported")),
        labels_imported=_int(report.get("labels_imported")),
        duplicates=_int(report.get("duplicates")),
        splits=_pairs(report.get("splits")),
        labels_per_class=sorted(_pairs(report.get("labels_per_class")), key=lambda p: -p[1]),
        skipped=skipped,
        skipped_count=max(_int(report.get("skipped_count")), len(skipped)),
        labels_found=_int(report.get("labels_found")),
        warning=str(report.get("warning") or ""),
        notes=[str(n) for n in report.get("notes") or [] if isinstance(n, str)],
        not_imported=groups,
        maps_imported=_int(maps) if maps is not None else None,
        classes_without_labels=classes_without_labels_line(empty_names, empty_count),
    )
