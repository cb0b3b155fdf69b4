"""JSON API for training: submit a job, read it, stop, cancel, resume; metrics; trained models
(read, download, promote to the project's current model)."""

from datetime import datetime

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status

from core.errors import ServiceError
from core.files import stored_file_response
from datasets.models import Task
from training import selectors
from training.estimator import EstimateConfig, estimates_for, version_images
from training.models import ModelFamily, ModelSize, TrainedModel, TrainingJob, WeightsSource
from training.services.arguments import (
    BATCH_MAX,
    EPOCHS_MAX,
    IMGSZ_MAX,
    IMGSZ_MIN,
    IMGSZ_STRIDE,
    TrainParams,
    extra_args_parse,
)
from training.services.jobs import job_cancel, job_resume, job_stop, job_submit
from training.services.jobs_resume import job_resume_refusal
from training.services.models import model_promote
from training.streams import job_progress
from workspaces.models import Project
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess, project_get, row_for_caller

router = Router(tags=["training"])


class JobIn(Schema):
    project_id: int
    dataset_version_id: int
    gpu_type_id: int | None = Field(None, description="A machine from the catalog.")
    name: str = Field("", max_length=100)
    task: str | None = Field(
        None, description="detect, segment, pose, obb or classify; empty: the dataset's task."
    )
    model_family: str = Field("yolo26", description="yolo26, yolo11 or yolov8.")
    model_size: str = Field("n", description="n, s, m, l or x.")
    weights: str = Field(WeightsSource.PRETRAINED, description="scratch, pretrained or model.")
    base_model_id: int | None = Field(None, description="The model to fine-tune (weights=model).")
    epochs: int = 100
    imgsz: int = 640
    batch: int = Field(-1, description="-1: automatic.")
    patience: int = 100
    optimizer: str = "auto"
    seed: int = 0
    extra_args: dict | str = Field(
        default_factory=dict,
        description="Other Ultralytics training arguments: an object, or YAML text.",
    )
    quick_test: bool = Field(False, description="Two epochs on a small subset.")


class AttemptOut(Schema):
    number: int
    worker: str
    machine: str
    started_at: datetime
    ended_at: datetime | None
    end_reason: str
    message: str


class JobOut(Schema):
    id: int
    title: str
    workspace: str
    project_id: int
    dataset_version_id: int
    gpu_type_id: int
    device: str
    task: str
    model: str
    model_family: str
    model_size: str
    weights: str
    base_model_id: int | None
    epochs: int
    epoch: int = Field(description="Epochs done.")
    checkpoint_epoch: int | None
    imgsz: int
    batch: int
    patience: int
    optimizer: str
    seed: int
    extra_args: dict
    is_quick_test: bool
    state: str
    is_final: bool
    error: str
    failure_kind: str = Field(description="Why it failed (training.models.FailureKind), or empty.")
    resumable: bool = Field(
        description="Whether resume can help (stopped, or failed in a way "
        "another attempt may get past)."
    )
    progress: dict | None = Field(description="The running job's latest batch.")
    latest_metrics: dict
    final_metrics: dict
    artifacts: list[str]
    attempts: list[AttemptOut]
    trained_model_id: int | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class EpochOut(Schema):
    epoch: int
    attempt: int
    seconds: float | None
    values: dict


class ModelOut(Schema):
    id: int
    name: str
    workspace: str
    project_id: int
    job_id: int | None
    task: str
    architecture: str
    class_names: list
    imgsz: int
    dataset_version_id: int | None
    train_args: dict
    metrics: dict
    weights_size: int
    weights_sha256: str
    is_current: bool = Field(description="The project's current model (at most one per project).")
    created_at: datetime


def job_out(job: TrainingJob, *, workspace_slug: str) -> JobOut:
    return JobOut(
        id=job.pk,
        title=job.title,
        workspace=workspace_slug,
        project_id=job.project_id,
        dataset_version_id=job.dataset_version_id,
        gpu_type_id=job.gpu_type_id,
        device=job.device,
        task=job.task,
        model=job.model_name,
        model_family=job.model_family,
        model_size=job.model_size,
        weights=job.weights,
        base_model_id=job.base_model_id,
        epochs=job.epochs,
        epoch=job.epochs_done,
        checkpoint_epoch=job.checkpoint_epoch,
        imgsz=job.imgsz,
        batch=job.batch,
        patience=job.patience,
        optimizer=job.optimizer,
        seed=job.seed,
        extra_args=job.extra_args,
        is_quick_test=job.is_quick_test,
        state=job.state,
        is_final=job.is_final,
        error=job.error,
        failure_kind=job.failure_kind,
        resumable=not job_resume_refusal(job),
        progress=job_progress(job) if job.is_active else None,
        latest_metrics=job.latest_metrics,
        final_metrics=job.final_metrics,
        artifacts=sorted(job.artifacts),
        attempts=[
            AttemptOut(
                number=a.number,
                worker=a.worker,
                machine=a.machine,
                started_at=a.started_at,
                ended_at=a.ended_at,
                end_reason=a.end_reason,
                message=a.message,
            )
            for a in job.attempt_rows.all()
        ],
        trained_model_id=TrainedModel.objects.filter(job=job).values_list("pk", flat=True).first(),
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )


