"""Creating, changing and deleting datasets and their classes."""

import math

from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, OuterRef, Q

from core.errors import ServiceError
from datasets.models import Blob, Dataset, DatasetClass, DatasetVersion, Image, PixelMap, Task
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

MAX_CLASSES = 10_000
# A depth PNG's value of one metre unless told otherwise: millimetres, as most sensors write.
DEPTH_SCALE_DEFAULT = 1000.0


def depth_scale_parse(value) -> float:
    """A depth scale as given (a form's number, JSON, text): positive and finite, or refused
    with the reason. None or "" is the default (millimetres)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return DEPTH_SCALE_DEFAULT
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or number <= 0:
        raise ServiceError(
            "The depth scale must be a positive number: the PNG value of one metre "
            "(1000 when depth maps are in millimetres, 1 when in metres)."
        )
    return number


def class_names_parse(text: str) -> list[str]:
    """One class per line (or comma-separated); blank lines ignored; duplicates refused."""
    raw = [part.strip() for line in text.splitlines() for part in line.split(",")]
    names = [n for n in raw if n]
    seen: set[str] = set()
    for name in names:
        if len(name) > 100:
            raise ServiceError(f"Class names are at most 100 characters ({name[:20]}…).")
        if name in seen:
            raise ServiceError(f"The class “{name}” is listed twice.")
        seen.add(name)
    if len(names) > MAX_CLASSES:
        raise ServiceError(f"At most {MAX_CLASSES} classes.")
    return names


def _save(dataset: Dataset, update_fields: list[str] | None = None) -> Dataset:
    try:
        with transaction.atomic():
            dataset.save(update_fields=update_fields)
    except IntegrityError:
        raise ServiceError(f"A dataset named “{dataset.name}” already exists here.") from None
    return dataset


@transaction.atomic
def dataset_create(
    *,
    access: WorkspaceAccess,
    name: str,
    task: str = Task.DETECT,
    class_names: list[str] | None = None,
    description: str = "",
    depth_scale=None,
) -> Dataset:
    access.require(Perm.WRITE)
    name = name.strip()
    if not name:
        raise ServiceError("Give the dataset a name.")
    if task not in Task.values:
        raise ServiceError(f"Choose a task among: {', '.join(Task.values)}.")
    dataset = _save(
        Dataset(
            workspace=access.workspace,
            name=name,
            task=task,
            description=description.strip(),
            created_by=access.user,
            # Only depth maps have a scale; another task's is never read.
            depth_scale=depth_scale_parse(depth_scale) if task == Task.DEPTH else None,
        )
    )
    DatasetClass.objects.bulk_create(
        DatasetClass(dataset=dataset, index=i, name=n) for i, n in enumerate(class_names or [])
    )
    return dataset


@transaction.atomic
def dataset_update(
    *,
    access: WorkspaceAccess,
    dataset: Dataset,
    name: str,
    description: str,
    is_public: bool,
    depth_scale=None,
) -> Dataset:
    """`depth_scale` (depth datasets; None keeps it): a new scale re-reads the stored maps'
    values, so their metres (PixelMap.stats) are rescaled with it."""
    access.require(Perm.WRITE)
    name = name.strip()
    if not name:
        raise ServiceError("Give the dataset a name.")
    fields = ["name", "description", "is_public", "updated_at"]
    if dataset.task == Task.DEPTH and depth_scale is not None:
        new = depth_scale_parse(depth_scale)
        old = dataset.depth_scale or DEPTH_SCALE_DEFAULT
        if new != old:
            _depth_stats_rescale(dataset=dataset, factor=old / new)
        dataset.depth_scale = new
        fields.append("depth_scale")
    dataset.name = name
    dataset.description = description.strip()
    dataset.is_public = is_public
    return _save(dataset, update_fields=fields)


def _depth_stats_rescale(*, dataset: Dataset, factor: float) -> None:
    """The same stored values read with another scale: every distance times `factor`."""
    maps = list(PixelMap.objects.filter(image__dataset=dataset).only("id", "stats"))
    for pixel_map in maps:
        for key in ("min", "median", "max"):
            if isinstance(pixel_map.stats.get(key), int | float):
                pixel_map.stats[key] = round(pixel_map.stats[key] * factor, 4)
    PixelMap.objects.bulk_update(maps, ["stats"], batch_size=1000)


@transaction.atomic
def dataset_delete(*, access: WorkspaceAccess, dataset: Dataset, confirm_name: str) -> None:
    access.require(Perm.WRITE)
    if confirm_name.strip() != dataset.name:
        raise ServiceError(f"Type the dataset name “{dataset.name}” to confirm.")
    trained = (
        DatasetVersion.objects.filter(dataset=dataset)
        .filter(Q(jobs__isnull=False) | Q(models__isnull=False))
        .order_by("number")
        .values_list("number", flat=True)
        .distinct()
    )
    if trained:
        numbers = ", ".join(f"v{n}" for n in trained[:5])
        raise ServiceError(
            f"“{dataset.name}” cannot be deleted: training jobs or models were made from its "
            f"versions ({numbers}), and they keep the exact data they came from. Delete those "
            "jobs' project first."
        )
    dataset.delete()


def dataset_class_counts(*, dataset: Dataset) -> list[DatasetClass]:
    """Each class with `label_total`: its labels, or for a semantic dataset (no label rows)
    the masks it occurs in."""
    if dataset.task != Task.SEMANTIC:
        return list(dataset.classes.annotate(label_total=Count("labels")).order_by("index"))
    classes = list(dataset.classes.order_by("index"))
    maps = PixelMap.objects.filter(image__dataset=dataset)
    for dataset_class in classes:
        dataset_class.label_total = maps.filter(stats__has_key=str(dataset_class.index)).count()
    return classes


def dataset_split_counts(*, dataset: Dataset) -> dict[str, int]:
    rows = Image.objects.filter(dataset=dataset).values("split").annotate(n=Count("id"))
    return {row["split"]: row["n"] for row in rows}


def _unused(blobs):
    """Blobs neither an image nor a pixel map (mask, depth map) refers to."""
    return blobs.filter(
        ~Exists(Image.objects.filter(blob=OuterRef("pk"))),
        ~Exists(PixelMap.objects.filter(blob=OuterRef("pk"))),
    )


def blobs_collect_garbage() -> int:
    """Delete blobs no image or pixel map refers to, rows first, then their bytes (a map's
    overlay with it). Returns how many."""
    from datasets.services.pixel_maps import overlay_key

    orphans = _unused(Blob.objects.all())
    deleted = 0
    for blob in orphans.iterator():
        with transaction.atomic():
            locked = _unused(Blob.objects.select_for_update(skip_locked=True).filter(pk=blob.pk))
            locked = locked.first()
            if locked is None:
                continue
            locked.delete()
            keys = [
                locked.storage_key,
                locked.thumbnail_key,
                locked.thumbnail_key_webp,
                overlay_key(locked.sha256),
            ]
            transaction.on_commit(lambda keys=keys: [default_storage.delete(k) for k in keys])
            deleted += 1
    return deleted
