"""Sweeps: a search over training arguments within a credit budget. Its trials are ordinary
training jobs; the Optuna study that proposes and prunes them is rebuilt from these rows each
time the sweep advances (sweeps.services.optimizer), so Kestrel's own database is its one store."""

from django.conf import settings
from django.db import models

from datasets.models import DatasetVersion, Task
from training.models import (
    GpuType,
    ModelFamily,
    ModelSize,
    TrainedModel,
    TrainingJob,
    WeightsSource,
)
from workspaces.models import Project, Workspace, WorkspaceOwnedQuerySet


class SweepState(models.TextChoices):
    RUNNING = "running", "Running"
    STOPPED = "stopped", "Stopped"  # by a person; Resume asks for more trials again
    FINISHED = "finished", "Finished"  # every trial ran, or the budget holds no other


class Direction(models.TextChoices):
    MAXIMIZE = "maximize", "Higher is better"
    MINIMIZE = "minimize", "Lower is better"


class SweepQuerySet(WorkspaceOwnedQuerySet):
    def advancing(self) -> "SweepQuerySet":
        """Sweeps with something to do: running ones, and stopped or finished ones whose trials'
        jobs have not all ended yet (their results are still to be recorded)."""
        open_trials = models.Q(trials__job__isnull=False, trials__ended_at__isnull=True)
        return self.filter(models.Q(state=SweepState.RUNNING) | open_trials).distinct()


class Sweep(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="sweeps")
    dataset_version = models.ForeignKey(
        DatasetVersion, on_delete=models.RESTRICT, related_name="sweeps"
    )
    gpu_type = models.ForeignKey(GpuType, on_delete=models.PROTECT, related_name="+")
    # Trials are started in this person's name (their role is checked each time).
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    name = models.CharField(max_length=100, blank=True)
    task = models.CharField(max_length=10, choices=Task.choices)
    model_family = models.CharField(max_length=10, choices=ModelFamily.choices)
    model_size = models.CharField(
        max_length=1, choices=ModelSize.choices, help_text="Unless model_size is searched."
    )
    weights = models.CharField(
        max_length=10, choices=WeightsSource.choices, default=WeightsSource.SCRATCH
    )
    # weights "model": every trial fine-tunes this model of the workspace, as a job does.
    base_model = models.ForeignKey(
        TrainedModel, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    fixed = models.JSONField(
        default=dict,
        help_text="Every trial's arguments that are not searched: epochs, imgsz, batch, "
        "patience, optimizer, seed, extra_args.",
    )
    space = models.JSONField(
        help_text="Argument → {low, high, log} (a range) or {choices: [...]} (a list)."
    )
    metric = models.CharField(max_length=60, help_text="An epoch metric of Ultralytics.")
    direction = models.CharField(max_length=8, choices=Direction.choices)
    n_trials = models.PositiveSmallIntegerField()
    parallel = models.PositiveSmallIntegerField(default=2, help_text="Trials at once, at most.")
    budget = models.BigIntegerField(help_text="Micro-credits its trials may spend in all.")
    seed = models.IntegerField(default=0)
    prune = models.BooleanField(default=True)
    prune_startup_trials = models.PositiveSmallIntegerField(
        default=2, help_text="Finished trials needed before any is pruned."
    )
    prune_warmup_epochs = models.PositiveSmallIntegerField(
        default=1, help_text="Epochs a trial always runs before it may be pruned."
    )
    state = models.CharField(max_length=10, choices=SweepState.choices, default=SweepState.RUNNING)
    notice = models.TextField(blank=True, help_text="Why it waits, or why it ended.")
    created_at = models.DateTimeField(auto_now_add=True)
    advanced_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = SweepQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state"])]

    def __str__(self) -> str:
        return self.title

    @property
    def title(self) -> str:
        return self.name or f"Sweep {self.pk}"


class TrialState(models.TextChoices):
    RUNNING = "running", "Running"  # its job is queued or running
    COMPLETE = "complete", "Complete"
    PRUNED = "pruned", "Pruned"  # stopped by the sweep for doing worse than the others
    STOPPED = "stopped", "Stopped"  # cut short otherwise: a person, its budget cap
    FAILED = "failed", "Failed"


class SweepTrial(models.Model):
    """One point of the search: its arguments, its job, and what the study knows of it."""

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="trials")
    # Empty only for a trial its job was refused for (error says why).
    job = models.OneToOneField(
        TrainingJob, on_delete=models.CASCADE, null=True, blank=True, related_name="sweep_trial"
    )
    number = models.PositiveSmallIntegerField(help_text="1-based, in the order asked.")
    params = models.JSONField(help_text="The searched arguments' values for this trial.")
    state = models.CharField(max_length=10, choices=TrialState.choices, default=TrialState.RUNNING)
    intermediate = models.JSONField(
        default=dict, blank=True, help_text="Epoch → the metric after it, as the pruner saw it."
    )
    value = models.FloatField(null=True, blank=True, help_text="The metric the trial reached.")
    pruned_at_epoch = models.PositiveIntegerField(null=True, blank=True)
    estimate = models.BigIntegerField(default=0, help_text="Micro-credits, as estimated.")
    budget_cap = models.BigIntegerField(
        null=True, blank=True, help_text="Micro-credits of the sweep's budget set aside for it."
    )
    cost = models.BigIntegerField(default=0, help_text="Micro-credits spent, once it ended.")
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True, help_text="When its job ended.")

    class Meta:
        ordering = ["sweep", "number"]
        constraints = [
            models.UniqueConstraint(fields=["sweep", "number"], name="sweep_trial_number_unique")
        ]

    def __str__(self) -> str:
        return f"{self.sweep} trial {self.number}"

    @property
    def is_open(self) -> bool:
        """Its job has not ended: it may still spend credits."""
        return self.job_id is not None and self.ended_at is None
