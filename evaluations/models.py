"""Evaluations: a trained (or uploaded) model run through Ultralytics `val` on a frozen dataset
version, with the figures and the worst images that run found."""

from django.conf import settings
from django.db import models

from core.models import LongJobRow
from datasets.models import DatasetVersion, Split, Task
from training.models import TrainedModel
from workspaces.models import Project, Workspace, WorkspaceOwnedQuerySet


class EvaluationState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


EVALUATION_FINAL = (EvaluationState.SUCCEEDED, EvaluationState.FAILED)
EVALUATION_ACTIVE = (EvaluationState.QUEUED, EvaluationState.RUNNING)


class EvaluationQuerySet(WorkspaceOwnedQuerySet):
    def succeeded(self) -> "EvaluationQuerySet":
        return self.filter(state=EvaluationState.SUCCEEDED)

    def active(self) -> "EvaluationQuerySet":
        return self.filter(state__in=EVALUATION_ACTIVE)


class Evaluation(LongJobRow):
    """One model on one split of one dataset version. Its figures are written with its end, in
    one update: a failed evaluation has none, never some."""

    FINAL_STATES = EVALUATION_FINAL

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    # The model's project: the project page lists its models' evaluations.
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="evaluations")
    model = models.ForeignKey(TrainedModel, on_delete=models.CASCADE, related_name="evaluations")
    dataset_version = models.ForeignKey(
        DatasetVersion, on_delete=models.CASCADE, related_name="evaluations"
    )
    split = models.CharField(max_length=5, choices=Split.choices, default=Split.VAL)
    task = models.CharField(max_length=10, choices=Task.choices)
    class_map = models.JSONField(
        default=list,
        help_text="Per model class, in the model's order: {model, version}; version null: "
        "ignored (no label of the version counts for it).",
    )
    imgsz = models.PositiveIntegerField()
    state = models.CharField(
        max_length=10, choices=EvaluationState.choices, default=EvaluationState.QUEUED
    )
    progress = models.PositiveSmallIntegerField(default=0, help_text="0-100")
    log = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # What `val` found, written with the end (all or nothing).
    images = models.PositiveIntegerField(default=0, help_text="Images evaluated.")
    metrics = models.JSONField(default=dict, blank=True, help_text="Ultralytics' results_dict.")
    val_args = models.JSONField(
        default=dict, blank=True, help_text="The arguments val ran with (conf, iou, batch, ...)."
    )
    per_class = models.JSONField(
        default=list,
        blank=True,
        help_text="Per class: {class, images, instances, values: {results_dict key: value}}.",
    )
    confusion = models.JSONField(
        default=dict, blank=True, help_text="{names, matrix}: rows predicted, columns true."
    )
    curves = models.JSONField(
        default=list, blank=True, help_text="Precision-recall curves: [{name, recall, mean, ...}]."
    )
    worst_images = models.JSONField(
        default=list, blank=True, help_text="The images with the most errors, worst first."
    )

    objects = EvaluationQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["dataset_version", "state"])]
        constraints = [
            models.UniqueConstraint(
                fields=["model", "dataset_version", "split"],
                condition=models.Q(state__in=EVALUATION_ACTIVE),
                name="one_active_evaluation_per_model_version_split",
            )
        ]

    def __str__(self) -> str:
        return f"Evaluation {self.pk} of {self.model_id} on {self.dataset_version_id}"

    @property
    def ignored_classes(self) -> list[str]:
        return [row["model"] for row in self.class_map if not row.get("version")]
