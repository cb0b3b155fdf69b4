"""Serving trained models: dedicated endpoints, exports to other formats, and usage counts.

The shared inference API needs no row: any model of a workspace can be called with a key of
that workspace that has the predict scope."""

from django.conf import settings
from django.db import models
from django.utils import timezone

from core.models import LongJobRow
from datasets.models import Dataset, Image
from training.models import GpuType, TrainedModel
from workspaces.models import ApiKey, Workspace, WorkspaceOwnedQuerySet


class DeploymentState(models.TextChoices):
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    STOPPING = "stopping", "Stopping"
    STOPPED = "stopped", "Stopped"
    FAILED = "failed", "Failed"


class Placement(models.TextChoices):
    LOCAL = "local", "This machine"
    SKYSERVE = "skyserve", "A GPU rented through SkyPilot"


class Deployment(models.Model):
    """A model server of its own serving one model at /d/<slug>/predict: a process on this
    machine, or replicas SkyPilot's serving (SkyServe) rents behind its load balancer. The
    model behind the URL can be swapped (on this machine); the supervisor (a beat task) keeps
    `desired_running` true, restarts a process that died, and copies what SkyServe says of its
    replicas into the row, so any web process routes to `url` and the page shows them."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="deployments")
    # RESTRICT: a model in use cannot be deleted alone, but goes with its whole workspace.
    model = models.ForeignKey(TrainedModel, on_delete=models.RESTRICT, related_name="deployments")
    slug = models.SlugField(max_length=60, unique=True)
    name = models.CharField(max_length=100)
    desired_running = models.BooleanField(default=True)
    state = models.CharField(
        max_length=10, choices=DeploymentState.choices, default=DeploymentState.STARTING
    )
    host = models.CharField(max_length=200, blank=True, help_text="Machine running the process.")
    port = models.PositiveIntegerField(null=True, blank=True)
    pid = models.IntegerField(null=True, blank=True)
    restarts = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True)
    placement = models.CharField(max_length=10, choices=Placement.choices, default=Placement.LOCAL)
    # The admin-priced catalogue training uses; none on this machine (not metered).
    gpu_type = models.ForeignKey(
        GpuType, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    url = models.CharField(
        max_length=300, blank=True, help_text="Where web processes send its calls, once ready."
    )
    service_name = models.CharField(max_length=63, blank=True, help_text="SkyServe's name.")
    replicas = models.JSONField(
        default=list, blank=True, help_text="SkyServe's replicas: id, status, endpoint."
    )
    replaced = models.PositiveIntegerField(default=0, help_text="Replicas SkyServe replaced.")
    log = models.TextField(blank=True, help_text="The tail of its log.")
    # Metering, per second of ready replica time: counted up to `metered_at`.
    replica_seconds = models.FloatField(default=0)
    charged = models.PositiveBigIntegerField(
        default=0, help_text="Micro-credits of its replica time captured so far."
    )
    metered_at = models.DateTimeField(null=True, blank=True)
    last_ready_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    checked_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = WorkspaceOwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.slug} ({self.state})"

    @property
    def server_name(self) -> str:
        """The name its model server goes by, and that the tokens for it name."""
        return f"deployment-{self.slug}"


class ExportState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Done"
    FAILED = "failed", "Failed"


EXPORT_FINAL = (ExportState.SUCCEEDED, ExportState.FAILED)
EXPORT_ACTIVE = (ExportState.QUEUED, ExportState.RUNNING)


class ModelExport(LongJobRow):
    """One model converted to one format by a background job; the file lands in storage."""

    FINAL_STATES = EXPORT_FINAL

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    model = models.ForeignKey(TrainedModel, on_delete=models.CASCADE, related_name="exports")
    format = models.CharField(max_length=20)
    state = models.CharField(max_length=10, choices=ExportState.choices, default=ExportState.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0, help_text="0-100")
    file_key = models.CharField(max_length=300, blank=True)
    file_size = models.PositiveBigIntegerField(default=0)
    log = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = WorkspaceOwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["model", "format"],
                condition=models.Q(state__in=EXPORT_ACTIVE),
                name="one_active_export_per_model_format",
            )
        ]

    def __str__(self) -> str:
        return f"{self.model_id} → {self.format} ({self.state})"


class UsageDay(models.Model):
    """Inference calls per day, per API key (none: the browser session), per model and per
    deployment (none: the shared API). Counted in Redis per request, added here by a beat task."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    api_key = models.ForeignKey(ApiKey, on_delete=models.SET_NULL, null=True, blank=True)
    model = models.ForeignKey(TrainedModel, on_delete=models.SET_NULL, null=True, blank=True)
    deployment = models.ForeignKey(Deployment, on_delete=models.SET_NULL, null=True, blank=True)
    calls = models.PositiveIntegerField(default=0)
    errors = models.PositiveIntegerField(default=0)
    images = models.PositiveIntegerField(default=0)
    # Milliseconds the web spent on the answered calls (calls - errors), from the request's start
    # to the model server's answer: their mean is the latency the deployment page shows.
    total_ms = models.FloatField(default=0)
    # "key:model:deployment" ids (0: none), so one row per combination on every database.
    scope = models.CharField(max_length=60)

    class Meta:
        ordering = ["-day"]
        constraints = [
            models.UniqueConstraint(fields=["workspace", "day", "scope"], name="usage_day_unique")
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.calls} calls"


