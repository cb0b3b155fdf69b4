"""Running a trained model (or GrabCut, or SAM) on stored images: local files for the CV code in
`annotation.assist`, and the loop of a pre-labelling run."""

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from django.db import transaction
from django.db.models import F

from annotation import assist
from annotation.models import PrelabelRun, PrelabelState
from annotation.services import model_class_map, suggestions_store
from core.leases import Lease, LeaseLost, LongJob, database_faults, lease_work
from core.storage import storage_get_file, storage_local_path
from core.tasks import task_send
from datasets.models import Image, LabelStatus
from training.models import TrainedModel
from training.services.models import model_local_path

logger = logging.getLogger(__name__)

BATCH = 16
_SUFFIX = {"image/png": ".png", "image/webp": ".webp", "image/bmp": ".bmp", "image/tiff": ".tif"}


@contextlib.contextmanager
def image_files(images: list[Image]) -> Iterator[list[Path]]:
    """Each image's bytes as a local file named with its format's suffix (Ultralytics picks
    its loader by suffix; blobs are stored by hash alone). Links where storage is local."""
    with tempfile.TemporaryDirectory(prefix="kestrel-assist-") as folder:
        paths = []
        for image in images:
            blob = image.blob
            path = Path(folder) / f"{image.pk}{_SUFFIX.get(blob.content_type, '.jpg')}"
            local = storage_local_path(blob.storage_key)
            if local is not None:
                os.symlink(local, path)
            else:
                storage_get_file(blob.storage_key, path)
            paths.append(path)
        yield paths


def image_predict(*, image: Image, model: TrainedModel, conf: float = 0.25) -> int:
    """Run the model on one image now; its suggestions replace the model's earlier ones."""
    class_map = model_class_map(model=model, dataset=image.dataset)
    with image_files([image]) as paths:
        (result,) = assist.model_predict(model_local_path(model), paths, conf=conf)
    Image.objects.filter(pk=image.pk).update(uncertainty=result.uncertainty)
    return suggestions_store(
        image=image, model=model, predictions=result.predictions, class_map=class_map
    )


def _send(run: PrelabelRun) -> None:
    task_send("annotation.prelabel_run", run.pk)


PRELABEL_JOB = LongJob(
    label="pre-labelling run",
    model=PrelabelRun,
    queued=PrelabelState.QUEUED,
    running=PrelabelState.RUNNING,
    failed=PrelabelState.FAILED,
    send=_send,
)


def prelabel_execute(run: PrelabelRun, lease: Lease) -> None:
    """The body of a pre-labelling run: batches of images through the model, progress counted
    after each batch. A failure marks the run failed with the reason; suggestions written by
    finished batches stay (each batch is whole). Each batch commits only under the lease: a
    worker that was given up on stops at its next write, and writes nothing more."""
    try:
        # A dropped database connection reruns the batches in place (a run starts over: each
        # image's suggestions replace that model's earlier ones), or requeues the run at once.
        lease_work(lease, lambda: _batches_run(run, lease))
    except LeaseLost:
        logger.warning("pre-labelling run %s: attempt %s lost its lease", run.pk, lease.attempt)


def _batches_run(run: PrelabelRun, lease: Lease) -> None:
    images = Image.objects.filter(dataset=run.dataset).select_related("blob", "dataset")
    if run.only_unlabelled:
        images = images.filter(status=LabelStatus.UNLABELLED)
    ids = list(images.values_list("pk", flat=True))
    # A resumed run starts over: storing an image's suggestions replaces that model's earlier ones.
    lease.renew(total=len(ids), done=0, suggestions=0)
    class_map = model_class_map(model=run.model, dataset=run.dataset)
    try:
        weights = model_local_path(run.model)
        for start in range(0, len(ids), BATCH):
            batch = list(images.filter(pk__in=ids[start : start + BATCH]).order_by("pk"))
            with image_files(batch) as paths:
                results = assist.model_predict(weights, paths, conf=run.conf)
            with transaction.atomic():
                lease.fence()
                stored = 0
                for image, result in zip(batch, results, strict=True):
                    Image.objects.filter(pk=image.pk).update(uncertainty=result.uncertainty)
                    stored += suggestions_store(
                        image=image,
                        model=run.model,
                        predictions=result.predictions,
                        class_map=class_map,
                    )
                lease.renew(done=F("done") + len(batch), suggestions=F("suggestions") + stored)
    except (LeaseLost, *database_faults()):
        raise
    except assist.AssistError as exc:
        lease.finish(PrelabelState.FAILED, error=str(exc)[:2000])
        return
    except Exception as exc:
        logger.exception("pre-labelling run %s failed", run.pk)
        lease.finish(PrelabelState.FAILED, error=f"The model could not run: {exc}"[:2000])
        return
    lease.finish(PrelabelState.SUCCEEDED, error="")