def model_out(model: TrainedModel, *, workspace_slug: str) -> ModelOut:
    return ModelOut(
        id=model.pk,
        name=model.name,
        workspace=workspace_slug,
        project_id=model.project_id,
        job_id=model.job_id,
        task=model.task,
        architecture=model.architecture,
        class_names=model.class_names,
        imgsz=model.imgsz,
        dataset_version_id=model.dataset_version_id,
        train_args=model.train_args,
        metrics=model.metrics,
        weights_size=model.weights_size,
        weights_sha256=model.weights_sha256,
        is_current=model.is_current,
        created_at=model.created_at,
    )


def _project_access(request: HttpRequest, project_id: int) -> WorkspaceAccess:
    """The caller's access to the workspace of a project (404 for strangers), able to train."""
    access, _ = row_for_caller(
        Project.objects.all(),
        pk=project_id,
        auth=request.auth,
        user=request.user,
        not_found="No such project.",
    )
    access.require(Perm.TRAIN)
    return access


@router.post("/training/jobs", response={201: JobOut})
def job_create(request: HttpRequest, payload: JobIn):
    """Queue a training job; 400 with the reason when it cannot train (nothing is queued)."""
    access = _project_access(request, payload.project_id)
    project = project_get(workspace=access.workspace, pk=payload.project_id)
    version = selectors.trainable_version_get(
        workspace=access.workspace, pk=payload.dataset_version_id
    )
    base_model = None
    if payload.base_model_id is not None:
        base_model = selectors.model_get(workspace=access.workspace, pk=payload.base_model_id)
    extra_args = payload.extra_args
    if isinstance(extra_args, str):
        extra_args = extra_args_parse(extra_args)
    params = TrainParams(
        task=payload.task or version.dataset.task,
        model_family=payload.model_family,
        model_size=payload.model_size,
        weights=payload.weights,
        epochs=payload.epochs,
        imgsz=payload.imgsz,
        batch=payload.batch,
        patience=payload.patience,
        optimizer=payload.optimizer,
        seed=payload.seed,
        extra_args=extra_args,
    )
    job = job_submit(
        access=access,
        project=project,
        version=version,
        gpu_type_id=payload.gpu_type_id,
        params=params,
        base_model=base_model,
        quick_test=payload.quick_test,
        name=payload.name,
    )
    return Status(201, job_out(job, workspace_slug=access.workspace.slug))


@router.get("/training/jobs/{job_id}", response=JobOut)
def job_get(request: HttpRequest, job_id: int):
    access, job = selectors.job_access_for_caller(auth=request.auth, user=request.user, pk=job_id)
    access.require(Perm.READ)
    return job_out(job, workspace_slug=access.workspace.slug)


@router.post("/training/jobs/{job_id}/stop", response=JobOut)
def job_stop_api(request: HttpRequest, job_id: int):
    """Finish the current batch, validate, keep best and last weights; end as stopped."""
    access, job = selectors.job_access_for_caller(auth=request.auth, user=request.user, pk=job_id)
    job = job_stop(access=access, job=job)
    return job_out(job, workspace_slug=access.workspace.slug)


@router.post("/training/jobs/{job_id}/cancel", response=JobOut)
def job_cancel_api(request: HttpRequest, job_id: int):
    """End the job at once; no model is made."""
    access, job = selectors.job_access_for_caller(auth=request.auth, user=request.user, pk=job_id)
    job = job_cancel(access=access, job=job)
    return job_out(job, workspace_slug=access.workspace.slug)


@router.post("/training/jobs/{job_id}/resume", response=JobOut)
def job_resume_api(request: HttpRequest, job_id: int):
    """Queue a stopped or failed job again, from its last checkpoint."""
    access, job = selectors.job_access_for_caller(auth=request.auth, user=request.user, pk=job_id)
    job = job_resume(access=access, job=job)
    return job_out(job, workspace_slug=access.workspace.slug)


@router.get("/training/jobs/{job_id}/metrics", response=list[EpochOut])
def job_metrics(request: HttpRequest, job_id: int):
    """Every finished epoch's values, in order."""
    access, job = selectors.job_access_for_caller(auth=request.auth, user=request.user, pk=job_id)
    access.require(Perm.READ)
    return [
        EpochOut(epoch=m.epoch, attempt=m.attempt, seconds=m.seconds, values=m.values)
        for m in selectors.job_epoch_metrics(job=job)
    ]


