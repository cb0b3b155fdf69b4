from django.conf import settings
from django.db import models
from django.db.models.functions import Lower

from core.models import LongJobRow
from workspaces.models import Workspace, WorkspaceOwnedQuerySet


class Task(models.TextChoices):
    DETECT = "detect", "Detect"
    SEGMENT = "segment", "Segment"
    POSE = "pose", "Pose"
    OBB = "obb", "Oriented boxes"
    CLASSIFY = "classify", "Classify"
    SEMANTIC = "semantic", "Semantic segmentation"
    DEPTH = "depth", "Depth"


# Tasks labelled per pixel: one PixelMap per image (a PNG blob), not Label rows.
PIXEL_TASKS = (Task.SEMANTIC, Task.DEPTH)
# A semantic mask's value for pixels no class covers (Ultralytics' ignore label).
IGNORE_INDEX = 255


class Split(models.TextChoices):
    TRAIN = "train", "Train"
    VAL = "val", "Val"
    TEST = "test", "Test"


class Blob(models.Model):
    """Image bytes stored once, named by their SHA-256, shared by every dataset that uses them.

    Bytes are stored after EXIF orientation has been applied, so pixels and labels agree
    everywhere (gallery, training, export) without anyone reading EXIF again.
    """

    sha256 = models.CharField(max_length=64, unique=True)
    size = models.PositiveBigIntegerField()
    content_type = models.CharField(max_length=32)
    width = models.PositiveIntegerField()
    height = models.PositiveIntegerField()
    has_thumbnail = models.BooleanField(default=False)
    phash = models.BigIntegerField(
        null=True, blank=True, help_text="64-bit perceptual hash, for near-duplicates."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.sha256[:12]

    @property
    def storage_key(self) -> str:
        return f"blobs/{self.sha256[:2]}/{self.sha256}"

    @property
    def thumbnail_key(self) -> str:
        return f"thumbs/{self.sha256[:2]}/{self.sha256}.jpg"

    @property
    def thumbnail_key_webp(self) -> str:
        """Where thumbnails were kept before they were JPEG (migration 0009 has them remade)."""
        return f"thumbs/{self.sha256[:2]}/{self.sha256}.webp"


class DatasetQuerySet(WorkspaceOwnedQuerySet):
    def public(self):
        return self.filter(is_public=True)


class Dataset(models.Model):
    workspace = models.ForeignKey(Workspace, on_delete=models.CASCADE, related_name="datasets")
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    task = models.CharField(max_length=10, choices=Task.choices, default=Task.DETECT)
    keypoint_shape = models.JSONField(
        null=True, blank=True, help_text="[points, dims] for pose datasets, e.g. [17, 3]."
    )
    depth_scale = models.FloatField(
        null=True,
        blank=True,
        help_text="Depth datasets: the 16-bit PNG value of one metre (1000: millimetres).",
    )
    is_public = models.BooleanField(default=False)
    cloned_from = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="clones"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    health_checked_at = models.DateTimeField(null=True, blank=True)
    health_errors = models.PositiveIntegerField(default=0)
    health_warnings = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = DatasetQuerySet.as_manager()

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint("workspace", Lower("name"), name="dataset_name_unique"),
            models.CheckConstraint(condition=models.Q(task__in=Task.values), name="dataset_task"),
        ]

    def __str__(self) -> str:
        return self.name


