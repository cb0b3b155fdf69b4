"""Trained models: the ones jobs make, and weights a person uploads to fine-tune from
(inspected by training.services.inspection)."""

import hashlib
import os
import tempfile
import uuid
from pathlib import Path
from typing import BinaryIO

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction

from core.errors import ServiceError
from core.storage import (
    storage_delete,
    storage_get_file,
    storage_local_path,
    storage_put,
    storage_put_file,
)
from core.tasks import task_send_on_commit
from datasets.models import Task
from datasets.services.ingest import display_name
from training.models import InspectState, TrainedModel, TrainingJob
from workspaces.models import Project
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

ZIP_MAGIC = b"PK\x03\x04"


def _megabytes(size: int) -> str:
    """Sizes as plans state them (decimal: 200 MB, 2 GB)."""
    return f"{size / 1000**3:.3g} GB" if size >= 1000**3 else f"{size / 1000**2:.3g} MB"


@transaction.atomic
def model_upload(
    *, access: WorkspaceAccess, project: Project, name: str, task: str, upload: UploadedFile
) -> TrainedModel:
    """Keep an uploaded .pt, up to the plan's size limit. It is never loaded here: a worker
    process inspects it (training.services.inspection: its pickle checked, then loaded to read its
    task, classes and image size); until then it is pending and nothing uses it."""
    access.require(Perm.TRAIN)
    if not access.owns(project):
        raise ServiceError("This project belongs to another workspace.")
    if task not in Task.values:
        raise ServiceError(f"Pick the task the weights were trained for, not “{task[:20]}”.")
    filename = display_name(upload.name or "weights.pt")
    if not filename.lower().endswith(".pt"):
        raise ServiceError(f"{filename} is not a .pt file.")
    plan = access.workspace.plan
    if upload.size > plan.max_model_upload_bytes:
        raise ServiceError(
            f"{filename} is larger than the {plan.name} plan's limit for weights files, "
            f"{_megabytes(plan.max_model_upload_bytes)}."
        )
    digest = hashlib.sha256()
    with tempfile.NamedTemporaryFile(suffix=".pt") as tmp:
        head = b""
        for chunk in upload.chunks():
            head = head or chunk[:4]
            digest.update(chunk)
            tmp.write(chunk)
        tmp.flush()
        if head != ZIP_MAGIC:
            raise ServiceError(
                f"{filename} is not a PyTorch checkpoint (a .pt saved by torch.save is a zip file)."
            )
        model = TrainedModel.objects.create(
            workspace=access.workspace,
            project=project,
            name=(name.strip() or filename)[:100],
            task=task,
            architecture="uploaded",
            imgsz=640,
            train_args={"source": "upload", "filename": filename},
            weights_key="",
            weights_size=upload.size,
            weights_sha256=digest.hexdigest(),
            created_by=access.user,
            inspect_state=InspectState.PENDING,
        )
        model.weights_key = f"models/{model.pk}/{model.weights_sha256[:16]}.pt"
        storage_put_file(model.weights_key, Path(tmp.name))
    model.save(update_fields=["weights_key"])
    task_send_on_commit("training.model_inspect", model.pk)
    return model


@transaction.atomic
def model_promote(*, access: WorkspaceAccess, model: TrainedModel) -> TrainedModel:
    """Make `model` its project's current model; the one that was current stops being so."""
    access.require(Perm.TRAIN)
    if not access.owns(model):
        raise ServiceError("This model belongs to another workspace.")
    return model_make_current(model=model)


@transaction.atomic
def model_make_current(*, model: TrainedModel) -> TrainedModel:
    """model_promote's write, for a job that asked for it (TrainingJob.promote_model)."""
    # Two promotions in one project wait for each other here rather than one failing on the
    # one-current-model constraint.
    Project.objects.select_for_update().filter(pk=model.project_id).first()
    TrainedModel.objects.filter(project_id=model.project_id, is_current=True).exclude(
        pk=model.pk
    ).update(is_current=False)
    model.is_current = True  # written even when it looks current: the row may be stale
    model.save(update_fields=["is_current"])
    return model


def model_local_path(model: TrainedModel, key: str | None = None) -> Path:
    """A local file of the model (its weights, or `key`, say an export), fetched from storage
    once per content when storage is not a local folder."""
    key = key or model.weights_key
    local = storage_local_path(key)
    if local is not None:
        return local
    target = _model_cache_path(model, key)
    if not target.exists():
        tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}"
        storage_get_file(key, tmp)
        os.replace(tmp, target)
    return target


def _model_cache_path(model: TrainedModel, key: str) -> Path:
    folder = Path(settings.TRAINING_DIR) / "model-cache"
    digest = hashlib.sha256(f"{key}:{model.weights_sha256}".encode()).hexdigest()[:16]
    return folder / f"{model.pk}-{digest}{Path(key).suffix}"


def model_weights_delete(*, model: TrainedModel) -> None:
    """Delete a model's weights from storage and from this machine's cache of them: an upload
    that failed inspection is kept by nobody, so no later request can point anything at it."""
    if not model.weights_key:
        return
    storage_delete(model.weights_key)
    _model_cache_path(model, model.weights_key).unlink(missing_ok=True)  # S3's local copy


def model_from_job(*, job: TrainingJob, best: BinaryIO, names: list, metrics: dict) -> TrainedModel:
    """The job's model from its final best.pt. A stopped job resumed to the end keeps its one
    model row, now with the final weights."""
    fields = {
        "workspace_id": job.workspace_id,
        "project_id": job.project_id,
        "name": f"{job.title} · {job.model_name}",
        "task": job.task,
        "architecture": job.model_name,
        "class_names": names,
        "imgsz": job.imgsz,
        "dataset_version_id": job.dataset_version_id,
        "train_args": {
            "epochs": job.epochs,
            "imgsz": job.imgsz,
            "batch": job.batch,
            "patience": job.patience,
            "optimizer": job.optimizer,
            "seed": job.seed,
            "weights": job.weights,
            **job.extra_args,
        },
        "metrics": metrics or job.latest_metrics,
        "created_by_id": job.created_by_id,
    }
    model, _ = TrainedModel.objects.update_or_create(job=job, defaults=fields)
    digest = hashlib.sha256()
    size = 0
    while block := best.read(1 << 20):
        digest.update(block)
        size += len(block)
    best.seek(0)
    model.weights_sha256 = digest.hexdigest()
    # Content-addressed key: a deployment of the earlier weights keeps reading those bytes.
    model.weights_key = f"models/{model.pk}/{model.weights_sha256[:16]}.pt"
    model.weights_size = size
    storage_put(model.weights_key, best, replace=True)
    model.save(update_fields=["weights_key", "weights_size", "weights_sha256"])
    return model
