"""A segment (polygon) dataset turned into a semantic one: a new dataset in the same workspace
with the same images, each image's polygons rasterised into a class mask by Ultralytics' own
rule, so the masks are the ones stock `yolo` would draw from the polygons while training
(`ultralytics.data.dataset.PolygonSemanticDataset.load_mask`).

`semantic_dataset_from_segment` writes the dataset, its classes and its image rows at once
(a request); the masks are drawn by a worker (`datasets.semantic_convert`), which is
idempotent: an image that has its mask is left alone, so a redelivered task finishes the rest.
"""

import logging
from collections import defaultdict

import numpy as np
from django.db import IntegrityError, transaction

from core.errors import ServiceError
from core.tasks import task_send_on_commit
from datasets.models import (
    IGNORE_INDEX,
    Dataset,
    DatasetClass,
    Image,
    Label,
    LabelKind,
    PixelMap,
    Task,
)
from datasets.services.clone import _free_name
from datasets.services.pixel_maps import PixelMapError, pixel_map_save
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

logger = logging.getLogger(__name__)

BATCH = 200


def semantic_class_names(names: list[str]) -> list[str]:
    """The semantic dataset's classes: the polygon classes in their order, then the background
    class where Ultralytics' `add_polygon_background` puts it for nc > 1 (asked at run time).
    One polygon class gets a background class too: Ultralytics trains that case as binary
    (0 = background, 1 = the class, no name for it); two named classes are the same model, and
    every mask value then names a class of the dataset."""
    from ultralytics.data.utils import add_polygon_background

    if len(names) == 1:
        return [*names, "background"]
    data = add_polygon_background({"names": dict(enumerate(names))})
    return [data["names"][i] for i in range(data["nc"])]


def polygons_rasterise(
    *, width: int, height: int, polygons: list[tuple[int, list[float]]], background: int
) -> np.ndarray:
    """An image's mask from its (class index, normalised [x1, y1, ...]) polygons, as
    `PolygonSemanticDataset.load_mask` draws it: smaller polygons over larger ones, every
    pixel outside them the background class."""
    from ultralytics.data.utils import polygons2masks_overlap

    out = np.full((height, width), background, dtype=np.uint8)
    if not polygons:
        return out
    scale = np.array([width, height], dtype=np.float32)
    polys = [np.asarray(data, dtype=np.float32).reshape(-1, 2) * scale for _, data in polygons]
    inst, sorted_idx = polygons2masks_overlap((height, width), polys, downsample_ratio=1)
    cls = np.asarray([c for c, _ in polygons], dtype=np.int32)[sorted_idx]
    fg = inst > 0
    out[fg] = cls[inst[fg] - 1].astype(np.uint8)
    return out


@transaction.atomic
def semantic_dataset_from_segment(
    *, access: WorkspaceAccess, source: Dataset, name: str | None = None
) -> Dataset:
    """The semantic copy of a segment dataset: same images (rows only; blobs are shared), the
    polygon classes + background; its masks are drawn by the worker task queued on commit."""
    access.require(Perm.WRITE)
    if source.workspace_id != access.workspace.pk:
        raise ServiceError("A dataset is converted within its own workspace.")
    if source.task != Task.SEGMENT:
        raise ServiceError(
            f"Only a segment (polygon) dataset can be turned into a semantic one; "
            f"“{source.name}” is {source.get_task_display().lower()}."
        )
    names = list(source.classes.order_by("index").values_list("name", flat=True))
    if not names:
        raise ServiceError(f"“{source.name}” has no classes to draw masks of.")
    if len(names) + 1 > IGNORE_INDEX:
        raise ServiceError(
            f"A semantic mask holds at most {IGNORE_INDEX - 1} classes and a background; "
            f"“{source.name}” has {len(names)} classes."
        )
    classes = semantic_class_names(names)
    if classes[-1] in names:
        raise ServiceError(
            f"“{source.name}” already has a class named “{classes[-1]}”, the name Ultralytics "
            "gives the pixels no polygon covers; rename it first."
        )
    wanted = (name or "").strip() or _free_name(access.workspace, f"{source.name[:87]} (semantic)")
    target = Dataset(
        workspace=access.workspace,
        name=wanted[:100],
        task=Task.SEMANTIC,
        description=source.description,
        cloned_from=source,
        created_by=access.user,
    )
    try:
        with transaction.atomic():
            target.save()
    except IntegrityError:
        raise ServiceError(f"A dataset named “{target.name}” already exists here.") from None
    DatasetClass.objects.bulk_create(
        DatasetClass(dataset=target, index=i, name=n) for i, n in enumerate(classes)
    )
    rows = (
        Image.objects.filter(dataset=source)
        .order_by("id")
        .values_list("blob_id", "filename", "split")
    )
    batch: list[Image] = []
    for blob_id, filename, split in rows.iterator(chunk_size=2000):
        batch.append(Image(dataset=target, blob_id=blob_id, filename=filename, split=split))
        if len(batch) == 1000:
            Image.objects.bulk_create(batch)
            batch = []
    Image.objects.bulk_create(batch)

    task_send_on_commit("datasets.semantic_convert", source.pk, target.pk)
    return target


