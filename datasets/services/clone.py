"""Clone a dataset into a workspace: rows are copied inside the database, image bytes never.

Images, labels and pixel maps (masks, depth maps) are copied with INSERT ... SELECT, so a clone
costs five statements whatever its size, and both datasets point at the same content-addressed
Blob rows.
"""

from django.db import IntegrityError, connection, transaction
from django.db.models import Count
from django.db.models.functions import Lower
from django.utils import timezone

from core.errors import ServiceError
from datasets.models import Dataset, DatasetClass, Image, Label, PixelMap
from workspaces.models import Role, User, Workspace
from workspaces.permissions import PERM_REQUIRED_ROLE, ROLE_RANK, Perm
from workspaces.selectors import WorkspaceAccess


def clone_source_visible(*, source: Dataset, workspace: Workspace) -> bool:
    """Public datasets clone anywhere; a private one only within its own workspace."""
    return source.is_public or source.workspace_id == workspace.pk


def clone_targets_for_user(*, user: User, source: Dataset) -> list[Workspace]:
    """Workspaces where `user` may put a clone of `source` (editor or more there)."""
    if not user.is_authenticated:
        return []
    min_rank = ROLE_RANK[PERM_REQUIRED_ROLE[Perm.WRITE]]
    roles = [r for r in Role.values if ROLE_RANK[r] >= min_rank]
    workspaces = Workspace.objects.filter(
        memberships__user=user, memberships__role__in=roles
    ).order_by("-is_personal", "name")
    if not source.is_public:
        workspaces = workspaces.filter(pk=source.workspace_id)
    return list(workspaces)


def _free_name(workspace: Workspace, wanted: str) -> str:
    taken = set(
        Dataset.objects.for_workspace(workspace)
        .filter(name__istartswith=wanted[:90])
        .annotate(lname=Lower("name"))
        .values_list("lname", flat=True)
    )
    if wanted.lower() not in taken:
        return wanted
    n = 1
    while True:
        suffix = " (copy)" if n == 1 else f" (copy {n})"
        candidate = wanted[: 100 - len(suffix)] + suffix
        if candidate.lower() not in taken:
            return candidate
        n += 1


def _q(name: str) -> str:
    return connection.ops.quote_name(name)


def _insert_select(model, alias: str, replace: dict[str, str]) -> tuple[str, str]:
    """Column list and SELECT list copying every concrete column of `model` but the key.

    Built from the model, so a column another app adds later is copied too; `replace` maps a
    column to the SQL that gives its value in the copy.
    """
    columns, values = [], []
    for f in model._meta.concrete_fields:
        if f.primary_key:
            continue
        columns.append(_q(f.column))
        if f.column in replace:
            values.append(replace[f.column])
        elif getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            values.append("%(now)s")
        else:
            values.append(f"{alias}.{_q(f.column)}")
    return ", ".join(columns), ", ".join(values)


def _has_copies(dataset: Dataset) -> bool:
    """Whether two images of `dataset` share a blob (byte-identical copies)."""
    return (
        Image.objects.filter(dataset=dataset)
        .values("blob")
        .annotate(rows=Count("id"))
        .filter(rows__gt=1)
        .exists()
    )


