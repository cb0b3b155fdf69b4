"""The training form's estimate panel: time, cost and memory fit of the job on every machine."""

import logging
import subprocess

from django import forms
from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from core.http import HtmxHttpRequest
from datasets.models import Task
from training import selectors
from training.estimator import EstimateConfig, EstimateRow, estimates_for, version_images
from training.forms import BatchField
from training.models import ModelFamily, ModelSize
from training.services.arguments import EPOCHS_MAX, IMGSZ_MAX, IMGSZ_MIN
from training.services.jobs import version_unmeasured_warning
from workspaces import selectors as workspace_selectors
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

logger = logging.getLogger(__name__)

# The form's fields an estimate depends on (the panel's hx-include names the same).
ESTIMATE_FIELDS = (
    "dataset_version",
    "task",
    "model_family",
    "model_size",
    "epochs",
    "imgsz",
    "batch",
)


def _whole(text, default: int, low: int, high: int) -> int:
    try:
        value = int(str(text).strip())
    except (TypeError, ValueError):
        return default
    return min(max(value, low), high)


def _version_pick(data, versions, initial_version=None):
    asked = str(data.get("dataset_version", ""))
    return (versions.filter(pk=int(asked)).first() if asked.isdigit() else None) or (
        initial_version or versions.first()
    )


def estimate_config(data, versions, initial_version=None) -> EstimateConfig | None:
    """The job the form describes so far, read leniently (the form itself says what is wrong);
    None without a dataset version."""
    version = _version_pick(data, versions, initial_version)
    if version is None:
        return None
    train, val = version_images(version)
    task = data.get("task") or version.dataset.task
    family = data.get("model_family")
    size = data.get("model_size")
    try:
        batch = BatchField().clean(data.get("batch", "auto"))
    except forms.ValidationError:  # a half-typed batch: estimate with auto
        batch = -1
    return EstimateConfig(
        task=task if task in Task.values else version.dataset.task,
        model_family=family if family in ModelFamily.values else ModelFamily.YOLO26,
        model_size=size if size in ModelSize.values else ModelSize.N,
        imgsz=_whole(data.get("imgsz"), 640, IMGSZ_MIN, IMGSZ_MAX),
        epochs=_whole(data.get("epochs"), 100, 1, EPOCHS_MAX),
        batch=batch if batch == -1 or batch >= 1 else -1,
        train_images=train,
        val_images=val,
    )


def estimate_rows(config: EstimateConfig | None, workspace) -> tuple[list[EstimateRow], str]:
    """(rows, why there are none)."""
    if config is None:
        return [], "Pick a dataset version to see estimates."
    if not config.train_images:
        return [], "This dataset version has no training images."
    try:
        return estimates_for(config, workspace), ""
    except (OSError, subprocess.SubprocessError, ValueError, KeyError):
        logger.exception("estimate failed for %s", config)
        return [], "No estimate for this model right now."


@workspace_view(Perm.TRAIN)
@require_GET
def job_estimate(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    project = workspace_selectors.project_get(workspace=access.workspace, pk=pk)
    versions = selectors.trainable_versions(workspace=access.workspace)
    config = estimate_config(request.GET, versions)
    rows, missing = estimate_rows(config, access.workspace)
    version = _version_pick(request.GET, versions)
    context = {
        "access": access,
        "project": project,
        "estimate_config": config,
        "estimates": rows,
        "estimate_missing": missing,
        "val_warning": version_unmeasured_warning(version) if version else "",
    }
    return render(request, "training/job_form.html#estimates", context)
