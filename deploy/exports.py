"""Exports of trained models to other formats: the catalog of formats (and why some are not
offered here), starting an export, the background job that runs it, and the worker process
every use of user weights goes through (`deploy.export_worker`, which alone imports torch)."""

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cache
from importlib import metadata
from pathlib import Path

from celery import shared_task
from django.conf import settings
from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone
from packaging.requirements import Requirement

from deploy.models import ExportState, ModelExport
from training.models import TrainedModel
from training.services.models import model_local_path
from training.supervisor import storage_put_file
from workspaces.models import Workspace
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess
from workspaces.services import ServiceError

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
EXPORT_TIMEOUT_SECONDS = 20 * 60
INSPECT_TIMEOUT_SECONDS = 5 * 60
LOG_TAIL_CHARS = 20_000
ACTIVE_STATES = (ExportState.QUEUED, ExportState.RUNNING)


# --- the catalog --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportFormat:
    key: str  # Ultralytics' `format=` argument
    label: str
    suffix: str  # what Ultralytics writes: a file's suffix, or the end of a folder's name
    is_folder: bool = False
    runs_on: str = ""
    # Distributions (with Ultralytics' own version pins) the export needs installed. With
    # YOLO_AUTOINSTALL=0 Ultralytics never installs one itself.
    requires: tuple[str, ...] = ()
    blocked: str = ""  # why it is never offered here, whatever is installed


@dataclass(frozen=True)
class FormatAvailability:
    format: ExportFormat
    available: bool
    reason: str = ""

    @property
    def key(self) -> str:
        return self.format.key


FORMATS = (
    ExportFormat(
        "onnx",
        "ONNX",
        ".onnx",
        runs_on="ONNX Runtime, OpenCV DNN, TensorRT; Kestrel's inference API",
        requires=("onnx>=1.12.0,<2.0.0", "onnxslim>=0.1.82", "onnxruntime>=1.20.0"),
    ),
    ExportFormat(
        "torchscript",
        "TorchScript",
        ".torchscript",
        runs_on="LibTorch (C++) and PyTorch, without Ultralytics",
        requires=("torch",),
    ),
    ExportFormat(
        "openvino",
        "OpenVINO",
        "_openvino_model",
        is_folder=True,
        runs_on="Intel CPUs, GPUs and NPUs",
        requires=("openvino>=2024.0.0",),
    ),
    ExportFormat(
        "ncnn",
        "NCNN",
        "_ncnn_model",
        is_folder=True,
        runs_on="phones and ARM boards",
        # PNNX is a pip package that ships its converter (nothing is downloaded at export).
        requires=("ncnn", "pnnx==20260526"),
    ),
    ExportFormat(
        "paddle",
        "PaddlePaddle",
        "_paddle_model",
        is_folder=True,
        runs_on="Paddle Inference",
        requires=("paddlepaddle>=3.0.0,<3.3.0", "x2paddle"),
    ),
    ExportFormat(
        "engine",
        "TensorRT",
        ".engine",
        blocked="needs an NVIDIA GPU with NVIDIA's TensorRT at export time, on the machine that "
        "will run it; exports here run on CPU",
    ),
    ExportFormat(
        "coreml",
        "Core ML",
        ".mlpackage",
        blocked="coremltools requires numpy 2.3.5 or older, while torch and Ultralytics here run "
        "numpy {numpy}; Core ML models run only on Apple devices",
    ),
    ExportFormat(
        "coreai",
        "Core AI",
        ".aimodel",
        blocked="Apple's coreai-torch converter is not installed here; the models run only on "
        "Apple devices",
    ),
    ExportFormat(
        "saved_model",
        "TensorFlow SavedModel",
        "_saved_model",
        is_folder=True,
        blocked="needs TensorFlow 2.19 or older with numpy 1.x and protobuf 4-5 (Ultralytics "
        "builds it in a Python 3.12 environment of its own); it cannot share this server's "
        "numpy 2 and protobuf 7",
    ),
    ExportFormat(
        "pb",
        "TensorFlow GraphDef",
        ".pb",
        blocked="made from a TensorFlow SavedModel, which is not available here (TensorFlow "
        "needs numpy 1.x and protobuf 4-5)",
    ),
    ExportFormat(
        "edgetpu",
        "TensorFlow Edge TPU",
        "_edgetpu.tflite",
        blocked="needs TensorFlow (not available here) and Google's Edge TPU compiler, which is "
        "installed from Google's apt repository",
    ),
    ExportFormat(
        "litert",
        "LiteRT (TFLite)",
        ".tflite",
        blocked="litert-torch brings JAX, transformers and torchao (over a gigabyte) into the "
        "server's environment; not installed here",
    ),
    ExportFormat(
        "mnn",
        "MNN",
        ".mnn",
        blocked="MNN's converter runs `pip install` and sends usage logs to Alibaba Cloud when it "
        "is imported; Kestrel runs offline and never installs packages at run time",
    ),
    ExportFormat(
        "executorch",
        "ExecuTorch",
        "_executorch_model",
        is_folder=True,
        blocked="executorch requires numpy 2.3.5 or older (torch and Ultralytics here run numpy "
        "{numpy}); not installed here",
    ),
    ExportFormat(
        "imx",
        "Sony IMX500",
        "_imx_model",
        is_folder=True,
        blocked="Sony's model compression toolkit needs torch older than 2.12 (this server runs "
        "torch {torch})",
    ),
    ExportFormat(
        "rknn",
        "Rockchip RKNN",
        "_rknn_model",
        is_folder=True,
        blocked="rknn-toolkit2 needs torch 2.4 (this server runs torch {torch})",
    ),
    ExportFormat(
        "axelera",
        "Axelera AI",
        "_axelera_model",
        is_folder=True,
        blocked="Axelera's SDK comes from Axelera's own package index; not installed here",
    ),
    ExportFormat(
        "deepx",
        "DEEPX",
        "_deepx_model",
        is_folder=True,
        blocked="DEEPX's dx_com compiler needs torch older than 2.12 and numpy 1.x",
    ),
    ExportFormat(
        "qnn",
        "Qualcomm QNN",
        "_qnn.onnx",
        blocked="needs Qualcomm's onnxruntime-qnn build, for Snapdragon devices; not installed",
    ),
    ExportFormat(
        "hailo",
        "Hailo",
        "_hailo_model",
        is_folder=True,
        blocked="needs Hailo's Dataflow Compiler, a download from Hailo's developer zone",
    ),
    ExportFormat(
        "ascend",
        "Huawei Ascend",
        "_ascend_model",
        is_folder=True,
        blocked="needs Huawei's CANN toolkit and an Ascend NPU",
    ),
    ExportFormat(
        "xilinx",
        "AMD Xilinx",
        "_xilinx_model",
        is_folder=True,
        blocked="needs AMD Quark in an environment of its own (Python 3.12); not installed here",
    ),
)
FORMATS_BY_KEY = {f.key: f for f in FORMATS}


