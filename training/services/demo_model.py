"""The demo model: trained once on the demo dataset by the first `make run`, as any job is.

The seed queues one real training job on "This machine" in the demo team's "Shapes" project,
from scratch (nothing to download). The job asks for its model to become the project's current
one and to be published beside the public demo dataset once it succeeds (promote_model,
publish_model), so a newcomer sees a model draw boxes on the demo's pictures within minutes of
starting Kestrel, without training anything themselves."""

import io
from pathlib import Path

from django.db import transaction

from datasets.models import Dataset, Task
from datasets.services.demo import TRAIN, demo_images
from training.models import GpuType, TrainingJob, WeightsSource
from training.services.arguments import TrainParams
from training.services.catalog import LOCAL_SLUG
from training.services.jobs import job_submit
from workspaces.models import Project, Workspace
from workspaces.selectors import WorkspaceAccess
from workspaces.services.projects import project_create

DEMO_PROJECT = "Shapes"
DEMO_JOB_NAME = "Demo model"
# Measured with bench/demo_train.py on a 2-core CPU: 20 epochs in 82 s of CPU time (2 to 3½
# minutes of wall time on a machine shared with other work), mAP50 0.99, and 35 of the 36 shapes
# of the val images found with confidence above 0.5.
DEMO_PARAMS = TrainParams(
    task=Task.DETECT,
    model_family="yolo11",
    model_size="n",
    weights=WeightsSource.SCRATCH,  # nothing to download: works offline
    epochs=20,
    imgsz=128,
    batch=8,
    patience=5,  # ends the run early once its accuracy stops improving
    optimizer="AdamW",
    seed=0,
    # A step per batch: Ultralytics' nominal batch (nbs, 64) would otherwise add up 64 images
    # before each step, two steps an epoch on 100 images. A higher rate than "auto" picks, one
    # epoch of warm-up, and the last epochs without mosaic, the shapes whole as they are drawn.
    extra_args={"nbs": 8, "lr0": 0.003, "warmup_epochs": 1, "close_mosaic": 6},
)
# What "finds the shapes" means for the demo: a box of the right class with more than this
# confidence, overlapping the drawn shape by at least this IoU.
FOUND_CONF = 0.5
FOUND_IOU = 0.5


@transaction.atomic
def demo_model_seed(*, access: WorkspaceAccess, dataset: Dataset) -> TrainingJob | None:
    """Queue the demo job on `dataset`'s latest version, once: None when the demo project has
    had a job already (seeding again, or after the demo model was trained)."""
    # Two seeds at once: the second waits here, then finds the first one's job.
    Workspace.objects.select_for_update().filter(pk=access.workspace.pk).first()
    project = Project.objects.for_workspace(access.workspace).filter(
        name__iexact=DEMO_PROJECT
    ).first() or project_create(
        access=access,
        name=DEMO_PROJECT,
        description="Finds circles, squares and triangles: the demo model, trained by the "
        "first start of Kestrel on the Shapes (demo) dataset.",
    )
    if TrainingJob.objects.for_workspace(access.workspace).filter(project=project).exists():
        return None
    job = job_submit(
        access=access,
        project=project,
        version=dataset.versions.order_by("-number").first(),
        gpu_type_id=GpuType.objects.get(slug=LOCAL_SLUG).pk,
        params=DEMO_PARAMS,
        name=DEMO_JOB_NAME,
    )
    # Set before the commit that sends the job to a worker.
    job.promote_model = job.publish_model = True
    job.save(update_fields=["promote_model", "publish_model"])
    return job


def _iou(a: list[float], b: list[float]) -> float:
    """IoU of two (x1, y1, x2, y2) boxes."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    inter = w * h
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def shapes_found(
    labels: list[tuple[int, list[float]]], results: list[tuple[int, float, list[float]]]
) -> int:
    """How many of one image's `labels` ((class, normalised cx cy w h)) a result finds:
    `results` are (class, confidence, normalised x1 y1 x2 y2)."""
    found = 0
    for cls, (cx, cy, w, h) in labels:
        truth = [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]
        if any(
            c == cls and conf > FOUND_CONF and _iou(truth, box) >= FOUND_IOU
            for c, conf, box in results
        ):
            found += 1
    return found


def demo_val_found(weights: Path) -> tuple[int, int]:
    """(shapes found, shapes drawn) over the demo's val images, by the weights at `weights`,
    loaded with Ultralytics: for benches and tests, never a web process."""
    from PIL import Image
    from ultralytics import YOLO

    model = YOLO(str(weights))
    found = total = 0
    for data, labels in demo_images()[TRAIN:]:
        [result] = model.predict(Image.open(io.BytesIO(data)), verbose=False, device="cpu")
        boxes = result.boxes
        results = list(
            zip(
                [int(c) for c in boxes.cls.tolist()],
                boxes.conf.tolist(),
                boxes.xyxyn.tolist(),
                strict=True,
            )
        )
        found += shapes_found(labels, results)
        total += len(labels)
    return found, total
