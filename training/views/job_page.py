"""What the job page shows, built from the database: metrics by kind, the live page's starting
data, results (per-class table, confusion matrix with gallery links, curves, validation images)."""

import mimetypes
import re
from urllib.parse import urlencode

from django.urls import reverse
from django.utils import timezone

from datasets.models import DatasetClass
from training import selectors
from training.estimator import microcredits, reestimate
from training.forms import version_label
from training.models import (
    JobState,
    SystemSample,
    TrainedModel,
    TrainingJob,
)
from training.services.jobs import version_unmeasured_warning
from training.services.jobs_resume import job_resume_refusal
from training.streams import job_progress
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

INLINE_TYPES = {"image/png", "image/jpeg"}  # plots are shown in the page; the rest downloads

QUALITY_METRICS = [
    ("precision", "Precision"),
    ("recall", "Recall"),
    ("mAP50", "mAP50"),
    ("mAP50-95", "mAP50-95"),
]
METRIC_SUFFIXES = [("B", "box"), ("M", "mask"), ("P", "pose")]
CLASSIFY_METRICS = [
    ("metrics/accuracy_top1", "Top-1 accuracy"),
    ("metrics/accuracy_top5", "Top-5 accuracy"),
]
# Semantic segmentation (Ultralytics' SemanticMetrics) and depth (DepthMetrics): the headline
# first. δn: the share of pixels whose predicted depth is within 1.25ⁿ of the truth (higher is
# better); AbsRel, RMSE (metres) and SILog are errors (lower is better).
PIXEL_METRICS = [
    ("metrics/mIoU", "mIoU", ""),
    ("metrics/pixel_acc", "Pixel accuracy", ""),
    ("metrics/delta1", "δ1", "within 1.25×"),
    ("metrics/delta2", "δ2", "within 1.25²×"),
    ("metrics/delta3", "δ3", "within 1.25³×"),
    ("metrics/abs_rel", "AbsRel", "lower is better"),
    ("metrics/rmse", "RMSE", "metres, lower is better"),
    ("metrics/silog", "SILog", "lower is better"),
]


def metric_groups(values: dict) -> dict:
    """An epoch's values as the page shows them: quality, losses (train and val), learning rates.
    Only the keys present are shown, so each task shows its own (box, mask, pose, top-1, mIoU,
    δ1)."""
    quality = []
    for suffix, what in METRIC_SUFFIXES:
        for name, label in QUALITY_METRICS:
            key = f"metrics/{name}({suffix})"
            if key in values:
                quality.append({"label": label, "what": what, "key": key, "value": values[key]})
    for key, label in CLASSIFY_METRICS:
        if key in values:
            quality.append({"label": label, "what": "", "key": key, "value": values[key]})
    for key, label, what in PIXEL_METRICS:
        if key in values:
            quality.append({"label": label, "what": what, "key": key, "value": values[key]})
    losses: dict[str, dict] = {}
    for key, value in values.items():
        split, _, name = key.partition("/")
        if split in ("train", "val") and name:
            losses.setdefault(name, {"name": name})[split] = value
    rates = [
        {"label": f"group {key.removeprefix('lr/pg')}", "value": value}
        for key, value in values.items()
        if key.startswith("lr/")
    ]
    return {"quality": quality, "losses": list(losses.values()), "rates": rates}


# --- starting a job ----------------------------------------------------------------------------


# --- the job page ------------------------------------------------------------------------------

# Terminal control sequences (colours, cursor moves): kept for the live console, which draws
# colours, and removed from the plain-text log and the page without JavaScript.
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")
LIVE_LOG_LINES = 2000  # as many as the event stream's snapshot sends
LIVE_SYSTEM_POINTS = 600
CURVE_SUFFIXES = ("PR_curve.png", "F1_curve.png")
VAL_PRED = re.compile(r"^val_batch(\d+)_pred\.jpg$")
COUNT_COLUMNS = {"images", "instances", "pixels"}
# PostgreSQL's jsonb keeps no key order: the per-class columns are put in Ultralytics' order.
COLUMN_ORDER = [
    ("images",),
    ("instances", "pixels"),
    ("precision", "-p"),
    ("recall", "-r"),
    ("f1", "-f1"),
    ("map50",),
    ("map50-95",),
]


