"""Exports of trained models to other formats: starting an export (one at a time per model
and format, a database constraint), listing and downloading them, and the background job that
runs one through the worker process (`training.weights_process`) under a lease (core.leases)
that beat reaps when its worker died. Which formats are offered, and why others are not, is
`deploy.export_formats`."""

import logging
import shutil
import tempfile
import zipfile
from pathlib import Path

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import Http404

from core.errors import ServiceError
from core.leases import (
    Lease,
    LeaseLost,
    LongJob,
    database_faults,
    lease_row,
    lease_take,
    lease_work,
    queued_until,
)
from core.storage import storage_delete, storage_put_file
from core.tasks import task_send, task_send_on_commit
from deploy.export_formats import FORMATS_BY_KEY, format_availability, format_catalog
from deploy.models import EXPORT_ACTIVE, ExportState, ModelExport
from training.models import InspectState, TrainedModel
from training.services.models import model_local_path
from training.weights_process import LOG_TAIL_CHARS, worker_run
from workspaces.models import Workspace
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

logger = logging.getLogger(__name__)

EXPORT_TIMEOUT_SECONDS = 20 * 60


def _send(export: ModelExport) -> None:
    task_send("deploy.export_run", export.pk)


EXPORT_JOB = LongJob(
    label="export",
    model=ModelExport,
    queued=ExportState.QUEUED,
    running=ExportState.RUNNING,
    failed=ExportState.FAILED,
    send=_send,
    gave_up_note="Start it again.",
)


# --- starting, listing, downloading -------------------------------------------------------------


@transaction.atomic
def export_start(*, access: WorkspaceAccess, model: TrainedModel, fmt: str) -> ModelExport:
    """Queue an export of `model` to `fmt` (an Ultralytics format name)."""
    access.require(Perm.WRITE)
    if not access.owns(model):
        raise ServiceError("This model belongs to another workspace.")
    entry = format_availability(fmt)
    if entry is None:
        raise ServiceError(f"Kestrel does not export to “{fmt[:30]}”.")
    if not entry.available:
        raise ServiceError(f"{entry.format.label} export is not available here: {entry.reason}.")
    if model.inspect_state == InspectState.PENDING:
        raise ServiceError(
            f"{model.name} is still being inspected; export it once its check has finished."
        )
    if model.inspect_state == InspectState.FAILED:
        raise ServiceError(f"{model.name} failed its inspection, so it cannot be exported.")
    if not model.weights_key:
        raise ServiceError(f"{model.name} has no stored weights to export.")
    busy = f"{model.name} is already being exported to {entry.format.label}."
    # Deleting the model waits for this start (and sees its export), and two clicks at once
    # wait for each other; the constraint below holds even where rows are not locked (SQLite).
    TrainedModel.objects.select_for_update().filter(pk=model.pk).first()
    if ModelExport.objects.filter(model=model, format=fmt, state__in=EXPORT_ACTIVE).exists():
        raise ServiceError(busy)
    try:
        with transaction.atomic():
            export = ModelExport.objects.create(
                workspace=access.workspace,
                model=model,
                format=fmt,
                created_by=access.user,
                lease_until=queued_until(),
            )
    except IntegrityError:  # a start at the same moment won (one_active_export_per_model_format)
        raise ServiceError(busy) from None
    task_send_on_commit("deploy.export_run", export.pk)
    return export


def model_exports(*, model: TrainedModel) -> QuerySet[ModelExport]:
    return (
        ModelExport.objects.for_workspace(model.workspace_id)
        .filter(model=model)
        .select_related("created_by")
    )


def exports_panel(*, access: WorkspaceAccess, model: TrainedModel) -> dict:
    """What deploy/_exports.html needs on the model page."""
    exports = list(model_exports(model=model)[:20])
    return {
        "export_formats": format_catalog(),
        "exports": exports,
        "exports_active": any(not e.is_final for e in exports),
        "can_export": access.can(Perm.WRITE) and model.inspect_state == InspectState.OK,
    }


def export_get(*, workspace: Workspace, pk: int) -> ModelExport:
    export = (
        ModelExport.objects.for_workspace(workspace).select_related("model").filter(pk=pk).first()
    )
    if export is None:
        raise Http404("No such export.")
    return export


