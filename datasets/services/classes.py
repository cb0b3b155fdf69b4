"""Class management: list with counts, add, rename, merge, delete (indexes stay 0..n-1, and a
semantic dataset's masks follow them)."""

import numpy as np
from django.db import IntegrityError, transaction
from django.db.models import Exists, F, Max, OuterRef
from django.http import Http404

from core.errors import ServiceError
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
from datasets.selectors.counts import class_label_counts
from datasets.selectors.gallery import class_colour
from datasets.services.gallery import dataset_lock, dataset_touch, image_label_counts_refresh
from datasets.services.pixel_maps import (
    blob_for_map,
    labelled_count,
    pixel_map_load,
    pixel_map_store,
)
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

REMAP_BATCH = 200


def class_list_with_counts(*, dataset: Dataset) -> list[DatasetClass]:
    """Exact counts up to a thousand, estimated or "more than" past it (selectors.counts)."""
    classes = class_label_counts(dataset=dataset, images=True)
    for c in classes:
        c.colour = class_colour(c.index)
    return classes


def class_get(*, dataset: Dataset, pk: int) -> DatasetClass:
    found = DatasetClass.objects.filter(dataset=dataset, pk=pk).first()
    if found is None:
        raise Http404("No such class.")
    return found


def _class_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise ServiceError("Give the class a name.")
    if len(name) > 100:
        raise ServiceError("Class names are at most 100 characters.")
    return name


def _name_taken(dataset: Dataset, name: str, *, but: DatasetClass | None = None) -> None:
    others = DatasetClass.objects.filter(dataset=dataset, name=name)
    if but is not None:
        others = others.exclude(pk=but.pk)
    if others.exists():
        raise ServiceError(f"There is already a class named “{name}”.")


def _save_class(dataset_class: DatasetClass, **kwargs) -> DatasetClass:
    try:
        with transaction.atomic():
            dataset_class.save(**kwargs)
    except IntegrityError:
        raise ServiceError(f"There is already a class named “{dataset_class.name}”.") from None
    return dataset_class


@transaction.atomic
def dataset_class_create(*, access: WorkspaceAccess, dataset: Dataset, name: str) -> DatasetClass:
    """Add a class at the end (index n)."""
    access.require(Perm.WRITE)
    name = _class_name(name)
    dataset_lock(dataset)
    _name_taken(dataset, name)
    top = DatasetClass.objects.filter(dataset=dataset).aggregate(top=Max("index"))["top"]
    created = _save_class(
        DatasetClass(dataset=dataset, index=0 if top is None else top + 1, name=name)
    )
    dataset_touch(dataset)
    return created


@transaction.atomic
def dataset_class_rename(
    *, access: WorkspaceAccess, dataset_class: DatasetClass, name: str
) -> DatasetClass:
    access.require(Perm.WRITE)
    name = _class_name(name)
    _name_taken(dataset_class.dataset, name, but=dataset_class)
    dataset_class.name = name
    _save_class(dataset_class, update_fields=["name"])
    dataset_touch(dataset_class.dataset)
    return dataset_class


def _compact_after(dataset: Dataset, index: int) -> None:
    """Close the gap a removed class left, so indexes stay 0..n-1 in the same order.

    Two steps, because (dataset, index) is unique and one UPDATE may visit rows in any order:
    first out of the way, then down into place.
    """
    later = DatasetClass.objects.filter(dataset=dataset, index__gt=index)
    offset = 10_000_000
    later.update(index=F("index") + offset)
    DatasetClass.objects.filter(dataset=dataset, index__gt=offset).update(
        index=F("index") - offset - 1
    )


# --- semantic masks ---------------------------------------------------------------------------
# A semantic mask stores class indexes in its pixels, so removing a class (delete or merge) must
# change the masks with the class rows, in the same transaction: its pixels become ignore (or
# the merge target), and every later class moves down one index as _compact_after moves it.
# Otherwise a mask would name a missing class, and every later class's pixels the class after
# it. Only the masks that paint the removed class or a later one are rewritten (their stats say
# which), each into a new content-addressed blob; the old blobs stay for the versions that
# froze them.


def _index_lut(*, removed: int, classes: int, into: int | None) -> np.ndarray:
    """Old pixel value → new one, after the class at `removed` goes and later ones move down;
    its pixels become `into` (already in new numbering) or ignore."""
    lut = np.full(256, IGNORE_INDEX, dtype=np.uint8)
    lut[:removed] = np.arange(removed, dtype=np.uint8)
    lut[removed + 1 : classes] = np.arange(removed, classes - 1, dtype=np.uint8)
    lut[removed] = IGNORE_INDEX if into is None else into
    return lut