def _column_rank(key: str) -> tuple[int, str]:
    low = key.lower()
    for rank, names in enumerate(COLUMN_ORDER):
        if any(low == n or (n.startswith("-") and low.endswith(n)) for n in names):
            return rank, low
    return len(COLUMN_ORDER), low


def _artifacts(job: TrainingJob) -> list[dict]:
    rows = []
    for name in sorted(job.artifacts_served):  # no link to a checkpoint not inspected
        content_type = mimetypes.guess_type(name)[0]
        rows.append({"name": name, "is_image": content_type in INLINE_TYPES})
    return rows


def _system_samples(job: TrainingJob) -> list[dict]:
    """The run's system samples, thinned to at most LIVE_SYSTEM_POINTS over the whole run."""
    samples = SystemSample.objects.filter(job=job).order_by("attempt", "seq")
    total = samples.count()
    step = max(1, -(-total // LIVE_SYSTEM_POINTS))
    return [
        {"t": int(created.timestamp() * 1000), "values": values}
        for i, (values, created) in enumerate(
            samples.values_list("values", "created_at").iterator()
        )
        if i % step == 0 or i == total - 1
    ]


def _live_data(job: TrainingJob, log_lines: list[str], events_url: str) -> dict:
    """What the page's script starts from: the same shape as the event stream's snapshot, so a
    finished job draws its charts without a stream and a running one before its snapshot."""
    progress = job_progress(job) if job.state == JobState.RUNNING else None
    return {
        "events_url": events_url,
        "batch_size": job.batch if job.batch > 0 else None,
        "title": job.title,
        "job": selectors.job_state_dict(job),
        "epochs": list(selectors.job_epoch_metrics(job=job).values("epoch", "values", "seconds")),
        "logs": log_lines,
        "system": _system_samples(job),
        "progress": progress,
    }


def _elapsed(job: TrainingJob) -> str:
    if job.started_at is None:
        return ""
    seconds = int(((job.finished_at or timezone.now()) - job.started_at).total_seconds())
    hours, rest = divmod(max(0, seconds), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _cell(key: str, value) -> str:
    if isinstance(value, bool) or value is None:
        return "—"
    if isinstance(value, int | float):
        if key.lower() in COUNT_COLUMNS:
            return str(int(value))
        return f"{value:.3f}"
    return str(value)


def _per_class(rows: list, link) -> dict | None:
    """Ultralytics' per-class summary as a table: its columns, whatever the task reports."""
    rows = [r for r in rows if isinstance(r, dict)]
    if not rows:
        return None
    name_key = next((k for k in rows[0] if k.lower() == "class"), None)
    if name_key is None:
        return None
    columns = sorted((k for k in rows[0] if k != name_key), key=_column_rank)
    return {
        "columns": [c[:1].upper() + c[1:] if c.islower() else c for c in columns],
        "rows": [
            {
                "name": str(row.get(name_key, "")),
                "url": link(str(row.get(name_key, ""))),
                "cells": [_cell(c, row.get(c)) for c in columns],
            }
            for row in rows
        ],
    }


def confusion_shaded(matrix: dict, link) -> dict | None:
    """The confusion matrix as table rows (rows predicted, columns true, as Ultralytics lays it
    out); each cell's shade is its share of the true class: cm-0 for none, cm-1..cm-9 for some."""
    names = matrix.get("names") if isinstance(matrix, dict) else None
    values = matrix.get("matrix") if isinstance(matrix, dict) else None
    if not names or not values or len(values) != len(names):
        return None
    size = len(names)
    values = [[(v if isinstance(v, int | float) else 0) for v in row[:size]] for row in values]
    column_sums = [sum(row[j] for row in values if j < len(row)) for j in range(size)]
    heads = [{"name": str(n), "url": link(str(n))} for n in names]
    rows = []
    for i, row in enumerate(values):
        cells = []
        for j, value in enumerate(row):
            share = value / column_sums[j] if column_sums[j] else 0
            shade = min(9, max(1, round(share * 9))) if value > 0 else 0
            shown = str(int(value)) if float(value).is_integer() else f"{value:.2f}"
            cells.append({"value": shown, "shade": shade, "diagonal": i == j})
        rows.append({"head": heads[i], "cells": cells})
    return {"heads": heads, "rows": rows}


def _results(access: WorkspaceAccess, job: TrainingJob) -> dict:
    """The results panel: final metrics, per-class table, confusion matrix, curves, val images.
    Class names link to the dataset's gallery filtered by that class, while it still has one."""
    dataset = job.dataset_version.dataset if job.dataset_version else None  # external: maybe none
    class_ids, gallery = {}, ""
    if dataset is not None:
        class_ids = dict(DatasetClass.objects.filter(dataset=dataset).values_list("name", "pk"))
        gallery = reverse(
            "dataset_gallery", kwargs={"ws_slug": access.workspace.slug, "pk": dataset.pk}
        )

    def link(name: str) -> str | None:
        pk = class_ids.get(name)
        return f"{gallery}?{urlencode({'class': pk})}" if pk else None

    results = job.results if isinstance(job.results, dict) else {}
    names = sorted(job.artifacts)
    curves = [n for n in names if n.endswith(CURVE_SUFFIXES)]
    if "confusion_matrix_normalized.png" in job.artifacts:
        curves.append("confusion_matrix_normalized.png")
    val_images = []
    for name in names:
        match = VAL_PRED.match(name)
        if match:
            labels = f"val_batch{match.group(1)}_labels.jpg"
            val_images.append({"pred": name, "labels": labels if labels in job.artifacts else None})
    shown = {*curves, *(v["pred"] for v in val_images), *(v["labels"] for v in val_images)}
    return {
        "final": metric_groups(job.final_metrics or {}),
        "per_class": _per_class(results.get("per_class") or [], link),
        "confusion": confusion_shaded(results.get("confusion_matrix") or {}, link),
        "curves": curves,
        "val_images": val_images,
        "shown": shown,
    }


def _title_prefix(job: TrainingJob, progress: dict | None) -> str:
    if job.state == JobState.RUNNING and progress and progress.get("epoch"):
        return f"Epoch {progress['epoch']}/{progress.get('epochs') or job.epochs}"
    return job.get_state_display()


def _estimate(job: TrainingJob) -> dict | None:
    """The estimate made at the start and, once an epoch is measured, the job's own."""
    if job.gpu_type is None:  # an external job: its machine is not one Kestrel estimates
        return None
    after = reestimate(job)
    start = job.estimated_seconds
    if after is None and start is None:
        return None
    return {
        "after": after,
        "start_seconds": start,
        "start_credits": after.at_start_credits if after else _start_credits(job),
        "priced": job.gpu_type.hourly_price > 0,
    }


def _start_credits(job: TrainingJob) -> int | None:
    return microcredits(job.estimated_seconds, job.gpu_type) if job.estimated_seconds else None


def job_context(access: WorkspaceAccess, job: TrainingJob) -> dict:
    can_train = access.can(Perm.TRAIN)
    log_lines = selectors.job_log_tail(job=job, lines=LIVE_LOG_LINES).splitlines()
    events_url = reverse("job_events", kwargs={"ws_slug": access.workspace.slug, "pk": job.pk})
    live = _live_data(job, log_lines, events_url)
    results = _results(access, job)
    return {
        "access": access,
        "job": job,
        "version_label": version_label(job.dataset_version) if job.dataset_version else "",
        "val_warning": version_unmeasured_warning(job.dataset_version)
        if job.dataset_version
        else "",
        "progress": live["progress"],
        "live_data": live,
        "title_prefix": _title_prefix(job, live["progress"]),
        "elapsed": _elapsed(job),
        "metrics": metric_groups(job.latest_metrics),
        "results": results,
        "attempts": list(job.attempt_rows.all()),
        "artifacts": [a for a in _artifacts(job) if a["name"] not in results["shown"]],
        "log": ANSI.sub("", "\n".join(log_lines)),
        "model": TrainedModel.objects.filter(job=job).first(),
        "cost": live["job"]["cost"],
        "estimate": _estimate(job),
        # The buttons that may be needed while the page is open are in the page; the script
        # shows each one as the job's state allows (the same rules as here).
        "show_stop": can_train and not job.is_final,
        "show_resume": can_train
        and (not job.is_final or job.state in (JobState.STOPPED, JobState.FAILED)),
        "can_stop": can_train and not job.is_final and job.state != JobState.STOPPING,
        "can_cancel": can_train and not job.is_final and job.cancel_requested_at is None,
        "can_resume": can_train and not job_resume_refusal(job),
    }
