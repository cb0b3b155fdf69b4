"""Training pages: the form that starts a job, the job page (live over htmx), the jobs list,
the model page, and downloads of checkpoints, plots and weights."""

import mimetypes
from pathlib import PurePosixPath

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from datasets.models import Task
from training import selectors
from training.forms import TrainForm, version_label
from training.models import JobState, TrainedModel, TrainingJob, WeightsSource
from training.services.arguments import extra_args_parse, pretrained_weights
from training.services.catalog import gpu_choices
from training.services.jobs import job_cancel, job_resume, job_stop, job_submit
from training.supervisor import job_progress
from workspaces import selectors as workspace_selectors
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess
from workspaces.services import ServiceError
from workspaces.views import HtmxHttpRequest

JOBS_PAGE_SIZE = 25
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


def metric_groups(values: dict) -> dict:
    """An epoch's values as the page shows them: quality, losses (train and val), learning rates.
    Only the keys present are shown, so each task shows its own (box, mask, pose, top-1)."""
    quality = []
    for suffix, what in METRIC_SUFFIXES:
        for name, label in QUALITY_METRICS:
            key = f"metrics/{name}({suffix})"
            if key in values:
                quality.append({"label": label, "what": what, "key": key, "value": values[key]})
    for key, label in CLASSIFY_METRICS:
        if key in values:
            quality.append({"label": label, "what": "", "key": key, "value": values[key]})
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


def _initial(versions, request) -> dict:
    """The newest version (or ?version=<id>, e.g. from a version's page), and pretrained weights
    when this server has them."""
    asked = request.GET.get("version", "")
    version = (versions.filter(pk=int(asked)).first() if asked.isdigit() else None) or (
        versions.first()
    )
    task = version.dataset.task if version is not None else Task.DETECT
    try:
        pretrained_weights("yolo26", "n", task)
        weights = WeightsSource.PRETRAINED
    except ServiceError:
        weights = WeightsSource.SCRATCH
    return {"dataset_version": version, "weights": weights}