class DatasetClass(models.Model):
    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="classes")
    index = models.PositiveIntegerField()
    name = models.CharField(max_length=100)

    class Meta:
        ordering = ["index"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "index"], name="class_index_unique"),
            models.UniqueConstraint(fields=["dataset", "name"], name="class_name_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.index}: {self.name}"


class LabelStatus(models.TextChoices):
    """Where an image is in the labelling workflow (annotation owns the transitions)."""

    UNLABELLED = "unlabelled", "Unlabelled"
    LABELLED = "labelled", "Labelled"
    IN_REVIEW = "in_review", "In review"
    APPROVED = "approved", "Approved"
    REJECTED = "rejected", "Rejected"


class Image(models.Model):
    # No index of its own: each index below starts with the dataset.
    dataset = models.ForeignKey(
        Dataset, on_delete=models.CASCADE, related_name="images", db_index=False
    )
    blob = models.ForeignKey(Blob, on_delete=models.PROTECT, related_name="images")
    filename = models.CharField(
        max_length=255, help_text="As uploaded; shown escaped, never a path."
    )
    split = models.CharField(max_length=5, choices=Split.choices, default=Split.TRAIN)
    label_count = models.PositiveIntegerField(default=0)
    status = models.CharField(
        max_length=10, choices=LabelStatus.choices, default=LabelStatus.UNLABELLED
    )
    revision = models.PositiveIntegerField(
        default=0, help_text="Bumped by every save of the labels; a stale save is refused."
    )
    review_comment = models.TextField(blank=True)
    labelled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    labelled_at = models.DateTimeField(null=True, blank=True)
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    uncertainty = models.FloatField(
        null=True, blank=True, help_text="From the last pre-labelling run: higher, less sure."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(status__in=LabelStatus.values), name="image_status_valid"
            ),
        ]
        # (dataset, [filter,] id): a gallery page is a range of one of these, whatever the
        # dataset's size or where the page is in it.
        indexes = [
            models.Index(fields=["dataset", "id"], name="image_dataset_id_idx"),
            models.Index(fields=["dataset", "split", "id"]),
            models.Index(fields=["dataset", "status", "id"]),
        ]

    def __str__(self) -> str:
        return self.filename


class LabelKind(models.TextChoices):
    BOX = "box", "Box"
    POLYGON = "polygon", "Polygon"
    KEYPOINTS = "keypoints", "Keypoints"
    OBB = "obb", "Oriented box"
    TAG = "tag", "Image class"


class Label(models.Model):
    """One shape on one image. Coordinates are normalised to 0..1 of the stored image.

    box: [cx, cy, w, h]; polygon: [x1, y1, x2, y2, ...]; obb: [x1, y1, ..., x4, y4];
    keypoints: [cx, cy, w, h, x1, y1(, v1), ...]; tag: [].
    """

    image = models.ForeignKey(Image, on_delete=models.CASCADE, related_name="labels")
    dataset_class = models.ForeignKey(DatasetClass, on_delete=models.CASCADE, related_name="labels")
    kind = models.CharField(max_length=10, choices=LabelKind.choices)
    data = models.JSONField(default=list)

    class Meta:
        ordering = ["id"]
        # (image, class): an image's labels, and "has this image a label of class C".
        # (class, image): a class's images in id order, from the index alone: the gallery's
        # class filter reads a page of them from its keyset on (see GalleryFilter.apply).
        indexes = [
            models.Index(fields=["dataset_class", "image"], name="label_class_image_idx"),
            models.Index(fields=["image", "dataset_class"]),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.dataset_class_id} on {self.image_id}"


class PixelMap(models.Model):
    """The per-pixel label of one image, stored as a lossless PNG blob (content-addressed like
    the images): for semantic datasets an 8-bit mask of class indexes (IGNORE_INDEX where no
    class is), for depth datasets a 16-bit depth map (the dataset's depth_scale per metre, 0 =
    no reading). Same size as its image."""

    image = models.OneToOneField(Image, on_delete=models.CASCADE, related_name="pixel_map")
    blob = models.ForeignKey(Blob, on_delete=models.PROTECT, related_name="pixel_maps")
    # Semantic: {class index: pixels}; depth: {"min": m, "median": m, "max": m, "valid": pixels}.
    stats = models.JSONField(default=dict)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"pixel map of {self.image_id}"


class ImportStatus(models.TextChoices):
    UPLOADING = "uploading", "Uploading"
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Importing"
    SUCCEEDED = "succeeded", "Imported"
    FAILED = "failed", "Failed"


IMPORT_FINAL_STATES = (ImportStatus.SUCCEEDED, ImportStatus.FAILED)


