"""Reads of training jobs and trained models. Rows are reached through the caller's workspace."""

from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings
from django.db.models import (
    Case,
    CharField,
    DecimalField,
    F,
    FloatField,
    Func,
    IntegerField,
    Max,
    OrderBy,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Coalesce, Concat, Lower, LPad, Now
from django.http import Http404
from django.utils import timezone

from billing.models import CreditAccount, EntryKind, LedgerEntry
from datasets.models import DatasetVersion, Task
from training.metering import job_cost
from training.models import (
    ACTIVE_STATES,
    FINAL_STATES,
    EpochMetric,
    JobState,
    LogChunk,
    ModelSize,
    TrainedModel,
    TrainingJob,
)
from training.services.jobs_resume import job_resume_refusal
from workspaces.models import Project, Workspace
from workspaces.selectors import WorkspaceAccess, row_for_caller

# The metric that ranks a job's epochs, per task: the one Ultralytics reports first for it.
PRIMARY_METRIC = {
    Task.DETECT: ("metrics/mAP50(B)", "mAP50"),
    Task.OBB: ("metrics/mAP50(B)", "mAP50"),
    Task.SEGMENT: ("metrics/mAP50(M)", "mask mAP50"),
    Task.POSE: ("metrics/mAP50(P)", "pose mAP50"),
    Task.CLASSIFY: ("metrics/accuracy_top1", "top-1 accuracy"),
    Task.SEMANTIC: ("metrics/mIoU", "mIoU"),
    Task.DEPTH: ("metrics/delta1", "δ1"),
}
# The metric runs of a project are compared by: Ultralytics' fitness leans on mAP50-95.
MAIN_METRIC = {
    Task.DETECT: ("metrics/mAP50-95(B)", "mAP50-95"),
    Task.OBB: ("metrics/mAP50-95(B)", "mAP50-95"),
    Task.SEGMENT: ("metrics/mAP50-95(M)", "mask mAP50-95"),
    Task.POSE: ("metrics/mAP50-95(P)", "pose mAP50-95"),
    Task.CLASSIFY: ("metrics/accuracy_top1", "top-1 accuracy"),
    # Ultralytics' fitness for these: mIoU, and δ1 (the share of pixels within 1.25× of the
    # true depth).
    Task.SEMANTIC: ("metrics/mIoU", "mIoU"),
    Task.DEPTH: ("metrics/delta1", "δ1"),
}
LOG_TAIL_LINES = 200
LOG_TAIL_CHUNKS = 400  # a chunk holds at least one line


def _best_metric(metrics: dict) -> Subquery:
    """The best value of the job's metric (per task, from `metrics`) over its epochs, computed
    in PostgreSQL."""
    value = Case(
        *[When(job__task=task, then=KT(f"values__{key}")) for task, (key, _) in metrics.items()]
    )
    best = (
        EpochMetric.objects.filter(job=OuterRef("pk"))
        .order_by()
        .values("job")
        .annotate(best=Max(Cast(value, FloatField())))
        .values("best")[:1]
    )
    return Subquery(best, output_field=FloatField())


def job_list(*, workspace: Workspace) -> QuerySet[TrainingJob]:
    return (
        TrainingJob.objects.for_workspace(workspace)
        .select_related("project", "gpu_type", "dataset_version__dataset")
        .annotate(best_metric=_best_metric(PRIMARY_METRIC))
    )


# --- a project's runs, side by side -------------------------------------------------------------


class _EpochSeconds(Func):
    """Seconds in the difference of two datetimes: a PostgreSQL interval, or on SQLite the
    microseconds Django's django_timestamp_diff() gives."""

    template = "EXTRACT(EPOCH FROM %(expressions)s)"
    output_field = FloatField()

    def as_sqlite(self, compiler, connection, **extra_context):
        return self.as_sql(
            compiler, connection, template="((%(expressions)s) / 1000000.0)", **extra_context
        )


def _training_seconds() -> Func:
    """finished_at − started_at, or the time so far for a job that has not ended."""
    end = Coalesce("finished_at", Case(When(~Q(state__in=FINAL_STATES), then=Now())))
    return _EpochSeconds(end - F("started_at"))


def _cost_dollars(seconds) -> Func:
    return Cast(
        Cast(seconds, DecimalField(max_digits=20, decimal_places=6))
        * F("gpu_type__hourly_price")
        / Value(Decimal(3600)),
        DecimalField(max_digits=20, decimal_places=6),
    )


def _rank(field: str, values: list[str]) -> Case:
    """Order by a list of values (job states in their lifecycle, model sizes n to x)."""
    whens = [When(**{field: v}, then=Value(i)) for i, v in enumerate(values)]
    return Case(*whens, default=Value(len(values)), output_field=IntegerField())


# Column → what it orders by; the page's ?sort= takes only these names.
RUN_SORTS = {
    "name": lambda: [Lower("sort_title")],
    "state": lambda: [_rank("state", JobState.values)],
    "model": lambda: [F("model_family"), _rank("model_size", ModelSize.values), F("task")],
    "dataset": lambda: [Lower("dataset_version__dataset__name"), F("dataset_version__number")],
    "epochs": lambda: [F("epochs_done"), F("epochs")],
    "imgsz": lambda: [F("imgsz")],
    "metric": lambda: [F("best_main")],
    "time": lambda: [F("training_seconds")],
    "cost": lambda: [F("cost")],
    "created": lambda: [F("created_at")],
}
RUN_SORT_DEFAULT = ("created", "desc")
RUN_SORT_DESC_FIRST = {"metric", "created"}  # best and newest first; the rest A to Z, small first


def run_sort_clean(sort: str | None, direction: str | None) -> tuple[str, str]:
    """The page's ?sort=&dir=, or the default (newest first) for anything else."""
    if sort not in RUN_SORTS:
        return RUN_SORT_DEFAULT
    if direction not in ("asc", "desc"):
        direction = "desc" if sort in RUN_SORT_DESC_FIRST else "asc"
    return sort, direction


def project_runs(
    *, workspace: Workspace, project: Project, sort: str = "created", direction: str = "desc"
) -> QuerySet[TrainingJob]:
    """The project's jobs with their best main metric (best_main), training_seconds and cost
    (dollars, Decimal), all computed in PostgreSQL, ordered by a column of RUN_SORTS. Empty
    values (no epoch yet, not started) come last either way; ties keep the id order."""
    sort, direction = run_sort_clean(sort, direction)
    title = Concat(Value("Job "), LPad(Cast("pk", CharField()), 12, Value("0")))
    runs = (
        job_list(workspace=workspace)
        .filter(project=project)
        .annotate(
            best_main=_best_metric(MAIN_METRIC),
            training_seconds=_training_seconds(),
            sort_title=Case(When(name="", then=title), default=F("name")),
        )
        .annotate(cost=_cost_dollars(F("training_seconds")))
    )
    descending = direction == "desc"
    order: list[OrderBy] = [
        expr.desc(nulls_last=True) if descending else expr.asc(nulls_last=True)
        for expr in RUN_SORTS[sort]()
    ]
    return runs.order_by(*order, "-pk" if descending else "pk")


def main_metric_label(task: str) -> str:
    return MAIN_METRIC.get(task, ("", "metric"))[1]


@dataclass
class ArgumentRow:
    name: str
    values: list[str]

    @property
    def differs(self) -> bool:
        return len(set(self.values)) > 1


def _shown(value) -> str:
    if value is None or value == "":
        return "—"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def compare_runs(*, workspace: Workspace, project: Project, ids: list[int]) -> list[TrainingJob]:
    """The project's runs among `ids`, in the order of `ids`; ids of other projects' jobs are
    left out (the caller checks that every id was found)."""
    runs = project_runs(workspace=workspace, project=project).filter(pk__in=ids)
    runs = runs.select_related("base_model")
    by_id = {job.pk: job for job in runs}
    return [by_id[pk] for pk in ids if pk in by_id]


def compare_arguments(jobs: list[TrainingJob]) -> list[ArgumentRow]:
    """One row per training argument, each run's value as shown; every extra_args key any run
    set has its row (a run that did not set it shows —, Ultralytics' default)."""
    rows = [
        ArgumentRow("epochs", [_shown(j.epochs) for j in jobs]),
        ArgumentRow("imgsz", [_shown(j.imgsz) for j in jobs]),
        ArgumentRow("batch", ["auto" if j.batch == -1 else _shown(j.batch) for j in jobs]),
        ArgumentRow("patience", [_shown(j.patience) for j in jobs]),
        ArgumentRow("optimizer", [_shown(j.optimizer) for j in jobs]),
        ArgumentRow("seed", [_shown(j.seed) for j in jobs]),
        ArgumentRow("model", [j.model_name for j in jobs]),
        ArgumentRow(
            "weights",
            [
                f"{j.get_weights_display()}: {j.base_model.name}"
                if j.base_model is not None
                else j.get_weights_display()
                for j in jobs
            ],
        ),
        ArgumentRow(
            "dataset version",
            [
                f"{j.dataset_version.dataset.name} v{j.dataset_version.number}"
                if j.dataset_version
                else _shown((j.extra_args or {}).get("data"))
                for j in jobs
            ],
        ),
        ArgumentRow("machine", [j.gpu_type.name if j.gpu_type else j.device for j in jobs]),
    ]
    keys = sorted({key for j in jobs for key in (j.extra_args or {})})
    for key in keys:
        rows.append(ArgumentRow(key, [_shown((j.extra_args or {}).get(key)) for j in jobs]))
    return rows


def _val_loss(values: dict) -> float | None:
    """The sum of the epoch's validation losses (box, cls, dfl; seg or pose ones too)."""
    losses = [
        v
        for k, v in values.items()
        if k.startswith("val/") and isinstance(v, int | float) and not isinstance(v, bool)
    ]
    return sum(losses) if losses else None


def compare_chart_data(jobs: list[TrainingJob]) -> dict:
    """Per run, its epochs with the main metric and the total validation loss, for the
    overlay charts (one query for all runs)."""
    series = {
        job.pk: {"id": job.pk, "label": job.title, "epochs": [], "metric": [], "val_loss": []}
        for job in jobs
    }
    task_of = {job.pk: job.task for job in jobs}
    rows = (
        EpochMetric.objects.filter(job__in=list(series))
        .order_by("job", "epoch")
        .values_list("job_id", "epoch", "values")
    )
    for job_id, epoch, values in rows:
        run = series[job_id]
        value = values.get(MAIN_METRIC.get(task_of[job_id], ("", ""))[0])
        run["epochs"].append(epoch)
        run["metric"].append(value if isinstance(value, int | float) else None)
        run["val_loss"].append(_val_loss(values))
    labels = {main_metric_label(job.task) for job in jobs}
    return {
        "metric_label": labels.pop() if len(labels) == 1 else "main metric (per task)",
        "runs": [series[job.pk] for job in jobs],
    }


def _job_rows() -> QuerySet[TrainingJob]:
    return TrainingJob.objects.select_related(
        "project", "gpu_type", "dataset_version__dataset", "created_by", "base_model"
    )


def job_get(*, workspace: Workspace, pk: int) -> TrainingJob:
    job = _job_rows().filter(workspace=workspace, pk=pk).first()
    if job is None:
        raise Http404("No such training job.")
    return job


def job_access_for_caller(*, auth, user, pk: int) -> tuple[WorkspaceAccess, TrainingJob]:
    """For API routes naming a job by id only: 404 unless the caller reaches its workspace."""
    return row_for_caller(
        _job_rows(), pk=pk, auth=auth, user=user, not_found="No such training job."
    )


def job_epoch_metrics(*, job: TrainingJob) -> QuerySet[EpochMetric]:
    return EpochMetric.objects.filter(job=job).order_by("epoch")


def job_log_tail(*, job: TrainingJob, lines: int = LOG_TAIL_LINES) -> str:
    """The last `lines` lines the trainer printed, over all attempts."""
    chunks = list(
        LogChunk.objects.filter(job=job)
        .order_by("-attempt", "-seq")
        .values_list("text", flat=True)[:LOG_TAIL_CHUNKS]
    )
    text = "\n".join(reversed(chunks))
    return "\n".join(text.splitlines()[-lines:])


def _model_rows() -> QuerySet[TrainedModel]:
    return TrainedModel.objects.select_related("project", "job", "dataset_version__dataset")


def model_list(*, workspace: Workspace) -> QuerySet[TrainedModel]:
    return _model_rows().filter(workspace=workspace)


def model_get(*, workspace: Workspace, pk: int) -> TrainedModel:
    model = model_list(workspace=workspace).filter(pk=pk).first()
    if model is None:
        raise Http404("No such model.")
    return model


def model_access_for_caller(*, auth, user, pk: int) -> tuple[WorkspaceAccess, TrainedModel]:
    """For API routes naming a model by id only: 404 unless the caller reaches its workspace."""
    return row_for_caller(_model_rows(), pk=pk, auth=auth, user=user, not_found="No such model.")


def trainable_versions(*, workspace: Workspace) -> QuerySet[DatasetVersion]:
    """Versions of the workspace's datasets, newest first: what a job can train on."""
    return (
        DatasetVersion.objects.filter(dataset__workspace=workspace)
        .select_related("dataset")
        .order_by("-created_at", "-id")
    )


def trainable_version_get(*, workspace: Workspace, pk: int) -> DatasetVersion:
    version = trainable_versions(workspace=workspace).filter(pk=pk).first()
    if version is None:
        raise Http404("No such dataset version.")
    return version


# A lost attempt's job on its way back: queued again, getting and preparing a machine.
RESUMING_STATES = (JobState.QUEUED, JobState.PROVISIONING, JobState.PREPARING)


def job_watch(job: TrainingJob, now=None) -> dict:
    """Whether anyone is watching the run, as the page's header says it: a supervisor whose
    heartbeat is late (two beats missed; the reaper resumes it after three), or an attempt that
    was lost and is being resumed. {"late": bool, "text": str, "silent_seconds": int|None}."""
    now = now or timezone.now()
    where = (
        f"from its epoch {job.checkpoint_epoch} checkpoint"
        if job.checkpoint_epoch
        else "from the start (no checkpoint was saved yet)"
    )
    if job.state in ACTIVE_STATES and job.heartbeat_at:
        silent = (now - job.heartbeat_at).total_seconds()
        if silent > 2 * settings.TRAINING_HEARTBEAT_SECONDS:
            seconds = int(silent)
            return {
                "late": True,
                "silent_seconds": seconds,
                "text": f"No word from the machine for {_seconds(seconds)}; Kestrel will resume "
                f"it {where} if it does not come back.",
            }
    quiet = job_quiet_seconds(job, now)
    if quiet is not None:
        left = max(0, job.stall_seconds - quiet)
        return {
            "late": True,
            "silent_seconds": quiet,
            "text": f"No progress from the trainer for {_seconds(quiet)}; if none comes within "
            f"{_seconds(left)}, Kestrel takes it for hung and restarts the run {where}.",
        }
    if job.lost_attempts and job.state in RESUMING_STATES:
        return {
            "late": False,
            "silent_seconds": None,
            "text": f"Attempt {job.attempts} was lost; Kestrel is resuming the run {where}.",
        }
    return {"late": False, "silent_seconds": None, "text": ""}


def job_quiet_seconds(job: TrainingJob, now) -> int | None:
    """Seconds a running job's trainer has made no progress, once that is past half of what its
    pace allows (and two heartbeats): the page warns then. None while it goes on."""
    if job.state != JobState.RUNNING or not job.progress_at or not job.stall_seconds:
        return None
    quiet = (now - job.progress_at).total_seconds()
    if quiet <= max(job.stall_seconds / 2, 2 * settings.TRAINING_HEARTBEAT_SECONDS):
        return None
    return int(quiet)


def _seconds(seconds: int) -> str:
    return f"{seconds} s" if seconds < 120 else f"{seconds // 60} min {seconds % 60} s"


_PHASES = {
    JobState.QUEUED: ("Waiting for a machine.", "Waiting for a machine."),  # a free worker
    JobState.PROVISIONING: ("Getting a machine.", "Starting the trainer on this machine."),
    JobState.PREPARING: (
        "Preparing the dataset and the model.",
        "Preparing the dataset and the model on this machine.",
    ),
    JobState.STOPPING: ("Stopping after this batch.", "Stopping after this batch."),
}


def job_phase_text(job: TrainingJob) -> str:
    """What the run is doing before its first batch, in words true of its machine: "This
    machine" is never rented, so it is never "getting a machine"; and a run that failed
    before training began says so, not the phase it was last seen in."""
    local = job.gpu_type_id is not None and job.gpu_type.provider == "local"
    if job.state == JobState.FAILED and not job.epochs_done and not job.checkpoint_epoch:
        where = " on this machine" if local else ""
        return f"Failed{where} before training began."
    texts = _PHASES.get(job.state)
    return texts[1 if local else 0] if texts else ""


def job_state_dict(job: TrainingJob) -> dict:
    """The job as the live page knows it: the event stream's `state` and `end` events and the
    page's starting data. A priced job's credits are read from its ledger entries (two queries)."""
    refusal = job_resume_refusal(job)
    return {
        "id": job.pk,
        "state": job.state,
        "state_display": job.get_state_display(),
        "phase_text": job_phase_text(job),
        "is_final": job.is_final,
        "epochs": job.epochs,
        "epochs_done": job.epochs_done,
        "checkpoint_epoch": job.checkpoint_epoch,
        "device": job.device,
        "started_at": job.started_at.isoformat() if job.started_at else None,
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "error": job.error,
        "notice": job.notice,
        "attempts": job.attempts,
        "stop_requested": job.stop_requested_at is not None,
        "cancel_requested": job.cancel_requested_at is not None,
        "watch": job_watch(job),
        # Resume is shown only where it can help; a failed job that it cannot says why.
        "resumable": not refusal,
        "no_resume": refusal if job.state == JobState.FAILED else "",
        # Read with the state, so the header's hold is gone once Stop or the end releases it.
        "cost": job_cost(job),
    }


# --- what training adds to the billing page -----------------------------------------------------


def job_costs(*, account: CreditAccount, limit: int = 50) -> list[dict]:
    """Per job: captured, refunded, still held; the `limit` most recent jobs (the billing
    page's cost per training job, core.pages)."""
    rows = (
        LedgerEntry.objects.filter(account=account, job__isnull=False)
        .values("job_id")
        .annotate(
            captured=Sum(Case(When(kind=EntryKind.CAPTURE, then=-F("amount")), default=0)),
            refunded=Sum(Case(When(kind=EntryKind.REFUND, then=F("amount")), default=0)),
            held=Sum("hold_delta"),
        )
        .filter(~Q(captured=0) | ~Q(held=0) | ~Q(refunded=0))
        .order_by("-job_id")[:limit]
    )
    jobs = TrainingJob.objects.in_bulk([row["job_id"] for row in rows])
    return [
        {**row, "job": jobs.get(row["job_id"]), "net": row["captured"] - row["refunded"]}
        for row in rows
    ]
