"""Creating, changing and deleting datasets and their classes."""

from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, OuterRef, Q

from core.errors import ServiceError
from datasets.models import Blob, Dataset, DatasetClass, DatasetVersion, Image, Task
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

MAX_CLASSES = 10_000


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
        )
    )
    DatasetClass.objects.bulk_create(
        DatasetClass(dataset=dataset, index=i, name=n) for i, n in enumerate(class_names or [])
    )
    return dataset


@transaction.atomic
def dataset_update(
    *, access: WorkspaceAccess, dataset: Dataset, name: str, description: str, is_public: bool
) -> Dataset:
    access.require(Perm.WRITE)
    name = name.strip()
    if not name:
        raise ServiceError("Give the dataset a name.")
    dataset.name = name
    dataset.description = description.strip()
    dataset.is_public = is_public
    return _save(dataset, update_fields=["name", "description", "is_public", "updated_at"])


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
    return list(dataset.classes.annotate(label_total=Count("labels")).order_by("index"))


def dataset_split_counts(*, dataset: Dataset) -> dict[str, int]:
    rows = Image.objects.filter(dataset=dataset).values("split").annotate(n=Count("id"))
    return {row["split"]: row["n"] for row in rows}


def blobs_collect_garbage() -> int:
    """Delete blobs no image refers to, rows first, then their bytes. Returns how many."""
    orphans = Blob.objects.filter(~Exists(Image.objects.filter(blob=OuterRef("pk"))))
    deleted = 0
    for blob in orphans.iterator():
        with transaction.atomic():
            locked = (
                Blob.objects.select_for_update(skip_locked=True)
                .filter(pk=blob.pk)
                .filter(~Exists(Image.objects.filter(blob=OuterRef("pk"))))
                .first()
            )
            if locked is None:
                continue
            locked.delete()
            keys = [locked.storage_key, locked.thumbnail_key, locked.thumbnail_key_webp]
            transaction.on_commit(lambda keys=keys: [default_storage.delete(k) for k in keys])
            deleted += 1
    return deleted