class Import(LongJobRow):
    """One upload and its import into a dataset: progress, outcome and the report."""

    STATE_FIELD = "status"
    FINAL_STATES = IMPORT_FINAL_STATES

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="imports")
    status = models.CharField(
        max_length=10, choices=ImportStatus.choices, default=ImportStatus.UPLOADING
    )
    filename = models.CharField(max_length=255, help_text="The archive's name, or “N files”.")
    files = models.JSONField(
        default=list, help_text="The uploaded files, in order: [{name, size}, ...]."
    )
    total_size = models.PositiveBigIntegerField()
    received_size = models.PositiveBigIntegerField(default=0)
    chunk_count = models.PositiveIntegerField(default=0)
    format = models.CharField(max_length=32, blank=True)
    progress_done = models.PositiveIntegerField(default=0)
    progress_total = models.PositiveIntegerField(default=0)
    report = models.JSONField(default=dict, blank=True)
    video_fps = models.FloatField(
        default=1.0, help_text="Frames per second sampled from each video in the upload."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.filename} → {self.dataset} ({self.status})"

    @property
    def upload_prefix(self) -> str:
        return f"uploads/{self.pk}/"


class UploadChunk(models.Model):
    """One received piece of one uploaded file; an upload resumes by sending the missing ones."""

    upload = models.ForeignKey(Import, on_delete=models.CASCADE, related_name="chunks")
    file_index = models.PositiveIntegerField()
    chunk_index = models.PositiveIntegerField()
    size = models.PositiveIntegerField()

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["upload", "file_index", "chunk_index"], name="upload_chunk_unique"
            )
        ]

    def __str__(self) -> str:
        return f"upload {self.upload_id} file {self.file_index} chunk {self.chunk_index}"

    @property
    def storage_key(self) -> str:
        return f"{self.upload.upload_prefix}{self.file_index}/{self.chunk_index}"


class DatasetVersion(models.Model):
    """An immutable snapshot: the manifest in storage, its hash and a summary here."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    note = models.CharField(max_length=200, blank=True)
    content_hash = models.CharField(max_length=64)
    manifest_key = models.CharField(max_length=200)
    summary = models.JSONField(default=dict)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "number"], name="version_number_unique")
        ]

    def __str__(self) -> str:
        return f"{self.dataset} v{self.number}"


class Severity(models.TextChoices):
    ERROR = "error", "Error"
    WARNING = "warning", "Warning"
    INFO = "info", "Info"


class HealthFinding(models.Model):
    """One problem the health check found; replaced as a whole on each run."""

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="findings")
    kind = models.CharField(max_length=40, help_text="Which check found it.")
    severity = models.CharField(max_length=10, choices=Severity.choices)
    message = models.CharField(max_length=500)
    image_ids = models.JSONField(default=list, help_text="Images this finding is about.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["severity", "kind", "id"]

    def __str__(self) -> str:
        return f"{self.severity}: {self.message}"


class HealthRunState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Done"
    FAILED = "failed", "Failed"


HEALTH_RUN_FINAL = (HealthRunState.SUCCEEDED, HealthRunState.FAILED)
HEALTH_RUN_ACTIVE = (HealthRunState.QUEUED, HealthRunState.RUNNING)


class HealthRun(LongJobRow):
    """One health check of a dataset by a worker. What it found is the dataset's findings;
    this row is whether a check is queued or running, and why the last one failed."""

    FINAL_STATES = HEALTH_RUN_FINAL

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="health_runs")
    state = models.CharField(
        max_length=10, choices=HealthRunState.choices, default=HealthRunState.QUEUED
    )
    rerun_requested = models.BooleanField(
        default=False, help_text="The dataset changed while it ran: check again once done."
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["dataset"],
                condition=models.Q(state__in=HEALTH_RUN_ACTIVE),
                name="one_active_health_run_per_dataset",
            )
        ]

    def __str__(self) -> str:
        return f"health check of {self.dataset_id} ({self.state})"