def _copy_rows(*, source: Dataset, target: Dataset) -> None:
    image = _q(Image._meta.db_table)
    label = _q(Label._meta.db_table)
    klass = _q(DatasetClass._meta.db_table)
    # Only quoted names from the models' metadata are formatted in; every value is a parameter.
    params = {"source": source.pk, "target": target.pk, "now": timezone.now()}
    index = _q("index")
    statements = []
    cols, vals = _insert_select(DatasetClass, "oc", {"dataset_id": "%(target)s"})
    statements.append(
        f"INSERT INTO {klass} ({cols}) SELECT {vals} FROM {klass} oc "  # noqa: S608
        "WHERE oc.dataset_id = %(source)s ORDER BY oc.id"
    )
    # A copy starts its own labelling history: who labelled and reviewed the source is not
    # carried into (maybe) another workspace.
    fresh = {
        "dataset_id": "%(target)s",
        "status": "CASE WHEN oi.label_count > 0 THEN 'labelled' ELSE 'unlabelled' END",
        "revision": "0",
        "review_comment": "''",
        "labelled_by_id": "NULL",
        "labelled_at": "NULL",
        "reviewed_by_id": "NULL",
        "reviewed_at": "NULL",
        "uncertainty": "NULL",
    }
    cols, vals = _insert_select(Image, "oi", fresh)
    statements.append(
        f"INSERT INTO {image} ({cols}) SELECT {vals} FROM {image} oi "  # noqa: S608
        "WHERE oi.dataset_id = %(source)s ORDER BY oi.id"
    )
    # A class is unique by (dataset, index): that pairs each source class with its copy. An
    # image is paired by position: the n-th of the source by id with the n-th of the copy
    # (images are copied in id order; two rows may share a blob). PostgreSQL hashes that join
    # (pairing by blob took 11 s for 10,000 images there, with no (dataset, blob) index any
    # more); SQLite runs it as a nested loop (55 s), so there a dataset without copies pairs
    # its images by blob instead, as unique then as the position.
    cols, vals = _insert_select(Label, "ol", {"image_id": "ni.id", "dataset_class_id": "nc.id"})
    by_position = connection.vendor != "sqlite" or _has_copies(source)

    def pair(alias: str) -> str:
        """The join from rows of `alias` (on a source image) to the copy of their image."""
        if by_position:
            numbered = (
                f"SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS n FROM {image} WHERE dataset_id = "  # noqa: S608
            )
            return (
                f"JOIN ({numbered}%(source)s) oi ON oi.id = {alias}.image_id "
                f"JOIN ({numbered}%(target)s) ni ON ni.n = oi.n "
            )
        return (
            f"JOIN {image} oi ON oi.id = {alias}.image_id AND oi.dataset_id = %(source)s "
            f"JOIN {image} ni ON ni.dataset_id = %(target)s AND ni.blob_id = oi.blob_id "
        )

    statements.append(
        f"INSERT INTO {label} ({cols}) SELECT {vals} FROM {label} ol "  # noqa: S608
        f"{pair('ol')}"
        f"JOIN {klass} oc ON oc.id = ol.dataset_class_id "
        f"JOIN {klass} nc ON nc.dataset_id = %(target)s AND nc.{index} = oc.{index} "
        "ORDER BY ol.id"
    )
    # Semantic masks and depth maps: each image's map row, sharing its content-addressed blob.
    pixel_map = _q(PixelMap._meta.db_table)
    cols, vals = _insert_select(PixelMap, "op", {"image_id": "ni.id"})
    statements.append(
        f"INSERT INTO {pixel_map} ({cols}) SELECT {vals} FROM {pixel_map} op "  # noqa: S608
        f"{pair('op')}ORDER BY op.id"
    )
    with connection.cursor() as cursor:
        for sql in statements:
            cursor.execute(sql, params)


@transaction.atomic
def dataset_clone(*, access: WorkspaceAccess, source: Dataset, name: str | None = None) -> Dataset:
    """Copy `source` (classes, images, labels) into `access.workspace`, sharing its blobs."""
    access.require(Perm.WRITE)
    if not clone_source_visible(source=source, workspace=access.workspace):
        raise ServiceError(
            f"“{source.name}” is private: it can be cloned only within its own workspace."
        )
    wanted = (name or "").strip()
    if name is not None and not wanted:
        raise ServiceError("Give the clone a name.")
    if len(wanted) > 100:
        raise ServiceError("Dataset names are at most 100 characters.")
    clone = Dataset(
        workspace=access.workspace,
        name=wanted or _free_name(access.workspace, source.name),
        description=source.description,
        task=source.task,
        keypoint_shape=source.keypoint_shape,
        depth_scale=source.depth_scale,
        is_public=False,
        cloned_from=source,
        created_by=access.user,
    )
    try:
        with transaction.atomic():
            clone.save()
    except IntegrityError:
        raise ServiceError(f"A dataset named “{clone.name}” already exists here.") from None
    _copy_rows(source=source, target=clone)
    return clone
