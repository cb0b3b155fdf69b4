"""Writes of the labelling workflow: saving an image's labels (with revisions), its review
status, model suggestions, and pre-labelling runs."""

from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.utils import timezone

from annotation.models import PRELABEL_ACTIVE, PrelabelRun, Suggestion
from annotation.shapes import CleanLabel, labels_clean
from core.errors import ServiceError
from core.leases import queued_until
from core.tasks import task_send_on_commit
from datasets.models import Dataset, DatasetClass, Image, Label, LabelKind, LabelStatus
from datasets.services.gallery import dataset_touch
from training.models import TrainedModel
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

MAX_COMMENT = 2000
SUGGESTION_LIMIT = 300  # per image and model: the most confident


class StaleRevision(ServiceError):
    """The labels changed since the caller read them; nothing was written."""

    def __init__(self, message: str, revision: int):
        super().__init__(message)
        self.revision = revision


@dataclass(frozen=True)
class Saved:
    image: Image
    labels: list[CleanLabel]


def _class_ids(dataset: Dataset) -> set[int]:
    return set(DatasetClass.objects.filter(dataset=dataset).values_list("pk", flat=True))


def image_locked_at(*, image: Image, revision, what: str) -> Image:
    """The image row, locked, if `revision` is still its stored one (labels and masks are
    saved against the revision they were read at); StaleRevision otherwise. `what` is what the
    person edited ("these labels", "this mask"), for the message."""
    if isinstance(revision, bool) or not isinstance(revision, int):
        raise ServiceError(f"Send the revision {what} was read at (a whole number).")
    locked = Image.objects.select_for_update().select_related("blob", "dataset").get(pk=image.pk)
    if locked.revision != revision:
        who = locked.labelled_by.email if locked.labelled_by else "someone"
        raise StaleRevision(
            f"{who} saved {what} (revision {locked.revision}) after you opened the page "
            f"(revision {revision}). Your change was not saved: reload to see theirs, then "
            "redo it.",
            locked.revision,
        )
    return locked


@transaction.atomic
def labels_save(
    *,
    access: WorkspaceAccess,
    image: Image,
    revision,
    labels,
    accepted_suggestions=(),
    rejected_suggestions=(),
) -> Saved:
    """Replace an image's labels, if `revision` is still the stored one; otherwise refuse with
    StaleRevision and write nothing. Accepted and rejected suggestions go in the same commit."""
    access.require(Perm.WRITE)
    locked = image_locked_at(image=image, revision=revision, what="these labels")
    dataset = locked.dataset
    clean = labels_clean(
        labels,
        dataset=dataset,
        width=locked.blob.width,
        height=locked.blob.height,
        class_ids=_class_ids(dataset),
    )
    decided = {int(i) for i in (*accepted_suggestions, *rejected_suggestions) if _is_id(i)}
    Label.objects.filter(image=locked).delete()
    Label.objects.bulk_create(
        Label(image=locked, dataset_class_id=c.class_id, kind=c.kind, data=c.data) for c in clean
    )
    if decided:
        Suggestion.objects.filter(image=locked, pk__in=decided).delete()
    locked.label_count = len(clean)
    locked.revision += 1
    locked.labelled_by = access.user
    locked.labelled_at = timezone.now()
    if locked.status in (LabelStatus.UNLABELLED, LabelStatus.REJECTED, LabelStatus.APPROVED):
        # A change to approved labels needs another review; a rejected image was worked on.
        locked.status = LabelStatus.LABELLED
    locked.save(update_fields=["label_count", "revision", "labelled_by", "labelled_at", "status"])
    dataset_touch(dataset)
    return Saved(image=locked, labels=clean)