@router.get("/models/{model_id}", response=ModelOut)
def model_get(request: HttpRequest, model_id: int):
    access, model = selectors.model_access_for_caller(
        auth=request.auth, user=request.user, pk=model_id
    )
    access.require(Perm.READ)
    return model_out(model, workspace_slug=access.workspace.slug)


@router.get("/models/{model_id}/weights")
def model_weights(request: HttpRequest, model_id: int):
    """The model's weights, a PyTorch .pt file that Ultralytics' YOLO() loads."""
    access, model = selectors.model_access_for_caller(
        auth=request.auth, user=request.user, pk=model_id
    )
    access.require(Perm.READ)
    return stored_file_response(
        key=model.weights_key,
        filename=f"kestrel-model-{model.pk}-{model.architecture or 'yolo'}.pt",
    )


@router.post("/models/{model_id}/promote", response=ModelOut)
def model_promote_api(request: HttpRequest, model_id: int):
    """Make the model its project's current one; the previous current model stops being so."""
    access, model = selectors.model_access_for_caller(
        auth=request.auth, user=request.user, pk=model_id
    )
    model = model_promote(access=access, model=model)
    return model_out(model, workspace_slug=access.workspace.slug)


class EstimateIn(Schema):
    project_id: int
    dataset_version_id: int | None = Field(
        None, description="Counts its images; or give train_images (and val_images)."
    )
    train_images: int | None = Field(None, ge=1)
    val_images: int = Field(0, ge=0)
    task: str | None = Field(None, description="Empty: the dataset version's task (else detect).")
    model_family: str = "yolo26"
    model_size: str = "n"
    imgsz: int = 640
    epochs: int = 100
    batch: int = Field(-1, description="-1: automatic.")


class EstimateOut(Schema):
    gpu_type_id: int
    gpu_type: str
    name: str
    available: bool
    reason: str
    fits_in_memory: bool
    vram_needed_gb: float
    seconds_low: int
    seconds: int
    seconds_high: int
    credits: int = Field(description="Micro-credits.")
    credits_high: int
    bottleneck: str
    explanation: str
    calibration_jobs: int
    cheapest: bool
    fastest: bool
    best_value: bool


@router.post("/training/estimate", response=list[EstimateOut])
def job_estimate(request: HttpRequest, payload: EstimateIn):
    """Time, cost and memory fit of a job on every machine of the catalog, before it runs."""
    access = _project_access(request, payload.project_id)
    project_get(workspace=access.workspace, pk=payload.project_id)
    if payload.dataset_version_id is not None:
        version = selectors.trainable_version_get(
            workspace=access.workspace, pk=payload.dataset_version_id
        )
        train, val = version_images(version)
        task = payload.task or version.dataset.task
    elif payload.train_images:
        train, val, task = payload.train_images, payload.val_images, payload.task or "detect"
    else:
        raise ServiceError("Give dataset_version_id, or train_images.")
    if task not in Task.values:
        raise ServiceError(f"Unknown task {task!r}.")
    if payload.model_family not in ModelFamily.values:
        raise ServiceError(f"Unknown model family {payload.model_family!r}.")
    if payload.model_size not in ModelSize.values:
        raise ServiceError(f"Unknown model size {payload.model_size!r}.")
    if not IMGSZ_MIN <= payload.imgsz <= IMGSZ_MAX or payload.imgsz % IMGSZ_STRIDE:
        raise ServiceError(f"Image size must be a multiple of {IMGSZ_STRIDE} up to {IMGSZ_MAX}.")
    if not 1 <= payload.epochs <= EPOCHS_MAX:
        raise ServiceError(f"Epochs must be 1 to {EPOCHS_MAX}.")
    if not (payload.batch == -1 or 1 <= payload.batch <= BATCH_MAX):
        raise ServiceError(f"Batch must be -1 (auto) or 1 to {BATCH_MAX}.")
    config = EstimateConfig(
        task=task,
        model_family=payload.model_family,
        model_size=payload.model_size,
        imgsz=payload.imgsz,
        epochs=payload.epochs,
        batch=payload.batch,
        train_images=train,
        val_images=val,
    )
    return [
        EstimateOut(
            gpu_type_id=row.gpu.pk,
            gpu_type=row.gpu.slug,
            name=row.gpu.name,
            available=row.available,
            reason=row.reason,
            cheapest=row.cheapest,
            fastest=row.fastest,
            best_value=row.best_value,
            **row.estimate.__dict__,
        )
        for row in estimates_for(config, access.workspace)
    ]
