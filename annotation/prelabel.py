"""Running a trained model (or GrabCut, or SAM) on stored images: local files for the CV code in
`annotation.assist`, and the loop of a pre-labelling run."""

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from django.core.files.storage import FileSystemStorage, default_storage
from django.db.models import F
from django.utils import timezone

from annotation import assist
from annotation.models import PrelabelRun, PrelabelState
from annotation.services import model_class_map, suggestions_store
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
            if isinstance(default_storage, FileSystemStorage):
                os.symlink(default_storage.path(blob.storage_key), path)
            else:
                with default_storage.open(blob.storage_key, "rb") as src, path.open("wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
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


def prelabel_execute(run: PrelabelRun) -> None:
    """The body of a pre-labelling run: batches of images through the model, progress counted
    after each batch. A failure marks the run failed with the reason; suggestions written by
    finished batches stay (each batch is whole)."""
    PrelabelRun.objects.filter(pk=run.pk).update(state=PrelabelState.RUNNING)
    images = Image.objects.filter(dataset=run.dataset).select_related("blob", "dataset")
    if run.only_unlabelled:
        images = images.filter(status=LabelStatus.UNLABELLED)
    ids = list(images.values_list("pk", flat=True))
    PrelabelRun.objects.filter(pk=run.pk).update(total=len(ids))
    class_map = model_class_map(model=run.model, dataset=run.dataset)
    try:
        weights = model_local_path(run.model)
        for start in range(0, len(ids), BATCH):
            batch = list(images.filter(pk__in=ids[start : start + BATCH]).order_by("pk"))
            with image_files(batch) as paths:
                results = assist.model_predict(weights, paths, conf=run.conf)
            stored = 0
            for image, result in zip(batch, results, strict=True):
                Image.objects.filter(pk=image.pk).update(uncertainty=result.uncertainty)
                stored += suggestions_store(
                    image=image,
                    model=run.model,
                    predictions=result.predictions,
                    class_map=class_map,
                )
            PrelabelRun.objects.filter(pk=run.pk).update(
                done=F("done") + len(batch), suggestions=F("suggestions") + stored
            )
    except assist.AssistError as exc:
        _finish(run, PrelabelState.FAILED, str(exc))
        return
    except Exception as exc:
        logger.exception("pre-labelling run %s failed", run.pk)
        _finish(run, PrelabelState.FAILED, f"The model could not run: {exc}")
        return
    _finish(run, PrelabelState.SUCCEEDED, "")


def _finish(run: PrelabelRun, state: str, error: str) -> None:
    PrelabelRun.objects.filter(pk=run.pk).update(
        state=state, error=error[:2000], finished_at=timezone.now()
    )