@cache
def _requirement_problem(spec: str) -> str:
    """Why an installed distribution does not meet `spec`, or "" when it does. Read from the
    installed packages' metadata: nothing is imported (this runs in web processes too)."""
    requirement = Requirement(spec)
    try:
        version = metadata.version(requirement.name)
    except metadata.PackageNotFoundError:
        return f"{requirement.name} is not installed on this server"
    if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
        return f"needs {spec}, but {requirement.name} {version} is installed"
    return ""


def _installed_version(name: str) -> str:
    try:
        return metadata.version(name).split("+")[0]
    except metadata.PackageNotFoundError:
        return "none"


@cache
def format_catalog() -> tuple[FormatAvailability, ...]:
    """Every format Ultralytics knows, available ones first, each with why it is not when not.
    Worked out once per process: installed packages do not change under a running server."""
    entries = []
    for fmt in FORMATS:
        if fmt.blocked:
            installed = {name: _installed_version(name) for name in ("torch", "numpy")}
            entries.append(FormatAvailability(fmt, False, fmt.blocked.format(**installed)))
            continue
        problems = [p for p in map(_requirement_problem, fmt.requires) if p]
        entries.append(FormatAvailability(fmt, not problems, "; ".join(problems)))
    return tuple(sorted(entries, key=lambda e: not e.available))


def format_availability(key: str) -> FormatAvailability | None:
    return next((e for e in format_catalog() if e.key == key), None)


# --- the worker process -------------------------------------------------------------------------


@dataclass
class WorkerAnswer:
    result: dict | None = None
    error: str = ""
    log: str = ""
    messages: list[str] = field(default_factory=list)


def _worker_env() -> dict[str, str]:
    from annotation.assist.predict import _ultralytics_env

    _ultralytics_env()  # offline, no installs: set in this process, inherited by the worker
    return {**os.environ, "YOLO_VERBOSE": "True", "PYTHONUNBUFFERED": "1"}


