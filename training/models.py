"""Training: the GPU catalog, jobs with their attempts, metrics and logs, and trained models."""

from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db import models

from datasets.models import DatasetVersion, Task
from workspaces.models import Project, Workspace, WorkspaceOwnedQuerySet


class GpuType(models.Model):
    """A kind of machine a job can run on, with its price; edited in the Django admin."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=80)
    vram_gb = models.PositiveIntegerField(help_text="Memory of one GPU, GB (0 for CPU).")
    fp16_tflops = models.FloatField(default=0, help_text="Dense FP16/BF16 tensor throughput.")
    memory_bandwidth_gbs = models.PositiveIntegerField(default=0)
    hourly_price = models.DecimalField(
        max_digits=8, decimal_places=3, help_text="Price per hour in US dollars."
    )
    provider = models.CharField(max_length=30, help_text="Key of the provider that serves it.")
    provider_options = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            "What the provider rents for this type. SkyPilot: accelerators (required, e.g. "
            "H100), count, infra or clouds and regions, use_spot, disk_size, "
            "max_restarts_on_errors, provision_timeout_seconds. Never credentials: SkyPilot "
            "reads those where it keeps them (~/.aws, ~/.kube, ...)."
        ),
    )
    operator_hourly_cost = models.DecimalField(
        max_digits=8,
        decimal_places=3,
        null=True,
        blank=True,
        help_text="What an hour of it costs the operator (the cloud's bill), US dollars.",
    )
    markup_percent = models.DecimalField(
        max_digits=6,
        decimal_places=2,
        null=True,
        blank=True,
        help_text="With the operator's cost: the price is that cost plus this percentage.",
    )
    plans = models.ManyToManyField(
        "billing.Plan", blank=True, related_name="gpu_types", help_text="Empty: every plan."
    )
    is_active = models.BooleanField(default=True)
    sort_order = models.PositiveSmallIntegerField(default=0)
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["sort_order", "hourly_price", "name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """The provider's options are ones it knows, with values it can use; a markup prices
        the type from the operator's cost."""
        from django.core.exceptions import ValidationError

        errors: dict[str, list[str]] = {}
        if self.provider_options is None:  # an emptied box
            self.provider_options = {}
        if self.provider == "skypilot":
            from training.providers.skypilot_options import options_problems

            # Empty: not configured yet (the training form says so and offers it to no one).
            problems = options_problems(self.provider_options) if self.provider_options else []
            if problems:
                errors["provider_options"] = problems
        elif self.provider_options:
            errors["provider_options"] = [
                f"Only the SkyPilot provider takes options; {self.provider or 'this'} takes none."
            ]
        if self.markup_percent is not None:
            if self.operator_hourly_cost is None:
                errors["markup_percent"] = ["A markup needs the operator's hourly cost."]
            elif self.markup_percent < -100:
                errors["markup_percent"] = ["A markup below -100% would be a negative price."]
            else:
                self.hourly_price = self.marked_up_price()
        if errors:
            raise ValidationError(errors)

    def marked_up_price(self) -> Decimal:
        cost, markup = self.operator_hourly_cost, self.markup_percent
        return (cost * (1 + markup / 100)).quantize(Decimal("0.001"), rounding=ROUND_HALF_UP)


class JobState(models.TextChoices):
    QUEUED = "queued", "Queued"
    PROVISIONING = "provisioning", "Provisioning"
    PREPARING = "preparing", "Preparing"
    RUNNING = "running", "Running"
    STOPPING = "stopping", "Stopping"
    SUCCEEDED = "succeeded", "Succeeded"
    STOPPED = "stopped", "Stopped"
    FAILED = "failed", "Failed"
    CANCELED = "canceled", "Canceled"


FINAL_STATES = (JobState.SUCCEEDED, JobState.STOPPED, JobState.FAILED, JobState.CANCELED)
ACTIVE_STATES = (JobState.PROVISIONING, JobState.PREPARING, JobState.RUNNING, JobState.STOPPING)


class ModelFamily(models.TextChoices):
    YOLO26 = "yolo26", "YOLO26"
    YOLO11 = "yolo11", "YOLO11"
    YOLOV8 = "yolov8", "YOLOv8"


class ModelSize(models.TextChoices):
    N = "n", "n (nano)"
    S = "s", "s (small)"
    M = "m", "m (medium)"
    L = "l", "l (large)"
    X = "x", "x (extra large)"


class WeightsSource(models.TextChoices):
    SCRATCH = "scratch", "From scratch"
    PRETRAINED = "pretrained", "Pretrained weights"
    MODEL = "model", "A previous Kestrel model"