def _is_id(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


# --- review -------------------------------------------------------------------------------------

REVIEW_ACTIONS = ("submit", "approve", "reject")


@transaction.atomic
def image_review(*, access: WorkspaceAccess, image: Image, action: str, comment: str = "") -> Image:
    """Move an image through review: editors submit, reviewers approve or reject (with why)."""
    if action not in REVIEW_ACTIONS:
        raise ServiceError("Choose submit, approve or reject.")
    comment = (comment or "").strip()
    if len(comment) > MAX_COMMENT:
        raise ServiceError(f"Keep the comment under {MAX_COMMENT} characters.")
    locked = Image.objects.select_for_update().get(pk=image.pk)
    now = timezone.now()
    if action == "submit":
        access.require(Perm.WRITE)
        if locked.status == LabelStatus.UNLABELLED:
            raise ServiceError("Label this image (or save it empty) before submitting it.")
        if locked.status in (LabelStatus.IN_REVIEW, LabelStatus.APPROVED):
            raise ServiceError(f"This image is already {locked.get_status_display().lower()}.")
        locked.status = LabelStatus.IN_REVIEW
        fields = ["status"]
    else:
        access.require(Perm.REVIEW)
        if locked.status == LabelStatus.UNLABELLED:
            raise ServiceError("There are no labels to review on this image yet.")
        if action == "approve":
            locked.status, locked.review_comment = LabelStatus.APPROVED, comment
        else:
            if not comment:
                raise ServiceError("Say what to fix: a rejection needs a comment.")
            locked.status, locked.review_comment = LabelStatus.REJECTED, comment
        locked.reviewed_by, locked.reviewed_at = access.user, now
        fields = ["status", "review_comment", "reviewed_by", "reviewed_at"]
    locked.save(update_fields=fields)
    return locked


# --- suggestions -----------------------------------------------------------------------------


def model_for_workspace(*, access: WorkspaceAccess, model_id) -> TrainedModel:
    if not _is_id(model_id):
        raise ServiceError("Choose a trained model.")
    model = TrainedModel.objects.for_workspace(access.workspace).filter(pk=model_id).first()
    if model is None:
        raise ServiceError("No such model in this workspace.")
    return model


def model_class_map(*, model: TrainedModel, dataset: Dataset) -> dict[int, int]:
    """The model's class index → this dataset's class id, matched by name (case-insensitive)."""
    by_name = {
        name.lower(): pk for pk, name in dataset.classes.values_list("pk", "name").iterator()
    }
    return {
        i: by_name[str(name).lower()]
        for i, name in enumerate(model.class_names or [])
        if str(name).lower() in by_name
    }


def suggestions_store(
    *, image: Image, model: TrainedModel, predictions, class_map: dict[int, int]
) -> int:
    """Replace the image's suggestions from this model with `predictions` (assist.Prediction).
    Predictions of classes the dataset lacks are left out. Returns how many were stored."""
    dims = (image.dataset.keypoint_shape or [17, 3])[1]
    rows = [
        Suggestion(
            image=image,
            model=model,
            dataset_class_id=class_map[p.class_index],
            kind=p.kind,
            data=_keypoint_dims(p.data, dims) if p.kind == LabelKind.KEYPOINTS else p.data,
            confidence=float(p.confidence),
        )
        for p in sorted(predictions, key=lambda p: -p.confidence)
        if p.class_index in class_map
    ][:SUGGESTION_LIMIT]
    with transaction.atomic():
        Suggestion.objects.filter(image=image, model=model).delete()
        Suggestion.objects.bulk_create(rows)
    return len(rows)


def _keypoint_dims(data: list[float], dims: int) -> list[float]:
    """A model's keypoints come as (x, y, visibility); a dataset of (x, y) points drops the v."""
    if dims == 3:
        return data
    points = data[4:]
    return data[:4] + [v for i, v in enumerate(points) if i % 3 != 2]


# --- pre-labelling a dataset -------------------------------------------------------------------


def prelabel_start(
    *,
    access: WorkspaceAccess,
    dataset: Dataset,
    model_id,
    only_unlabelled: bool = True,
    conf: float = 0.25,
) -> PrelabelRun:
    """Queue a background run of a model over the dataset; its results land as suggestions."""
    access.require(Perm.WRITE)
    model = model_for_workspace(access=access, model_id=model_id)
    if model.task != dataset.task:
        raise ServiceError(
            f"“{model.name}” is a {model.get_task_display().lower()} model; this dataset "
            f"needs a {dataset.get_task_display().lower()} one."
        )
    if not model_class_map(model=model, dataset=dataset):
        raise ServiceError(
            f"None of “{model.name}”'s classes ({', '.join(model.class_names[:5])}) is a class "
            "of this dataset, so it cannot suggest anything here."
        )
    if not 0 < conf < 1:
        raise ServiceError("The confidence threshold is between 0 and 1.")
    busy = "A pre-labelling run is already going on this dataset; wait for it."
    if PrelabelRun.objects.filter(dataset=dataset, state__in=PRELABEL_ACTIVE).exists():
        raise ServiceError(busy)
    images = Image.objects.filter(dataset=dataset)
    if only_unlabelled:
        images = images.filter(status=LabelStatus.UNLABELLED)
    try:
        with transaction.atomic():
            run = PrelabelRun.objects.create(
                workspace=access.workspace,
                dataset=dataset,
                model=model,
                only_unlabelled=only_unlabelled,
                conf=conf,
                total=images.count(),
                created_by=access.user,
                lease_until=queued_until(),
            )
    except IntegrityError:  # a start at the same moment won (one_active_prelabel_run_per_dataset)
        raise ServiceError(busy) from None
    task_send_on_commit("annotation.prelabel_run", run.pk)
    return run