class CollectionRule(models.Model):
    """Which answered predictions keep the caller's image for labelling (deploy.collection):
    one rule per dedicated endpoint, or per model on the shared API. Off unless an editor turns
    it on; a caller's image is never kept otherwise."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    deployment = models.OneToOneField(
        Deployment,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="collection_rule",
    )
    model = models.OneToOneField(
        TrainedModel,
        on_delete=models.CASCADE,
        null=True,
        blank=True,
        related_name="collection_rule",
        help_text="The shared API's calls of this model (no deployment).",
    )
    enabled = models.BooleanField(default=False)
    dataset = models.ForeignKey(
        Dataset, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    conf_min = models.FloatField(default=0.25)
    conf_max = models.FloatField(default=0.6)
    classes = models.JSONField(
        default=list, blank=True, help_text="Model class names; empty: every class."
    )
    sample_rate = models.FloatField(default=1.0)
    daily_cap = models.PositiveIntegerField(default=100, help_text="Images per UTC day.")
    # Set by the worker when the plan's storage was full; calls are not offered again until
    # a while later (deploy.collection.decide.FULL_RETRY).
    storage_full_at = models.DateTimeField(null=True, blank=True)
    updated_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    updated_at = models.DateTimeField(auto_now=True)

    objects = WorkspaceOwnedQuerySet.as_manager()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(deployment__isnull=False, model__isnull=True)
                | models.Q(deployment__isnull=True, model__isnull=False),
                name="collection_rule_one_source",
            ),
            models.CheckConstraint(
                condition=models.Q(
                    conf_min__gte=0, conf_max__lte=1, conf_min__lt=models.F("conf_max")
                ),
                name="collection_rule_band",
            ),
            models.CheckConstraint(
                condition=models.Q(sample_rate__gt=0, sample_rate__lte=1),
                name="collection_rule_rate",
            ),
        ]

    def __str__(self) -> str:
        return f"collect {'on' if self.enabled else 'off'} → {self.dataset_id}"


class CollectedImage(models.Model):
    """Where an image a deployment collected came from: shown on the labelling page."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="+")
    # The reverse name `collected` is what the editor reads (annotation does not import deploy).
    image = models.OneToOneField(Image, on_delete=models.CASCADE, related_name="collected")
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="+")
    deployment = models.ForeignKey(
        Deployment, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    model = models.ForeignKey(
        TrainedModel, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    source = models.CharField(
        max_length=200, help_text="The deployment's name (or the shared API's) at the time."
    )
    confidence = models.FloatField()
    created_at = models.DateTimeField(default=timezone.now, help_text="When the call came.")

    objects = WorkspaceOwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.image_id} from {self.source} ({self.confidence:.2f})"