def semantic_convert_run(*, source_id: int, target_id: int) -> int:
    """Draw the masks of a semantic dataset made by `semantic_dataset_from_segment`, from its
    source's polygons. Each image's source is the source image of the same blob and file name
    (the first not yet used, for copies): images deleted from either since are skipped.
    Returns how many masks were drawn now."""
    target = Dataset.objects.filter(pk=target_id, task=Task.SEMANTIC).first()
    source = Dataset.objects.filter(pk=source_id).first()
    if target is None or source is None:
        return 0
    # The source's class (by id) → its position, which is the mask value (renumbered as the
    # manifest does, so gaps in the source's indexes do not shift classes).
    position = {
        pk: i for i, pk in enumerate(source.classes.order_by("index").values_list("id", flat=True))
    }
    background = target.classes.count() - 1
    sources: dict[tuple[int, str], list[int]] = defaultdict(list)
    for pk, blob_id, filename in (
        Image.objects.filter(dataset=source).order_by("id").values_list("id", "blob_id", "filename")
    ):
        sources[(blob_id, filename)].append(pk)
    pending = list(
        Image.objects.filter(dataset=target)
        .exclude(pk__in=PixelMap.objects.filter(image__dataset=target).values("image_id"))
        .order_by("id")
        .select_related("blob")
    )
    # Images that already have a mask took their source first (the same order as the first run).
    done = Image.objects.filter(dataset=target, pixel_map__isnull=False).values_list(
        "blob_id", "filename"
    )
    for key in done:
        if sources.get(key):
            sources[key].pop(0)
    drawn = 0
    for start in range(0, len(pending), BATCH):
        chunk = pending[start : start + BATCH]
        pairs = {}
        for image in chunk:
            candidates = sources.get((image.blob_id, image.filename))
            if candidates:
                pairs[image.pk] = candidates.pop(0)
        polygons: dict[int, list[tuple[int, list[float]]]] = defaultdict(list)
        for image_id, class_id, data in Label.objects.filter(
            image_id__in=pairs.values(), kind=LabelKind.POLYGON
        ).values_list("image_id", "dataset_class_id", "data"):
            if class_id in position and _is_polygon(data):
                polygons[image_id].append((position[class_id], data))
        for image in chunk:
            if image.pk not in pairs:
                continue
            mask = polygons_rasterise(
                width=image.blob.width,
                height=image.blob.height,
                polygons=polygons.get(pairs[image.pk], []),
                background=background,
            )
            try:
                pixel_map_save(image=image, array=mask, dataset=target)
            except PixelMapError as e:  # cannot happen with our own classes; say so if it does
                logger.warning("semantic convert: image %s not drawn: %s", image.pk, e)
                continue
            drawn += 1
    return drawn


def _is_polygon(data) -> bool:
    return (
        isinstance(data, list)
        and len(data) >= 6
        and len(data) % 2 == 0
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in data)
    )
