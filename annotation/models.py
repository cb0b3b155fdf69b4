"""Model suggestions waiting for a person, and pre-labelling runs over a whole dataset.

An image's labels and its review status live on `datasets.Image` / `datasets.Label` (the gallery
filters by them); annotation owns how they change (annotation.services)."""

from django.conf import settings
from django.db import models

from core.models import LongJobRow
from datasets.models import Dataset, DatasetClass, Image, LabelKind
from training.models import TrainedModel
from workspaces.models import Workspace, WorkspaceOwnedQuerySet

MASK_KIND = "mask"
SUGGESTION_KINDS = [*LabelKind.choices, (MASK_KIND, "Mask")]


class Suggestion(models.Model):
    """A shape a model proposed; it becomes a label only when a person accepts it.

    A semantic model proposes one "mask" row per class it found: `data` is that class's pixels
    as COCO's uncompressed RLE ({"size": [h, w], "counts": [...]}, column-major), the format
    the predict API answers with, and `confidence` its share of the image (a semantic model
    has no per-class confidence). Accepting one paints it into the image's mask in the editor,
    saved through the mask route; it is never a PixelMap before that."""

    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="suggestions")
    dataset_class = models.ForeignKey(
        DatasetClass, on_delete=models.CASCADE, related_name="suggestions"
    )
    kind = models.CharField(max_length=10, choices=SUGGESTION_KINDS)
    data = models.JSONField(default=list)
    confidence = models.FloatField()
    model = models.ForeignKey(TrainedModel, on_delete=models.CASCADE, related_name="suggestions")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-confidence", "id"]
        indexes = [models.Index(fields=["image", "model"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.dataset_class_id} on {self.image_id} ({self.confidence:.2f})"


class PrelabelState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Done"
    FAILED = "failed", "Failed"


PRELABEL_FINAL = (PrelabelState.SUCCEEDED, PrelabelState.FAILED)
PRELABEL_ACTIVE = (PrelabelState.QUEUED, PrelabelState.RUNNING)


class PrelabelRun(LongJobRow):
    """A background job running one model over a dataset's images, writing suggestions."""

    FINAL_STATES = PRELABEL_FINAL

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="prelabel_runs")
    model = models.ForeignKey(TrainedModel, on_delete=models.CASCADE, related_name="+")
    only_unlabelled = models.BooleanField(default=True)
    conf = models.FloatField(default=0.25)
    state = models.CharField(
        max_length=10, choices=PrelabelState.choices, default=PrelabelState.QUEUED
    )
    total = models.PositiveIntegerField(default=0)
    done = models.PositiveIntegerField(default=0)
    suggestions = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = WorkspaceOwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["dataset"],
                condition=models.Q(state__in=PRELABEL_ACTIVE),
                name="one_active_prelabel_run_per_dataset",
            )
        ]

    def __str__(self) -> str:
        return f"pre-label {self.dataset_id} with {self.model_id} ({self.state})"

    @property
    def percent(self) -> int:
        return round(100 * self.done / self.total) if self.total else (100 if self.is_final else 0)
