"""The gallery's writes: bulk changes to images (split, delete, label counts) and automatic
splits, each a service (the reads: datasets.selectors.gallery)."""

import hashlib
import math
from collections.abc import Iterable

from django.db import transaction
from django.db.models import Count, F, OuterRef, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from core.errors import ServiceError
from datasets.models import Dataset, Image, Label, Split
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

BULK_MAX = 1000  # ids per bulk request; a page holds 60
UPDATE_CHUNK = 5000


# --- bulk changes to images -------------------------------------------------------------------


def dataset_touch(dataset: Dataset) -> None:
    Dataset.objects.filter(pk=dataset.pk).update(updated_at=timezone.now())


def _ids(image_ids: Iterable[int]) -> list[int]:
    ids = sorted({int(i) for i in image_ids})
    if len(ids) > BULK_MAX:
        raise ServiceError(f"At most {BULK_MAX} images at a time.")
    return ids


@transaction.atomic
def images_split_set(
    *, access: WorkspaceAccess, dataset: Dataset, image_ids: Iterable[int], split: str
) -> int:
    """Move images of this dataset to a split. Returns how many were moved."""
    access.require(Perm.WRITE)
    if split not in Split.values:
        raise ServiceError(f"Choose a split among: {', '.join(Split.values)}.")
    ids = _ids(image_ids)
    if not ids:
        raise ServiceError("Tick at least one image.")
    moved = Image.objects.filter(dataset=dataset, pk__in=ids).update(split=split)
    dataset_touch(dataset)
    return moved


@transaction.atomic
def images_delete(*, access: WorkspaceAccess, dataset: Dataset, image_ids: Iterable[int]) -> int:
    """Delete images of this dataset with their labels. Their bytes stay while another dataset
    uses them; the nightly garbage collection removes blobs nothing refers to."""
    access.require(Perm.WRITE)
    ids = _ids(image_ids)
    if not ids:
        raise ServiceError("Tick at least one image.")
    images = Image.objects.filter(dataset=dataset, pk__in=ids)
    count = images.count()
    images.delete()
    dataset_touch(dataset)
    return count


def image_label_counts_refresh(*, image_ids: Iterable[int]) -> None:
    """Recount `Image.label_count` from the labels, for these images, and bump their revision:
    their labels changed under any editor that has them open, whose next save is refused."""
    ids = sorted(set(image_ids))
    counted = (
        Label.objects.filter(image=OuterRef("pk"))
        .order_by()
        .values("image")
        .annotate(n=Count("pk"))
        .values("n")
    )
    for start in range(0, len(ids), UPDATE_CHUNK):
        Image.objects.filter(pk__in=ids[start : start + UPDATE_CHUNK]).update(
            label_count=Coalesce(Subquery(counted), 0), revision=F("revision") + 1
        )


# --- locks and automatic splits -------------------------------------------------------------------


def dataset_lock(dataset: Dataset) -> None:
    # Class indexes are handed out and compacted under the dataset's row lock, one change at a
    # time, so two editors never both take index n or shift the same rows.
    Dataset.objects.select_for_update().filter(pk=dataset.pk).values_list("pk", flat=True).first()


def split_quotas(total: int, percents: list[int]) -> list[int]:
    """Whole numbers of images per split that add up to `total`, nearest to the percentages
    (largest remainders; ties go to the earlier split, so train before val before test)."""
    exact = [total * p / 100 for p in percents]
    counts = [math.floor(x) for x in exact]
    left = total - sum(counts)
    order = sorted(
        (i for i, p in enumerate(percents) if p > 0), key=lambda i: (-(exact[i] - counts[i]), i)
    )
    for i in order[:left]:
        counts[i] += 1
    return counts


def split_order_key(seed: int, sha256: str) -> bytes:
    return hashlib.sha256(f"{seed}:{sha256}".encode()).digest()


@transaction.atomic
def dataset_split_auto(
    *, access: WorkspaceAccess, dataset: Dataset, train: int, val: int, test: int, seed: int = 0
) -> dict[str, int]:
    """Assign every image a split by ratio, reproducibly.

    Images are ordered by a hash of (seed, their content's sha256) and cut by the ratios: the
    same seed gives the same assignment, also in a clone of the dataset, and the counts are
    exact (80/20 of 10 images is 8 and 2). Returns the number of images per split.
    """
    access.require(Perm.WRITE)
    percents = [train, val, test]
    if any(not isinstance(p, int) or p < 0 or p > 100 for p in percents) or sum(percents) != 100:
        raise ServiceError("The three percentages must be whole numbers adding up to 100.")
    if not isinstance(seed, int) or seed < 0:
        raise ServiceError("The seed is a whole number, 0 or more.")
    dataset_lock(dataset)
    rows = list(Image.objects.filter(dataset=dataset).values_list("pk", "blob__sha256"))
    rows.sort(key=lambda row: split_order_key(seed, row[1]))
    counts = split_quotas(len(rows), percents)
    start = 0
    for split, count in zip((Split.TRAIN, Split.VAL, Split.TEST), counts, strict=True):
        ids = [pk for pk, _ in rows[start : start + count]]
        start += count
        for chunk in range(0, len(ids), UPDATE_CHUNK):
            Image.objects.filter(pk__in=ids[chunk : chunk + UPDATE_CHUNK]).update(split=split)
    dataset_touch(dataset)
    return dict(zip(Split.values, counts, strict=True))