def worker_run(
    args: list[str],
    *,
    timeout: float,
    on_progress: Callable[[int, str], None] | None = None,
) -> WorkerAnswer:
    """Run `python -m deploy.export_worker <args>` in a session of its own, killed with all
    its children past `timeout` seconds; its answer, progress and the tail of its log."""
    answer = WorkerAnswer()
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(  # noqa: S603 - our own module, arguments are paths and keys
            [sys.executable, "-m", "deploy.export_worker", *args],
            cwd=ROOT,
            env=_worker_env(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            start_new_session=True,
        )
        timed_out = threading.Event()

        def _stop() -> None:
            timed_out.set()
            _kill_group(proc)

        timer = threading.Timer(timeout, _stop)
        timer.start()
        try:
            for line in proc.stdout:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(message, dict):
                    continue
                if "progress" in message:
                    text = str(message.get("message", ""))[:200]
                    answer.messages.append(text)
                    if on_progress is not None:
                        on_progress(max(0, min(int(message["progress"]), 100)), text)
                elif "result" in message:
                    answer.result = message["result"]
                elif "error" in message:
                    answer.error = str(message["error"])[:2000]
            proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                _kill_group(proc)
                proc.wait()
        log.seek(0, os.SEEK_END)
        log.seek(max(0, log.tell() - LOG_TAIL_CHARS))
        answer.log = log.read().decode("utf-8", "replace")
    if timed_out.is_set():
        answer.result = None
        answer.error = f"It took longer than {round(timeout / 60)} minutes and was stopped."
    elif proc.returncode != 0 and not answer.error:
        answer.result = None
        answer.error = (
            f"The worker process was killed by signal {-proc.returncode}"
            + (" (out of memory?)" if proc.returncode == -signal.SIGKILL else "")
            if proc.returncode < 0
            else f"The worker process exited with code {proc.returncode}."
        )
    elif answer.result is None and not answer.error:
        answer.error = "The worker process ended without an answer."
    return answer


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# --- starting, listing, downloading -------------------------------------------------------------


def _stale_exports_fail(model: TrainedModel) -> None:
    """An export whose worker died (the job outlives its time limits) stops blocking new ones."""
    limit = timezone.now() - timedelta(seconds=EXPORT_TIMEOUT_SECONDS + 15 * 60)
    ModelExport.objects.filter(model=model, state__in=ACTIVE_STATES, created_at__lt=limit).update(
        state=ExportState.FAILED,
        error="The export worker stopped before finishing; start it again.",
        finished_at=timezone.now(),
    )


@transaction.atomic
def export_start(*, access: WorkspaceAccess, model: TrainedModel, fmt: str) -> ModelExport:
    """Queue an export of `model` to `fmt` (an Ultralytics format name)."""
    access.require(Perm.WRITE)
    if model.workspace_id != access.workspace.pk:
        raise ServiceError("This model belongs to another workspace.")
    entry = format_availability(fmt)
    if entry is None:
        raise ServiceError(f"Kestrel does not export to “{fmt[:30]}”.")
    if not entry.available:
        raise ServiceError(f"{entry.format.label} export is not available here: {entry.reason}.")
    if model.inspect_state == "pending":
        raise ServiceError(
            f"{model.name} is still being inspected; export it once its check has finished."
        )
    if model.inspect_state == "failed":
        raise ServiceError(f"{model.name} failed its inspection, so it cannot be exported.")
    if not model.weights_key:
        raise ServiceError(f"{model.name} has no stored weights to export.")
    # Two clicks at once wait for each other here, so the second sees the first's export.
    TrainedModel.objects.select_for_update().filter(pk=model.pk).first()
    _stale_exports_fail(model)
    if ModelExport.objects.filter(model=model, format=fmt, state__in=ACTIVE_STATES).exists():
        raise ServiceError(f"{model.name} is already being exported to {entry.format.label}.")
    export = ModelExport.objects.create(
        workspace=access.workspace, model=model, format=fmt, created_by=access.user
    )
    transaction.on_commit(lambda: export_run.delay(export.pk))
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
        "can_export": access.can(Perm.WRITE) and model.inspect_state == "ok",
    }


def export_get(*, workspace: Workspace, pk: int) -> ModelExport:
    export = (
        ModelExport.objects.for_workspace(workspace).select_related("model").filter(pk=pk).first()
    )
    if export is None:
        raise Http404("No such export.")
    return export