@workspace_view(Perm.TRAIN)
@require_http_methods(["GET", "POST"])
def job_create(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    project = workspace_selectors.project_get(workspace=access.workspace, pk=pk)
    versions = selectors.trainable_versions(workspace=access.workspace)
    models = list(selectors.model_list(workspace=access.workspace))
    machines = gpu_choices(workspace=access.workspace)
    form = TrainForm(
        request.POST or None, versions=versions, models=models, initial=_initial(versions, request)
    )
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            extra_args = extra_args_parse(data["extra_args"])
        except ServiceError as e:
            form.add_error("extra_args", str(e))
        else:
            try:
                job = job_submit(
                    access=access,
                    project=project,
                    version=data["dataset_version"],
                    gpu_type_id=data["gpu_type"],
                    params=form.params(extra_args=extra_args),
                    base_model=data["base_model"],
                    quick_test="quick_test" in request.POST,
                    name=data["name"],
                )
            except ServiceError as e:
                form.add_error(None, str(e))
            else:
                what = "Quick test run" if job.is_quick_test else "Training"
                messages.success(request, f"{what} queued: {job.title}.")
                return redirect("job_detail", ws_slug=access.workspace.slug, pk=job.pk)
    if form.is_bound:
        picked = form.data.get("gpu_type", "")
    else:
        picked = next((str(c.gpu.pk) for c in machines if c.available), "")
    return render(
        request,
        "training/job_form.html",
        {
            "access": access,
            "project": project,
            "form": form,
            "machines": machines,
            "picked_gpu": picked,
            "has_versions": versions.exists(),
        },
        status=400 if form.is_bound else 200,
    )


# --- the job page ------------------------------------------------------------------------------


def _artifacts(job: TrainingJob) -> list[dict]:
    rows = []
    for name in sorted(job.artifacts):
        content_type = mimetypes.guess_type(name)[0]
        rows.append({"name": name, "is_image": content_type in INLINE_TYPES})
    return rows


def _job_context(access: WorkspaceAccess, job: TrainingJob) -> dict:
    progress = job_progress(job) if job.state == JobState.RUNNING else None
    can_train = access.can(Perm.TRAIN)
    finished_training = job.checkpoint_epoch is not None and job.checkpoint_epoch >= job.epochs
    return {
        "access": access,
        "job": job,
        "version_label": version_label(job.dataset_version),
        "progress": progress,
        "metrics": metric_groups(job.latest_metrics),
        "attempts": list(job.attempt_rows.all()),
        "artifacts": _artifacts(job),
        "log": selectors.job_log_tail(job=job),
        "model": TrainedModel.objects.filter(job=job).first(),
        "can_stop": can_train and not job.is_final and job.state != JobState.STOPPING,
        "can_cancel": can_train and not job.is_final and job.cancel_requested_at is None,
        "can_resume": can_train
        and job.state in (JobState.STOPPED, JobState.FAILED)
        and not finished_training,
    }


@workspace_view(Perm.READ)
@require_GET
def job_detail(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    job = selectors.job_get(workspace=access.workspace, pk=pk)
    context = _job_context(access, job)
    if request.htmx:
        return render(request, "training/job_detail.html#status", context)
    return render(request, "training/job_detail.html", context)


def _act(request, access: WorkspaceAccess, pk: int, action, done: str) -> HttpResponse:
    job = selectors.job_get(workspace=access.workspace, pk=pk)
    try:
        job = action(access=access, job=job)
    except ServiceError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, done.format(job=job.title))
    return redirect("job_detail", ws_slug=access.workspace.slug, pk=pk)


@workspace_view(Perm.TRAIN)
@require_POST
def job_stop_view(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    return _act(
        request,
        access,
        pk,
        job_stop,
        "Stopping {job}: it finishes the current batch, validates and keeps its weights.",
    )


@workspace_view(Perm.TRAIN)
@require_http_methods(["GET", "POST"])
def job_cancel_view(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    if request.method == "POST":
        return _act(request, access, pk, job_cancel, "Canceled {job}.")
    job = selectors.job_get(workspace=access.workspace, pk=pk)
    return render(request, "training/job_cancel.html", {"access": access, "job": job})


@workspace_view(Perm.TRAIN)
@require_POST
def job_resume_view(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    return _act(
        request, access, pk, job_resume, "{job} is queued again; it continues from its checkpoint."
    )


@workspace_view(Perm.READ)
@require_GET
def job_artifact(request, access: WorkspaceAccess, pk: int, name: str) -> HttpResponse:
    """One of the job's stored files, by its name in job.artifacts; nothing else is reachable."""
    job = selectors.job_get(workspace=access.workspace, pk=pk)
    key = job.artifacts.get(name)
    if not isinstance(key, str) or not key:
        raise Http404("No such file for this job.")
    content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    inline = content_type in INLINE_TYPES
    return FileResponse(
        selectors.stored_file_open(key),
        filename=f"job-{job.pk}-{PurePosixPath(key).name}",
        as_attachment=not inline,
        content_type=content_type if inline else "application/octet-stream",
    )


# --- lists and models --------------------------------------------------------------------------


@workspace_view(Perm.READ)
@require_GET
def job_list(request, access: WorkspaceAccess) -> HttpResponse:
    jobs = selectors.job_list(workspace=access.workspace)
    state = request.GET.get("state", "")
    if state in JobState.values:
        jobs = jobs.filter(state=state)
    else:
        state = ""
    page = Paginator(jobs, JOBS_PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "training/job_list.html",
        {
            "access": access,
            "page": page,
            "state": state,
            "states": JobState.choices,
        },
    )


@workspace_view(Perm.READ)
@require_GET
def model_detail(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    model = selectors.model_get(workspace=access.workspace, pk=pk)
    return render(
        request,
        "training/model_detail.html",
        {"access": access, "model": model, "metrics": metric_groups(model.metrics)},
    )


@workspace_view(Perm.READ)
@require_GET
def model_weights(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    model = selectors.model_get(workspace=access.workspace, pk=pk)
    return FileResponse(
        selectors.stored_file_open(model.weights_key),
        filename=f"kestrel-model-{model.pk}-{model.architecture or 'yolo'}.pt",
        as_attachment=True,
        content_type="application/octet-stream",
    )


W = "w/<slug:ws_slug>/"
JOB = W + "training/jobs/<int:pk>/"
urlpatterns = [
    path(W + "projects/<int:pk>/train/", job_create, name="job_create"),
    path(W + "training/", job_list, name="job_list"),
    path(JOB, job_detail, name="job_detail"),
    path(JOB + "stop/", job_stop_view, name="job_stop"),
    path(JOB + "cancel/", job_cancel_view, name="job_cancel"),
    path(JOB + "resume/", job_resume_view, name="job_resume"),
    path(JOB + "files/<str:name>", job_artifact, name="job_artifact"),
    path(W + "models/<int:pk>/", model_detail, name="model_detail"),
    path(W + "models/<int:pk>/weights/", model_weights, name="model_weights"),
]