class FailureKind(models.TextChoices):
    """Why a job failed, which says whether Resume can help
    (training.services.jobs_resume.job_resume_refusal). Blank: it did not fail, or it failed
    before Kestrel kept the kind."""

    # Would fail the same way again: Resume is not offered.
    REFUSED = "refused", "Refused while preparing"  # the machine, data, settings or weights
    DOWNLOAD = "download", "Weights download failed"
    WEIGHTS = "weights", "Weights refused"
    START = "start", "Training could not start"  # Ultralytics refused model, data or arguments
    # May go through another time: Resume is offered (the first two only from a checkpoint).
    OUT_OF_MEMORY = "oom", "Out of memory"
    CRASH = "crash", "Failed while training"
    LOST = "lost", "Lost too many times"
    PLATFORM = "platform", "Kestrel's own error"


class JobKind(models.TextChoices):
    """Who runs the job: Kestrel (a provider's machine, metered), or stock `ultralytics` on the
    user's own machine reporting to the platform webhooks (training.platform_webhooks)."""

    KESTREL = "kestrel", "Kestrel"
    EXTERNAL = "external", "Own machine"


class TrainingJob(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="jobs")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="jobs")
    kind = models.CharField(max_length=10, choices=JobKind.choices, default=JobKind.KESTREL)
    # Empty only for an external job: trained on a local YAML, not a Kestrel version.
    dataset_version = models.ForeignKey(
        DatasetVersion, on_delete=models.RESTRICT, null=True, blank=True, related_name="jobs"
    )
    # Empty only for an external job: the user's machine, described by client_info.
    gpu_type = models.ForeignKey(
        GpuType, on_delete=models.PROTECT, null=True, blank=True, related_name="jobs"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    name = models.CharField(max_length=100, blank=True)
    # What to train
    task = models.CharField(max_length=10, choices=Task.choices)
    model_family = models.CharField(max_length=10, choices=ModelFamily.choices)
    model_size = models.CharField(max_length=1, choices=ModelSize.choices)
    weights = models.CharField(
        max_length=10, choices=WeightsSource.choices, default=WeightsSource.SCRATCH
    )
    base_model = models.ForeignKey(
        "TrainedModel", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    epochs = models.PositiveIntegerField()
    imgsz = models.PositiveIntegerField()
    batch = models.IntegerField(help_text="-1: automatic")
    patience = models.PositiveIntegerField(default=100)
    optimizer = models.CharField(max_length=10, default="auto")
    seed = models.IntegerField(default=0)
    extra_args = models.JSONField(default=dict, blank=True)
    is_quick_test = models.BooleanField(default=False)
    # What becomes of its model when it succeeds (the demo job asks for both: its seed has no
    # person to press the buttons).
    promote_model = models.BooleanField(
        default=False, help_text="When it succeeds, its model becomes the project's current one."
    )
    publish_model = models.BooleanField(
        default=False,
        help_text="When it succeeds, its model is public: anyone signed in may try it.",
    )
    # Where it is
    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    lost_attempts = models.PositiveIntegerField(
        default=0, help_text="Attempts lost since the job was last started or resumed by a person."
    )
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # The trainer's last progress (a batch, an epoch) as its supervisor last wrote it, and how
    # long the run's pace lets it be silent before it is taken for hung (training.process.watchdog).
    progress_at = models.DateTimeField(null=True, blank=True)
    stall_seconds = models.PositiveIntegerField(null=True, blank=True)
    # What the run should know while it goes on (a checkpoint that could not be stored).
    notice = models.TextField(blank=True)
    stop_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    device = models.CharField(max_length=200, blank=True, help_text="What it really ran on.")
    epochs_done = models.PositiveIntegerField(default=0)
    checkpoint_epoch = models.PositiveIntegerField(null=True, blank=True)
    latest_metrics = models.JSONField(default=dict, blank=True)
    final_metrics = models.JSONField(default=dict, blank=True)
    artifacts = models.JSONField(default=dict, blank=True, help_text="name → storage key")
    # A checkpoint (a .pt) among the artifacts is served only once it passed the inspection
    # every stored checkpoint goes through (training.services.inspection); this says which did.
    inspected_weights = models.JSONField(
        default=dict,
        blank=True,
        help_text="Checkpoints among the artifacts that passed inspection: name → storage key.",
    )
    results = models.JSONField(
        default=dict, blank=True, help_text="Final validation: per-class table, confusion matrix."
    )
    dropped_events = models.PositiveIntegerField(
        default=0, help_text="Malformed or out-of-order events from the trainer, not shown."
    )
    resent_events = models.PositiveIntegerField(
        default=0,
        help_text="Events a remote trainer sent again that Kestrel already had (an answer was "
        "lost on the way back); kept once.",
    )
    notify_email = models.BooleanField(default=False, help_text="Email the creator at the end.")
    estimated_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="The estimator's wall time when the job was started."
    )
    budget_cap = models.BigIntegerField(
        null=True, blank=True, help_text="Micro-credits this job may spend at most; then it stops."
    )
    client_info = models.JSONField(
        default=dict,
        blank=True,
        help_text="External: the machine and command its client reported (environment).",
    )
    client_seen_at = models.DateTimeField(
        null=True, blank=True, help_text="External: the last event from its client."
    )
    error = models.TextField(blank=True)
    failure_kind = models.CharField(max_length=10, choices=FailureKind.choices, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    queued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    first_batch_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = WorkspaceOwnedQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "heartbeat_at"])]

    def __str__(self) -> str:
        return self.title

    @property
    def title(self) -> str:
        return self.name or f"Job {self.pk}"

    @property
    def model_name(self) -> str:
        """Ultralytics' name of the architecture, e.g. yolo11n-seg."""
        suffix = {
            "detect": "",
            "segment": "-seg",
            "pose": "-pose",
            "obb": "-obb",
            "semantic": "-sem",
            "depth": "-depth",
        }
        return f"{self.model_family}{self.model_size}{suffix.get(self.task, '-cls')}"

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def is_external(self) -> bool:
        return self.kind == JobKind.EXTERNAL

    @property
    def is_active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def artifacts_served(self) -> dict[str, str]:
        """The artifacts a member may fetch: every file but a checkpoint that has not passed
        inspection (pending, refused, or stored before Kestrel inspected checkpoints)."""
        return {
            name: key
            for name, key in self.artifacts.items()
            if isinstance(key, str)
            and key
            and (not key.endswith(".pt") or self.inspected_weights.get(name) == key)
        }

    @property
    def checkpoint_key(self) -> str:
        return f"training/jobs/{self.pk}/last.pt"

    @property
    def best_key(self) -> str:
        return f"training/jobs/{self.pk}/best.pt"