def export_latest(*, model: TrainedModel, fmt: str = "onnx") -> ModelExport | None:
    """The newest finished export of `model` to `fmt`; `model_local_path(model, e.file_key)`
    is then a local copy of it (an ONNX one can be served like the .pt)."""
    return (
        ModelExport.objects.filter(model=model, format=fmt, state=ExportState.SUCCEEDED)
        .exclude(file_key="")
        .first()
    )


def export_filename(export: ModelExport) -> str:
    fmt = FORMATS_BY_KEY[export.format]
    stem = f"kestrel-model-{export.model_id}"
    return f"{stem}{fmt.suffix}.zip" if fmt.is_folder else f"{stem}{fmt.suffix}"


# --- the job ------------------------------------------------------------------------------------


@shared_task(
    name="deploy.export_run",
    soft_time_limit=EXPORT_TIMEOUT_SECONDS + 5 * 60,
    time_limit=EXPORT_TIMEOUT_SECONDS + 6 * 60,
)
def export_run(export_id: int, **kwargs) -> None:
    """Run one export. Idempotent: an export already taken (or finished) is left alone."""
    if kwargs:
        logger.warning("deploy.export_run: unexpected arguments %s", sorted(kwargs))
    with transaction.atomic():
        export = (
            ModelExport.objects.select_for_update(skip_locked=True)
            .select_related("model")
            .filter(pk=export_id, state=ExportState.QUEUED)
            .first()
        )
        if export is None:
            return
        export.state = ExportState.RUNNING
        export.progress = 1
        export.save(update_fields=["state", "progress"])
    export_execute(export)


def _zip_folder(folder: Path, target: Path) -> Path:
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(folder.parent).as_posix())
    return target


def _export_finish(export: ModelExport, **fields) -> bool:
    """Write the end of a running export; False when it is gone or no longer running."""
    fields.setdefault("finished_at", timezone.now())
    return bool(
        ModelExport.objects.filter(pk=export.pk, state=ExportState.RUNNING).update(**fields)
    )


def export_execute(export: ModelExport) -> ModelExport:
    """Convert the model in a worker process, store the file (a folder format as a .zip) under
    exports/<model>/<export>/, and record progress, the log and the end on the row."""
    fmt = FORMATS_BY_KEY.get(export.format)
    model = export.model
    steps: list[str] = []

    def progress(percent: int, message: str) -> None:
        steps.append(message)
        ModelExport.objects.filter(pk=export.pk, state=ExportState.RUNNING).update(
            progress=max(1, percent), log="\n".join(steps)
        )

    if fmt is None:
        _export_finish(export, state=ExportState.FAILED, error=f"Unknown format {export.format}.")
        return export
    workdir = Path(settings.TRAINING_DIR) / "exports"
    workdir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix=f"export-{export.pk}-", dir=workdir))
    key = ""
    try:
        try:
            weights = model_local_path(model)
        except (OSError, ValueError) as e:
            _export_finish(
                export,
                state=ExportState.FAILED,
                error=f"The model's weights could not be read from storage ({type(e).__name__}).",
            )
            return export
        staged = workdir / f"kestrel-model-{model.pk}.pt"
        staged.symlink_to(Path(weights).resolve())
        answer = worker_run(
            ["export", str(staged), fmt.key, str(workdir), str(model.imgsz or 640)],
            timeout=EXPORT_TIMEOUT_SECONDS,
            on_progress=progress,
        )
        log = "\n".join(steps) + "\n\n" + answer.log
        if answer.error or not answer.result:
            _export_finish(
                export,
                state=ExportState.FAILED,
                error=f"The {fmt.label} export failed: {answer.error}",
                log=log[-LOG_TAIL_CHARS:],
            )
            return export
        output = Path(answer.result["path"])
        if output.is_dir():
            progress(92, "Zipping the folder")
            output = _zip_folder(output, workdir / export_filename(export))
        progress(95, "Storing the file")
        key = f"exports/{model.pk}/{export.pk}/{export_filename(export)}"
        storage_put_file(key, output)
        size = output.stat().st_size
        if not _export_finish(
            export,
            state=ExportState.SUCCEEDED,
            progress=100,
            file_key=key,
            file_size=size,
            error="",
            log=(log + "\nStored.")[-LOG_TAIL_CHARS:],
        ):
            default_storage.delete(key)  # the export (or its model) was deleted meanwhile
        key = ""
    except Exception as e:
        logger.exception("deploy.export_run %s failed", export.pk)
        if key:
            default_storage.delete(key)
        _export_finish(
            export,
            state=ExportState.FAILED,
            error=f"The {fmt.label} export failed: {type(e).__name__}: {e}"[:2000],
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    export.refresh_from_db()
    return export
