"""Training rows as the engine leaves them, written directly: pages and the API read them
without a worker having run anything."""

import io
from datetime import timedelta

from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.utils import timezone
from PIL import Image as PILImage

from datasets.services.versions import version_create
from tests.datasets.factories import (
    DatasetClassFactory,
    DatasetFactory,
    ImageFactory,
    LabelFactory,
    png_bytes,
)
from training.models import (
    AttemptEnd,
    EpochMetric,
    GpuType,
    JobState,
    LogChunk,
    TrainedModel,
    TrainingAttempt,
    TrainingJob,
)
from training.services.catalog import gpu_catalog_seed

WEIGHTS = b"not really a torch file, but bytes to stream"
PNG = png_bytes(320, 200, color=(90, 140, 200))  # a plot, as Ultralytics saves them


def local_gpu() -> GpuType:
    gpu_catalog_seed()
    return GpuType.objects.get(slug="local")


def small_version(*, access, name: str = "Trainable"):
    """A version of a one-class detect dataset with images in train and val (no real pixels
    are read: submitting a job reads the manifest only)."""
    dataset = DatasetFactory(workspace=access.workspace, name=name)
    cls = DatasetClassFactory(dataset=dataset, index=0, name="bird")
    for split in ("train", "train", "train", "val"):
        LabelFactory(image=ImageFactory(dataset=dataset, split=split), dataset_class=cls)
    return version_create(access=access, dataset=dataset, note="to train")


def job_row(*, project, version, gpu, user=None, **fields) -> TrainingJob:
    values = {
        "workspace": project.workspace,
        "project": project,
        "dataset_version": version,
        "gpu_type": gpu,
        "created_by": user,
        "task": version.dataset.task,
        "model_family": "yolo11",
        "model_size": "n",
        "epochs": 3,
        "imgsz": 64,
        "batch": 2,
        "device": gpu.description or gpu.name,
        "queued_at": timezone.now(),
        **fields,
    }
    return TrainingJob.objects.create(**values)


def metrics_of(epoch: int) -> dict:
    return {
        "train/box_loss": 1.5 - epoch / 10,
        "train/cls_loss": 2.5 - epoch / 10,
        "metrics/precision(B)": 0.5 + epoch / 100,
        "metrics/recall(B)": 0.4 + epoch / 100,
        "metrics/mAP50(B)": 0.3 + epoch / 10,
        "metrics/mAP50-95(B)": 0.2 + epoch / 10,
        "val/box_loss": 1.6 - epoch / 10,
        "val/cls_loss": 2.6 - epoch / 10,
        "lr/pg0": 0.001 * epoch,
    }


def finished_job(*, project, version, gpu, user=None, state=JobState.SUCCEEDED) -> TrainingJob:
    """A job that trained 3 epochs on one attempt: metrics, a log, files, and its model."""
    now = timezone.now()
    job = job_row(
        project=project,
        version=version,
        gpu=gpu,
        user=user,
        name="Finished run",
        state=state,
        attempts=1,
        epochs_done=3,
        checkpoint_epoch=3,
        latest_metrics=metrics_of(3),
        final_metrics={"metrics/mAP50(B)": 0.6, "metrics/mAP50-95(B)": 0.5},
        started_at=now - timedelta(minutes=5),
        finished_at=now,
    )
    TrainingAttempt.objects.create(
        job=job,
        number=1,
        worker="worker-a:123",
        machine="test machine",
        ended_at=now,
        end_reason=AttemptEnd.FINISHED,
        message="all good",
    )
    for epoch in (1, 2, 3):
        EpochMetric.objects.create(
            job=job, epoch=epoch, attempt=1, values=metrics_of(epoch), seconds=1.5
        )
    LogChunk.objects.create(
        job=job, attempt=1, seq=1, text="Starting training for 3 epochs...\n<b>not bold</b>"
    )
    LogChunk.objects.create(job=job, attempt=1, seq=2, text="3 epochs completed in 0.01 hours.")
    last = default_storage.save(f"training/jobs/{job.pk}/last.pt", ContentFile(WEIGHTS))
    plot = default_storage.save(f"training/jobs/{job.pk}/plots/results.png", ContentFile(PNG))
    job.artifacts = {"last.pt": last, "results.png": plot}
    job.inspected_weights = {"last.pt": last}  # as the supervisor stores a checkpoint that passed
    job.save(update_fields=["artifacts", "inspected_weights"])
    weights = default_storage.save(f"models/{job.pk}/weights.pt", ContentFile(WEIGHTS))
    TrainedModel.objects.create(
        workspace=project.workspace,
        project=project,
        job=job,
        name=f"{job.title} · {job.model_name}",
        task=job.task,
        architecture=job.model_name,
        class_names=["bird"],
        imgsz=job.imgsz,
        dataset_version=version,
        train_args={"epochs": 3, "imgsz": 64},
        metrics=job.final_metrics,
        weights_key=weights,
        weights_size=len(WEIGHTS),
        created_by=user,
    )
    return job