class AttemptEnd(models.TextChoices):
    FINISHED = "finished", "Finished"
    STOPPED = "stopped", "Stopped"
    FAILED = "failed", "Failed"
    CANCELED = "canceled", "Canceled"
    LOST = "lost", "Lost (worker or trainer died)"


class TrainingAttempt(models.Model):
    """One run of a job's trainer; a resumed job has several, never two at once."""

    job = models.ForeignKey(TrainingJob, on_delete=models.CASCADE, related_name="attempt_rows")
    number = models.PositiveIntegerField()
    worker = models.CharField(max_length=200)
    machine = models.CharField(max_length=200, blank=True)
    pid = models.IntegerField(null=True, blank=True)
    resumed_from_epoch = models.PositiveIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    ended_at = models.DateTimeField(null=True, blank=True)
    end_reason = models.CharField(max_length=10, choices=AttemptEnd.choices, blank=True)
    billed_seconds = models.FloatField(
        default=0, help_text="Machine seconds of this attempt already captured from credits."
    )
    message = models.TextField(blank=True)
    provider_ref = models.CharField(
        max_length=100, blank=True, help_text="The provider's own id of the run (SkyPilot's job)."
    )
    provider_phases = models.JSONField(
        default=list,
        blank=True,
        help_text="What the provider said the run was doing, in order: [{phase, label, at}].",
    )

    class Meta:
        ordering = ["job", "number"]
        constraints = [
            models.UniqueConstraint(fields=["job", "number"], name="attempt_number_unique")
        ]

    def __str__(self) -> str:
        return f"{self.job_id} attempt {self.number}"


class EpochMetric(models.Model):
    """One epoch's metrics, exactly once per epoch (a resumed epoch replaces its row)."""

    job = models.ForeignKey(TrainingJob, on_delete=models.CASCADE, related_name="epoch_metrics")
    epoch = models.PositiveIntegerField(help_text="1-based")
    attempt = models.PositiveIntegerField()
    values = models.JSONField()
    seconds = models.FloatField(null=True, blank=True)
    recorded_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["job", "epoch"]
        constraints = [models.UniqueConstraint(fields=["job", "epoch"], name="epoch_metric_unique")]

    def __str__(self) -> str:
        return f"{self.job_id} epoch {self.epoch}"


class LogChunk(models.Model):
    job = models.ForeignKey(TrainingJob, on_delete=models.CASCADE, related_name="log_chunks")
    attempt = models.PositiveIntegerField()
    # An external job's is its client's chunk id (milliseconds since 1970, counted up): big.
    seq = models.PositiveBigIntegerField()
    text = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job", "attempt", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "seq"], name="log_chunk_unique")
        ]

    def __str__(self) -> str:
        return f"{self.job_id} log {self.attempt}.{self.seq}"


