"""Uploading into a dataset, and an import's page.

The upload page carries two ways in: the resumable uploader (static/js/upload.js, which calls
the JSON endpoints below: create, status, chunk, complete) and a plain multipart form that
needs no JavaScript and sends one whole file in one request.
"""

import json

from django import forms
from django.contrib import messages
from django.http import HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.errors import ServiceError
from core.http import HtmxHttpRequest
from datasets import selectors
from datasets.models import Import, ImportStatus
from datasets.services import uploads as services
from datasets.services.import_report import full_report
from datasets.services.ingest import import_progress
from datasets.services.video import FPS_DEFAULT, FPS_MAX, FPS_MIN
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

# The declared file list: 10,000 names of up to 1,024 characters fit with room to spare.
MAX_FILE_LIST_BYTES = 16 * 1024 * 1024
ACCEPT = (
    "image/*,.jpg,.jpeg,.png,.webp,.bmp,.tif,.tiff,.mpo,.jfif,"
    ".txt,.yaml,.yml,.json,.xml,.csv,.ndjson,.names,.data,.zip,.tar,.gz,.tgz,"
    "video/*,.mp4,.m4v,.mov,.mkv,.webm,.avi"
)
FILES_SHOWN = 100


def _fps_field() -> forms.FloatField:
    return forms.FloatField(
        label="Frames per second from videos",
        help_text=(
            f"Each video (MP4, MOV, MKV, WebM, AVI) is imported as frames sampled at this rate, "
            f"from {FPS_MIN:g} to {FPS_MAX:g} a second, up to your plan's limit per video."
        ),
        initial=FPS_DEFAULT,
        required=False,
        min_value=FPS_MIN,
        max_value=FPS_MAX,
        widget=forms.NumberInput(attrs={"step": "0.1"}),
    )


class UploadForm(forms.Form):
    file = forms.FileField(
        label="Archive, image or video",
        help_text="One .zip, .tar or .tar.gz archive, one image, or one video.",
        allow_empty_file=True,  # the service says "the file is empty" in its own words
        widget=forms.FileInput(attrs={"accept": ACCEPT}),
    )
    video_fps = _fps_field()


class VideoFpsForm(forms.Form):
    """The uploader's own field (static/js/upload.js sends its value with the file list)."""

    video_fps = _fps_field()


def _error(message: str, status: int = 400, **extra) -> JsonResponse:
    return JsonResponse({"detail": message, **extra}, status=status)


def _upload_json(access: WorkspaceAccess, imp: Import, **extra) -> dict:
    ws = access.workspace.slug
    chunk_url = reverse(
        "upload_chunk",
        kwargs={"ws_slug": ws, "import_pk": imp.pk, "file_index": 0, "chunk_index": 0},
    )
    return {
        "id": imp.pk,
        "status": imp.status,
        "files": imp.files,
        "total_size": imp.total_size,
        "received_size": imp.received_size,
        "chunk_size": services.chunk_bytes(),
        "missing": (
            services.upload_missing_chunks(imp=imp) if imp.status == ImportStatus.UPLOADING else []
        ),
        "status_url": reverse("upload_status", kwargs={"ws_slug": ws, "import_pk": imp.pk}),
        "chunk_url": chunk_url.replace("/files/0/chunks/0/", "/files/{file}/chunks/{chunk}/"),
        "complete_url": reverse("upload_complete", kwargs={"ws_slug": ws, "import_pk": imp.pk}),
        "import_url": reverse("import_detail", kwargs={"ws_slug": ws, "import_pk": imp.pk}),
        **extra,
    }


def _declared_files(request) -> tuple[list, object]:
    """The file list and the frames per second from videos, from a JSON body
    {"files": [{name, size}], "video_fps": 1}, or form fields name=…&size=…&video_fps=…."""
    if request.content_type == "application/json":
        body = request.read(MAX_FILE_LIST_BYTES + 1)
        if len(body) > MAX_FILE_LIST_BYTES:
            raise ServiceError("The file list is too long; put the files in an archive.")
        try:
            payload = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise ServiceError(
                'Send the file list as JSON: {"files": [{"name", "size"}]}.'
            ) from None
        if not isinstance(payload, dict):
            return None, None
        return payload.get("files"), payload.get("video_fps")
    names, sizes = request.POST.getlist("name"), request.POST.getlist("size")
    if len(names) != len(sizes):
        raise ServiceError("Give one size for every name.")
    try:
        files = [{"name": n, "size": int(s)} for n, s in zip(names, sizes, strict=True)]
        return files, request.POST.get("video_fps")
    except ValueError:
        raise ServiceError("Sizes are whole numbers of bytes.") from None


