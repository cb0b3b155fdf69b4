"""The job page, its log download, stop / cancel / resume, files, and the jobs list."""

import mimetypes
from pathlib import PurePosixPath

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.errors import ServiceError
from core.files import stored_file_response
from core.http import HtmxHttpRequest
from training import selectors
from training.models import (
    JobState,
    LogChunk,
)
from training.services.jobs import job_cancel, job_resume, job_stop
from training.views.job_page import ANSI, INLINE_TYPES, job_context
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

JOBS_PAGE_SIZE = 25


@workspace_view(Perm.READ)
@require_GET
def job_detail(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    job = selectors.job_get(workspace=access.workspace, pk=pk)
    return render(request, "training/job_detail.html", job_context(access, job))


@workspace_view(Perm.READ)
@require_GET
def job_log(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """Everything the trainer printed, over all attempts in order, without terminal colours.
    One response, not a stream: under ASGI Django would read a synchronous stream whole first."""
    job = selectors.job_get(workspace=access.workspace, pk=pk)
    chunks = (
        LogChunk.objects.filter(job=job)
        .order_by("attempt", "seq")
        .values_list("text", flat=True)
        .iterator(chunk_size=500)
    )
    response = HttpResponse(
        "".join(ANSI.sub("", text) + "\n" for text in chunks),
        content_type="text/plain; charset=utf-8",
    )
    response["Content-Disposition"] = f'attachment; filename="job-{job.pk}-log.txt"'
    return response


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
    """One of the job's stored files, by its name in job.artifacts; nothing else is reachable,
    and a checkpoint only once it passed inspection (TrainingJob.artifacts_served)."""
    job = selectors.job_get(workspace=access.workspace, pk=pk)
    key = job.artifacts_served.get(name)
    if key is None:
        raise Http404("No such file for this job.")
    content_type = mimetypes.guess_type(name)[0]
    # A checkpoint by the name the page shows (an external job's is stored by its digest).
    stored_name = name.split()[0] if key.endswith(".pt") else PurePosixPath(key).name
    return stored_file_response(
        key=key,
        filename=f"job-{job.pk}-{stored_name}",
        inline_type=content_type if content_type in INLINE_TYPES else None,
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