class SystemSample(models.Model):
    """CPU, memory, disk and (with a GPU) utilisation, memory, temperature and power."""

    job = models.ForeignKey(TrainingJob, on_delete=models.CASCADE, related_name="system_samples")
    attempt = models.PositiveIntegerField()
    seq = models.PositiveIntegerField()
    values = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job", "attempt", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "seq"], name="system_sample_unique")
        ]

    def __str__(self) -> str:
        return f"{self.job_id} sample {self.attempt}.{self.seq}"


class ExternalUpload(models.Model):
    """A signed, single-use upload URL handed to an external job's client
    (POST /api/webhooks/models/upload), and the file PUT there; `checkpoint_saved` names it by
    its token, never by a path."""

    job = models.ForeignKey(TrainingJob, on_delete=models.CASCADE, related_name="uploads")
    attempt = models.PositiveIntegerField()
    token = models.CharField(max_length=64, unique=True)
    filename = models.CharField(max_length=200)
    key = models.CharField(max_length=300, help_text="Where the PUT bytes are kept.")
    expires_at = models.DateTimeField()
    stored_at = models.DateTimeField(null=True, blank=True)
    size = models.PositiveBigIntegerField(default=0)
    sha256 = models.CharField(max_length=64, blank=True)
    promoted_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job", "created_at", "id"]

    def __str__(self) -> str:
        return f"{self.job_id} upload {self.filename}"


class InspectState(models.TextChoices):
    """Where an uploaded model's inspection is; a trained one is ok from the start."""

    PENDING = "pending", "Pending"
    OK = "ok", "OK"
    FAILED = "failed", "Failed"


class TrainedModelQuerySet(WorkspaceOwnedQuerySet):
    def usable(self) -> "TrainedModelQuerySet":
        """Models whose weights may be used (fine-tuned from, exported, served): every trained
        one, and uploads once a worker has inspected them."""
        return self.filter(inspect_state=InspectState.OK)


class TrainedModel(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="models")
    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="models")
    job = models.OneToOneField(
        TrainingJob, on_delete=models.SET_NULL, null=True, blank=True, related_name="model"
    )
    name = models.CharField(max_length=100)
    task = models.CharField(max_length=10, choices=Task.choices)
    architecture = models.CharField(max_length=40)
    class_names = models.JSONField(default=list)
    imgsz = models.PositiveIntegerField()
    dataset_version = models.ForeignKey(
        DatasetVersion, on_delete=models.RESTRICT, null=True, blank=True, related_name="models"
    )
    train_args = models.JSONField(default=dict)
    metrics = models.JSONField(default=dict)
    weights_key = models.CharField(max_length=300)
    weights_size = models.PositiveBigIntegerField(default=0)
    weights_sha256 = models.CharField(max_length=64, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    is_current = models.BooleanField(
        default=False, help_text="The project's promoted model (at most one per project)."
    )
    is_public = models.BooleanField(
        default=False,
        help_text="Anyone signed in may run predictions with it (never download it or see "
        "its workspace): the demo model, shown with its public dataset.",
    )
    inspect_state = models.CharField(
        max_length=10,
        choices=InspectState.choices,
        default=InspectState.OK,
        help_text="Uploads: pending until a worker has loaded them in isolation; ok or failed.",
    )
    inspect_error = models.TextField(blank=True)
    # The worker inspecting an upload and until when (core.leases); beat reaps it after that.
    inspect_lease_owner = models.CharField(max_length=200, blank=True)
    inspect_lease_until = models.DateTimeField(null=True, blank=True)
    inspect_attempts = models.PositiveSmallIntegerField(default=0)

    objects = TrainedModelQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["project"],
                condition=models.Q(is_current=True),
                name="one_current_model_per_project",
            )
        ]

    def __str__(self) -> str:
        return self.name


class WorkspaceRecipe(models.Model):
    """A recipe of one workspace (a sweep's best settings, saved by a person): the training
    form offers it after the built-in ones (training.recipes). It fills the same fields they
    do; whatever is submitted is checked like anything typed."""

    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="recipes")
    name = models.CharField(max_length=100)
    description = models.CharField(
        max_length=300, blank=True, help_text="Where it came from, e.g. the sweep and trial."
    )
    epochs = models.PositiveIntegerField()
    imgsz = models.PositiveIntegerField()
    batch = models.IntegerField(help_text="-1: Ultralytics' AutoBatch.")
    patience = models.PositiveIntegerField()
    optimizer = models.CharField(max_length=20)
    extra_args = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    objects = WorkspaceOwnedQuerySet.as_manager()

    class Meta:
        ordering = ["name", "id"]
        constraints = [
            models.UniqueConstraint(
                fields=["workspace", "name"], name="workspace_recipe_name_unique"
            )
        ]

    def __str__(self) -> str:
        return self.name