def export_filename(export: ModelExport) -> str:
    fmt = FORMATS_BY_KEY[export.format]
    stem = f"kestrel-model-{export.model_id}"
    return f"{stem}{fmt.suffix}.zip" if fmt.is_folder else f"{stem}{fmt.suffix}"


# --- the job ------------------------------------------------------------------------------------


def export_run_once(export_id: int) -> None:
    """Run one export (the deploy.export_run task). Idempotent: an export already taken (or
    finished) is left alone."""
    lease = lease_take(EXPORT_JOB, export_id, progress=1)
    if lease is None:
        return
    export = lease_row(
        lease, lambda: ModelExport.objects.select_related("model").filter(pk=export_id).first()
    )
    if export is not None:
        export_execute(export, lease)


def _zip_folder(folder: Path, target: Path) -> Path:
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(folder.parent).as_posix())
    return target


def export_finish(lease: Lease, *, state: str, **fields) -> bool:
    """Write the end of a running export; False when it is gone, or no longer this worker's."""
    return lease.finish(state, **fields)


def export_execute(export: ModelExport, lease: Lease) -> ModelExport:
    """Convert the model in a worker process, store the file (a folder format as a .zip) under
    exports/<model>/<export>/<attempt>/, and record progress, the log and the end on the row,
    while `lease` is this worker's (a worker given up on stops at its next progress line)."""
    try:
        # A dropped database connection converts again in place, or requeues the export at once.
        lease_work(lease, lambda: _convert(export, lease))
    except LeaseLost:
        logger.warning("export %s: attempt %s lost its lease", export.pk, lease.attempt)
    export.refresh_from_db()
    return export


def _convert(export: ModelExport, lease: Lease) -> None:
    fmt = FORMATS_BY_KEY.get(export.format)
    model = export.model
    steps: list[str] = []

    def progress(percent: int, message: str) -> None:
        steps.append(message)
        lease.renew(progress=max(1, percent), log="\n".join(steps))

    if fmt is None:
        export_finish(lease, state=ExportState.FAILED, error=f"Unknown format {export.format}.")
        return
    workdir = Path(settings.TRAINING_DIR) / "exports"
    workdir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"export-{export.pk}-", dir=workdir))
    key = ""
    try:
        try:
            weights = model_local_path(model)
        except (OSError, ValueError) as e:
            export_finish(
                lease,
                state=ExportState.FAILED,
                error=f"The model's weights could not be read from storage ({type(e).__name__}).",
            )
            return
        staged = workdir / f"kestrel-model-{model.pk}.pt"
        staged.symlink_to(Path(weights).resolve())
        answer = worker_run(
            # The metadata names the dataset version, never the server's path to its files.
            [
                "export",
                str(staged),
                fmt.key,
                str(workdir),
                str(model.imgsz or 640),
                str(model.dataset_version) if model.dataset_version_id else "",
            ],
            timeout=EXPORT_TIMEOUT_SECONDS,
            on_progress=progress,
        )
        log = "\n".join(steps) + "\n\n" + answer.log
        if answer.error or not answer.result:
            export_finish(
                lease,
                state=ExportState.FAILED,
                error=f"The {fmt.label} export failed: {answer.error}",
                log=log[-LOG_TAIL_CHARS:],
            )
            return
        output = Path(answer.result["path"])
        if output.is_dir():
            progress(92, "Zipping the folder")
            output = _zip_folder(output, workdir / export_filename(export))
        progress(95, "Storing the file")
        # A key of this attempt's own: a worker given up on never replaces (nor, once refused
        # below, deletes) the file of the attempt that finished in its place.
        key = f"exports/{model.pk}/{export.pk}/{lease.attempt}/{export_filename(export)}"
        storage_put_file(key, output)
        size = output.stat().st_size
        if not export_finish(
            lease,
            state=ExportState.SUCCEEDED,
            progress=100,
            file_key=key,
            file_size=size,
            error="",
            log=(log + "\nStored.")[-LOG_TAIL_CHARS:],
        ):
            storage_delete(key)  # deleted meanwhile, or no longer this worker's
        key = ""
    except (LeaseLost, *database_faults()):
        if key:
            storage_delete(key)
        raise
    except Exception as e:
        logger.exception("deploy.export_run %s failed", export.pk)
        if key:
            storage_delete(key)
        export_finish(
            lease,
            state=ExportState.FAILED,
            error=f"The {fmt.label} export failed: {type(e).__name__}: {e}"[:2000],
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