@workspace_view(Perm.WRITE)
@require_http_methods(["GET", "POST"])
def upload_page(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    if request.method == "POST":
        form = UploadForm(request.POST, request.FILES)
        if form.is_valid():
            upload = form.cleaned_data["file"]
            try:
                imp = services.upload_store_whole(
                    access=access,
                    dataset=dataset,
                    name=upload.name,
                    stream=upload,
                    size=upload.size,
                    video_fps=form.cleaned_data["video_fps"],
                )
            except ServiceError as e:
                form.add_error("file", str(e))
            else:
                messages.success(request, "Uploaded. The import starts in a moment.")
                return redirect("import_detail", ws_slug=access.workspace.slug, import_pk=imp.pk)
    else:
        form = UploadForm()
    return render(
        request,
        "datasets/upload.html",
        {
            "access": access,
            "dataset": dataset,
            "form": form,
            "fps_form": VideoFpsForm(auto_id="uploader_%s"),
            "accept": ACCEPT,
            "chunk_size": services.chunk_bytes(),
            "max_upload": access.workspace.plan.max_upload_bytes,
            "max_files": services.MAX_FILES,
            "unfinished": services.upload_list_unfinished(dataset=dataset, user=access.user)[:5],
        },
    )


@workspace_view(Perm.WRITE)
@require_POST
def upload_create(request, access: WorkspaceAccess, pk: int) -> JsonResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    try:
        files, video_fps = _declared_files(request)
        imp, resumed = services.upload_create(
            access=access, dataset=dataset, files=files, video_fps=video_fps
        )
    except ServiceError as e:
        return _error(str(e))
    return JsonResponse(_upload_json(access, imp, resumed=resumed), status=200 if resumed else 201)


@workspace_view(Perm.WRITE)
@require_GET
def upload_status(request, access: WorkspaceAccess, import_pk: int) -> JsonResponse:
    imp = selectors.import_get(workspace=access.workspace, pk=import_pk)
    return JsonResponse(_upload_json(access, imp))


@workspace_view(Perm.WRITE)
@require_http_methods(["PUT", "POST"])
def upload_chunk(
    request, access: WorkspaceAccess, import_pk: int, file_index: int, chunk_index: int
) -> JsonResponse:
    """One chunk as the raw request body. Not request.body: that stops at 2.5 MB."""
    imp = selectors.import_get(workspace=access.workspace, pk=import_pk)
    limit = services.chunk_bytes()
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > limit:
        return _error(f"A chunk is at most {limit:,} bytes; this one says {declared:,}.")
    data = request.read(limit + 1)
    if len(data) > limit:
        return _error(f"A chunk is at most {limit:,} bytes.")
    try:
        imp, stored = services.upload_chunk_put(
            access=access, imp=imp, file_index=file_index, chunk_index=chunk_index, data=data
        )
    except services.UploadConflict as e:
        return _error(str(e), 409)
    except ServiceError as e:
        return _error(str(e))
    return JsonResponse(
        {
            "file": file_index,
            "chunk": chunk_index,
            "size": len(data),
            "stored": stored,
            "received_size": imp.received_size,
            "total_size": imp.total_size,
        }
    )


@workspace_view(Perm.WRITE)
@require_POST
def upload_complete(request, access: WorkspaceAccess, import_pk: int) -> JsonResponse:
    imp = selectors.import_get(workspace=access.workspace, pk=import_pk)
    try:
        imp = services.upload_complete(access=access, imp=imp)
    except services.UploadIncomplete as e:
        return _error(str(e), missing=e.missing)
    except ServiceError as e:
        return _error(str(e))
    return JsonResponse(
        {
            "id": imp.pk,
            "status": imp.status,
            "import_url": reverse(
                "import_detail", kwargs={"ws_slug": access.workspace.slug, "import_pk": imp.pk}
            ),
        }
    )


@workspace_view(Perm.READ)
@require_GET
def import_detail(
    request: HtmxHttpRequest, access: WorkspaceAccess, import_pk: int
) -> HttpResponse:
    """The import's page; htmx polls its status partial every second until the import is final."""
    imp = selectors.import_get(workspace=access.workspace, pk=import_pk)
    files = imp.files if isinstance(imp.files, list) else []
    context = {
        "access": access,
        "imp": imp,
        "dataset": imp.dataset,
        "progress": import_progress(imp),
        "report": services.import_report_view(imp.report),
        "files": files[:FILES_SHOWN],
        "files_more": max(0, len(files) - FILES_SHOWN),
        "file_count": len(files),
    }
    template = "datasets/import_detail.html"
    if request.htmx:
        template += "#status"
    return render(request, template, context)


@workspace_view(Perm.READ)
@require_GET
def import_report_download(
    request: HtmxHttpRequest, access: WorkspaceAccess, import_pk: int
) -> HttpResponse:
    """The import's whole report as JSON: every entry left out, with its reason and kind."""
    imp = selectors.import_get(workspace=access.workspace, pk=import_pk)
    response = JsonResponse(
        full_report(imp), json_dumps_params={"ensure_ascii": False, "indent": 1}
    )
    response["Content-Disposition"] = f'attachment; filename="import-{imp.pk}-report.json"'
    return response
