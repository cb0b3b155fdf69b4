"""JSON API for training: submit a job, read it, stop, cancel, resume; metrics; trained models
(read, download, promote to the project's current model)."""

from datetime import datetime

from django.http import Http404, HttpRequest
from ninja import Field, Router, Schema, Status

from core.errors import ServiceError
from core.files import stored_file_response
from datasets.models import DatasetVersion, Task
from training import selectors
from training.estimator import EstimateConfig, estimates_for, version_images
from training.models import (
    InspectState,
    ModelFamily,
    ModelSize,
    TrainedModel,
    TrainingJob,
    WeightsSource,
)
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
    train_anyway: bool = Field(
        False,
        description="Train despite the warnings of the version's data checks (the ones the "
        "health page lists for it); errors refuse it whatever this says.",
    )


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
    kind: str = Field(description="kestrel, or external: stock ultralytics on the user's machine.")
    dataset_version_id: int | None = Field(description="Empty for an external run on local data.")
    gpu_type_id: int | None = Field(description="Empty for an external run (the user's machine).")
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

    @staticmethod
    def of(job: TrainingJob, *, workspace_slug: str) -> "JobOut":
        return JobOut.model_validate(job, context={"workspace": workspace_slug})

    @staticmethod
    def resolve_workspace(job, context) -> str:
        return context["workspace"]

    @staticmethod
    def resolve_model(job) -> str:
        return job.model_name

    @staticmethod
    def resolve_epoch(job) -> int:
        return job.epochs_done

    @staticmethod
    def resolve_resumable(job) -> bool:
        return not job_resume_refusal(job)

    @staticmethod
    def resolve_progress(job) -> dict | None:
        return job_progress(job) if job.is_active else None

    @staticmethod
    def resolve_artifacts(job) -> list[str]:
        return sorted(job.artifacts_served)

    @staticmethod
    def resolve_attempts(job):
        return job.attempt_rows.all()

    @staticmethod
    def resolve_trained_model_id(job) -> int | None:
        return TrainedModel.objects.filter(job=job).values_list("pk", flat=True).first()


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

    @staticmethod
    def of(model: TrainedModel, *, workspace_slug: str) -> "ModelOut":
        return ModelOut.model_validate(model, context={"workspace": workspace_slug})

    @staticmethod
    def resolve_workspace(model, context) -> str:
        return context["workspace"]


def project_train_access(request: HttpRequest, project_id: int) -> WorkspaceAccess:
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


def run_inputs(
    access: WorkspaceAccess, payload: Schema, *, task: str | None, seed: int
) -> tuple[DatasetVersion, TrainedModel | None, TrainParams]:
    """The version, the model to fine-tune and the run's parameters a payload names (a job's,
    or every trial's of a sweep): the ids looked up in the caller's workspace (another's: 404),
    the Ultralytics arguments an object or YAML text."""
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
        task=task or version.dataset.task,
        model_family=payload.model_family,
        model_size=payload.model_size,
        weights=payload.weights,
        epochs=payload.epochs,
        imgsz=payload.imgsz,
        batch=payload.batch,
        patience=payload.patience,
        optimizer=payload.optimizer,
        seed=seed,
        extra_args=extra_args,
    )
    return version, base_model, params


@router.post("/training/jobs", response={201: JobOut})
def job_create(request: HttpRequest, payload: JobIn):
    """Queue a training job; 400 with the reason when it cannot train (nothing is queued)."""
    access = project_train_access(request, payload.project_id)
    project = project_get(workspace=access.workspace, pk=payload.project_id)
    version, base_model, params = run_inputs(access, payload, task=payload.task, seed=payload.seed)
    job = job_submit(
        access=access,
        project=project,
        version=version,
        gpu_type_id=payload.gpu_type_id,
        params=params,
        base_model=base_model,
        quick_test=payload.quick_test,
        name=payload.name,
        train_anyway=payload.train_anyway,
    )
    return Status(201, JobOut.of(job, workspace_slug=access.workspace.slug))


@router.get("/training/jobs/{job_id}", response=JobOut)
def job_get(request: HttpRequest, job_id: int):
    access, job = selectors.job_access_for_caller(auth=request.auth, user=request.user, pk=job_id)
    access.require(Perm.READ)
    return JobOut.of(job, workspace_slug=access.workspace.slug)


@router.post("/training/jobs/{job_id}/stop", response=JobOut)
def job_stop_api(request: HttpRequest, job_id: int):
    """Finish the current batch, validate, keep best and last weights; end as stopped."""
    access, job = selectors.job_access_for_caller(auth=request.auth, user=request.user, pk=job_id)
    job = job_stop(access=access, job=job)
    return JobOut.of(job, workspace_slug=access.workspace.slug)


@router.post("/training/jobs/{job_id}/cancel", response=JobOut)
def job_cancel_api(request: HttpRequest, job_id: int):
    """End the job at once; no model is made."""
    access, job = selectors.job_access_for_caller(auth=request.auth, user=request.user, pk=job_id)
    job = job_cancel(access=access, job=job)
    return JobOut.of(job, workspace_slug=access.workspace.slug)


@router.post("/training/jobs/{job_id}/resume", response=JobOut)
def job_resume_api(request: HttpRequest, job_id: int):
    """Queue a stopped or failed job again, from its last checkpoint."""
    access, job = selectors.job_access_for_caller(auth=request.auth, user=request.user, pk=job_id)
    job = job_resume(access=access, job=job)
    return JobOut.of(job, workspace_slug=access.workspace.slug)


@router.get("/training/jobs/{job_id}/metrics", response=list[EpochOut])
def job_metrics(request: HttpRequest, job_id: int):
    """Every finished epoch's values, in order."""
    access, job = selectors.job_access_for_caller(auth=request.auth, user=request.user, pk=job_id)
    access.require(Perm.READ)
    return selectors.job_epoch_metrics(job=job)


@router.get("/models/{model_id}", response=ModelOut)
def model_get(request: HttpRequest, model_id: int):
    access, model = selectors.model_access_for_caller(
        auth=request.auth, user=request.user, pk=model_id
    )
    access.require(Perm.READ)
    return ModelOut.of(model, workspace_slug=access.workspace.slug)


@router.get("/models/{model_id}/weights")
def model_weights(request: HttpRequest, model_id: int):
    """The model's weights, a PyTorch .pt file that Ultralytics' YOLO() loads, once they passed
    inspection (pending or refused ones are never served)."""
    access, model = selectors.model_access_for_caller(
        auth=request.auth, user=request.user, pk=model_id
    )
    access.require(Perm.READ)
    if model.inspect_state != InspectState.OK:
        raise Http404("These weights have not passed inspection; they are not served.")
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
    return ModelOut.of(model, workspace_slug=access.workspace.slug)


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
    access = project_train_access(request, payload.project_id)
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