def _masks_painting(dataset: Dataset, index: int) -> int:
    """How many masks of the dataset have pixels of class `index`."""
    key = str(index)
    stats = PixelMap.objects.filter(image__dataset=dataset).values_list("stats", flat=True)
    return sum(1 for s in stats.iterator(chunk_size=2000) if key in s)


def _masks_remap(*, dataset: Dataset, removed: int, into: int | None) -> None:
    """Rewrite the dataset's semantic masks for the removal of class index `removed` (call
    before the class rows compact; `into` in the numbering after it)."""
    classes = DatasetClass.objects.filter(dataset=dataset).count()
    lut = _index_lut(removed=removed, classes=classes, into=into)
    rows = PixelMap.objects.filter(image__dataset=dataset).values_list("pk", "stats")
    stale = [
        pk for pk, stats in rows.iterator(chunk_size=2000) if any(int(k) >= removed for k in stats)
    ]
    for start in range(0, len(stale), REMAP_BATCH):
        batch = PixelMap.objects.filter(pk__in=stale[start : start + REMAP_BATCH]).select_related(
            "blob", "image"
        )
        for pixel_map in batch:
            stored = pixel_map_store(lut[pixel_map_load(pixel_map)], task=Task.SEMANTIC)
            pixel_map.blob = blob_for_map(stored)
            pixel_map.stats = stored.stats
            pixel_map.save(update_fields=["blob", "stats", "updated_at"])
            # The map changed under any editor that has it open: its next save is refused.
            Image.objects.filter(pk=pixel_map.image_id).update(
                label_count=labelled_count(stored.stats, task=Task.SEMANTIC),
                revision=F("revision") + 1,
            )


@transaction.atomic
def dataset_class_merge(
    *, access: WorkspaceAccess, source: DatasetClass, target: DatasetClass
) -> DatasetClass:
    """Move every label of `source` to `target`, then remove `source` and compact indexes.

    An image tagged with both classes keeps one tag: two identical image-class tags say nothing
    more than one. Shapes all stay, since each is a separate object.
    """
    access.require(Perm.WRITE)
    if source.dataset_id != target.dataset_id:
        raise Http404("No such class.")
    if source.pk == target.pk:
        raise ServiceError("Choose another class to merge into: a class cannot merge into itself.")
    dataset = source.dataset
    dataset_lock(dataset)
    source = DatasetClass.objects.get(pk=source.pk)  # its index may have moved meanwhile
    duplicate_tags = Label.objects.filter(dataset_class=source, kind=LabelKind.TAG).filter(
        Exists(
            Label.objects.filter(image=OuterRef("image"), dataset_class=target, kind=LabelKind.TAG)
        )
    )
    touched = list(duplicate_tags.values_list("image_id", flat=True).distinct())
    duplicate_tags.delete()
    Label.objects.filter(dataset_class=source).update(dataset_class=target)
    index = source.index
    if dataset.task == Task.SEMANTIC:
        target.refresh_from_db(fields=["index"])
        into = target.index - 1 if target.index > index else target.index
        _masks_remap(dataset=dataset, removed=index, into=into)
    source.delete()
    _compact_after(dataset, index)
    if touched:
        image_label_counts_refresh(image_ids=touched)
    dataset_touch(dataset)
    target.refresh_from_db()
    return target


@transaction.atomic
def dataset_class_delete(
    *, access: WorkspaceAccess, dataset_class: DatasetClass, confirm_name: str
) -> int:
    """Delete a class and its labels; later classes move down one index. Returns the number of
    labels deleted (for a semantic dataset, each mask that painted the class counts as one:
    its pixels of the class become ignore)."""
    access.require(Perm.WRITE)
    if (confirm_name or "").strip() != dataset_class.name:
        raise ServiceError(f"Type the class name “{dataset_class.name}” to confirm.")
    dataset = dataset_class.dataset
    dataset_lock(dataset)
    dataset_class = DatasetClass.objects.get(pk=dataset_class.pk)
    labels = Label.objects.filter(dataset_class=dataset_class)
    touched = list(labels.values_list("image_id", flat=True).distinct())
    deleted, _ = labels.delete()
    index = dataset_class.index
    if dataset.task == Task.SEMANTIC:
        deleted += _masks_painting(dataset, index)
        _masks_remap(dataset=dataset, removed=index, into=None)
    dataset_class.delete()
    _compact_after(dataset, index)
    image_label_counts_refresh(image_ids=touched)
    dataset_touch(dataset)
    return deleted


# --- splits -----------------------------------------------------------------------------------