def jpg_bytes(width: int, height: int, color) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (width, height), color).save(out, format="JPEG")
    return out.getvalue()


JPG = jpg_bytes(320, 240, (200, 120, 60))  # stands in for Ultralytics' validation mosaics
ANSI_LOG = [
    "\x1b[34m\x1b[1mtrain:\x1b[0m Scanning labels... 4 images, 0 backgrounds",
    "      Epoch    GPU_mem   box_loss   cls_loss",
    "Traceback (most recent call last):",
    '  File "train.py", line 1, in <module>',
    "ValueError: not really, a test",
    "\x1b[32mall good\x1b[0m after all",
]


def job_with_results(*, project, version, gpu, user=None) -> TrainingJob:
    """finished_job with what the final validation leaves: per-class rows and a confusion
    matrix for "bird" (the version's class) and "cat" (a class the dataset no longer has),
    curves and validation images, and a coloured log from a second attempt."""
    job = finished_job(project=project, version=version, gpu=gpu, user=user)
    job.results = {
        "per_class": [
            {
                "class": "bird",
                "images": 4.0,
                "instances": 10.0,
                "precision": 0.9,
                "recall": 0.8,
                "mAP50": 0.7,
                "mAP50-95": 0.5,
            },
            {
                "class": "cat",
                "images": 2.0,
                "instances": 3.0,
                "precision": 0.4,
                "recall": 0.3,
                "mAP50": 0.25,
                "mAP50-95": 0.125,
            },
        ],
        "confusion_matrix": {
            "names": ["bird", "cat", "background"],
            "matrix": [[8, 1, 2], [1, 2, 0], [1, 0, 0]],  # rows predicted, columns true
        },
    }
    artifacts = dict(job.artifacts)
    for name, data in (
        ("BoxPR_curve.png", PNG),
        ("BoxF1_curve.png", PNG),
        ("confusion_matrix_normalized.png", PNG),
        ("val_batch0_pred.jpg", JPG),
        ("val_batch0_labels.jpg", JPG),
    ):
        key = f"training/jobs/{job.pk}/plots/{name}"
        artifacts[name] = default_storage.save(key, ContentFile(data))
    job.artifacts = artifacts
    job.attempts = 2
    job.save(update_fields=["results", "artifacts", "attempts"])
    LogChunk.objects.create(job=job, attempt=2, seq=1, text="\n".join(ANSI_LOG))
    return job


def trained_model_row(
    *, workspace, class_names: list[str], task: str = "detect", weights: bytes = WEIGHTS
) -> TrainedModel:
    """A model registered in a workspace (as an upload leaves it), with `weights` in storage."""
    from tests.workspaces.factories import ProjectFactory

    project = ProjectFactory(workspace=workspace)
    model = TrainedModel.objects.create(
        workspace=workspace,
        project=project,
        name=f"Model of {project.name}",
        task=task,
        architecture="yolo11n",
        class_names=class_names,
        imgsz=64,
        weights_key="",
        weights_size=len(weights),
    )
    model.weights_key = default_storage.save(f"models/{model.pk}/weights.pt", ContentFile(weights))
    model.save(update_fields=["weights_key"])
    return model
