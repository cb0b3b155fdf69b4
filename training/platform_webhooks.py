"""The Ultralytics Platform's training webhooks, as stock `ultralytics` calls them
(ultralytics/utils/callbacks/platform.py and the ultralytics_platform client), mounted at
/api/webhooks/:

- `POST training/metrics` {project, name} or {modelId}, with `event` and `data`:
  training_started, epoch_end, console_output, checkpoint_saved, training_complete;
- `POST models/upload` {modelId, runId, filename}: a signed single-use URL, then
- `PUT models/upload/<token>?exp=&sig=`: the file itself, with no auth header.

The key is a workspace API key (`Authorization: Bearer`) with the train scope. Answers are JSON
with a readable `error`: 401 only for a key that is not a key (the client switches itself off
for the rest of its process on any 401), 403 for a missing scope or a plan limit, 404 for a
workspace, project or job the key cannot reach (unknown and foreign alike), 400/413 for a
malformed or oversized body (counted on the job where one is named), 410 for a run that has
ended and for an upload URL whose attempt has: a finished run's files and the model made from
them never change (the client logs a 410 and goes on; it retries none). `training_started`
naming an ended run is the one exception: it answers `cancelled`, so that the client reports
a new run instead (a 410 there would leave the new run untracked)."""

import json
import re

from django.core.exceptions import PermissionDenied
from django.db.models import F
from django.http import Http404, HttpRequest, JsonResponse
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from core.errors import ServiceError
from training.models import JobKind, TrainingJob
from training.services.external_runs.client_input import slug
from training.services.external_runs.events import (
    external_complete,
    external_console,
    external_epoch,
)
from training.services.external_runs.runs import (
    external_run_resume,
    external_run_start,
    project_for_run,
    run_cancelled,
    run_live_check,
)
from training.services.external_uploads import (
    RunEnded,
    RunNotFound,
    RunRefused,
    UploadForbidden,
    UploadTooLarge,
    external_checkpoint_saved,
    external_upload_create,
    external_upload_store,
)
from workspaces.models import ApiKey
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess, row_for_caller, workspace_access_for_api_key
from workspaces.services.keys import api_key_authenticate

MAX_BODY_BYTES = 2 * 2**20  # one event; training_complete with its curves is a few hundred KB
EVENTS = {
    "training_started",
    "epoch_end",
    "console_output",
    "checkpoint_saved",
    "training_complete",
    # In the client's list, never sent by the training callbacks: taken as signs of life.
    "training_progress",
    "system_metrics",
}
NOT_FOUND = "No such workspace, project or run for this key: check project=<workspace>/<project>."
_MODEL_ID_HEAD = re.compile(rb'"modelId"\s*:\s*"?(\d{1,18})')


def _error(status: int, message: str) -> JsonResponse:
    return JsonResponse({"error": message}, status=status)


class _Refusal(Exception):
    def __init__(self, response: JsonResponse):
        self.response = response


def _key(request: HttpRequest) -> ApiKey:
    header = request.headers.get("Authorization", "")
    raw = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
    key = api_key_authenticate(raw=raw) if raw else None
    if key is None:
        raise _Refusal(_error(401, "Send a live Kestrel API key: Authorization: Bearer <key>."))
    return key


def _require_train(access: WorkspaceAccess) -> None:
    try:
        access.require(Perm.TRAIN)
    except PermissionDenied as e:
        raise _Refusal(_error(403, str(e) or "This key may not train.")) from None


def _job(key: ApiKey, model_id) -> tuple[WorkspaceAccess, TrainingJob]:
    """The caller's external job named by modelId; unknown and foreign alike: 404."""
    if not str(model_id or "").isdigit() or len(str(model_id)) > 18:
        raise _Refusal(_error(404, NOT_FOUND))
    try:
        access, job = row_for_caller(
            TrainingJob.objects.filter(kind=JobKind.EXTERNAL),
            pk=int(model_id),
            auth=key,
            user=key.created_by,
            not_found=NOT_FOUND,
        )
    except Http404:
        raise _Refusal(_error(404, NOT_FOUND)) from None
    _require_train(access)
    return access, job


def _access_for_project(key: ApiKey, project: str) -> tuple[WorkspaceAccess, str]:
    """The key's access to the workspace `project` names (owner/project, the owner matched
    case-insensitively; no owner: the key's own), and the project's slug."""
    owner, _, name = str(project).partition("/") if "/" in str(project) else ("", "", project)
    if owner and owner.lower() != key.workspace.slug.lower():
        raise _Refusal(_error(404, NOT_FOUND))
    try:
        access = workspace_access_for_api_key(api_key=key, slug=key.workspace.slug)
    except Http404:
        raise _Refusal(_error(404, NOT_FOUND)) from None
    _require_train(access)
    return access, slug(name)


def _job_by_name(key: ApiKey, project: str, name: str) -> tuple[WorkspaceAccess, TrainingJob]:
    access, project_slug = _access_for_project(key, project)
    try:
        found = project_for_run(access=access, project_slug=project_slug)
    except RunNotFound:
        raise _Refusal(_error(404, NOT_FOUND)) from None
    job = (
        TrainingJob.objects.filter(project=found, kind=JobKind.EXTERNAL, name__iexact=slug(name))
        .order_by("-created_at", "-pk")
        .first()
    )
    if job is None:
        raise _Refusal(_error(404, NOT_FOUND))
    return access, job


def _count_dropped(key: ApiKey, model_id) -> None:
    """A refused body of a job the key reaches is counted where its page shows them."""
    if str(model_id or "").isdigit() and len(str(model_id)) <= 18:
        TrainingJob.objects.filter(
            pk=int(model_id), kind=JobKind.EXTERNAL, workspace_id=key.workspace_id
        ).update(dropped_events=F("dropped_events") + 1)


def _body(request: HttpRequest, key: ApiKey) -> dict:
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        # Not read: the stock client writes modelId first, so its head names the job.
        match = _MODEL_ID_HEAD.search(request.read(200))
        _count_dropped(key, match.group(1).decode() if match else None)
        raise _Refusal(_error(413, f"An event is at most {MAX_BODY_BYTES >> 20} MB."))
    raw = request.read(MAX_BODY_BYTES + 1)
    if len(raw) > MAX_BODY_BYTES:
        match = _MODEL_ID_HEAD.search(raw[:200])
        _count_dropped(key, match.group(1).decode() if match else None)
        raise _Refusal(_error(413, f"An event is at most {MAX_BODY_BYTES >> 20} MB."))
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        match = _MODEL_ID_HEAD.search(raw[:200])
        _count_dropped(key, match.group(1).decode() if match else None)
        raise _Refusal(_error(400, "The body is not JSON.")) from None
    if not isinstance(body, dict):
        raise _Refusal(_error(400, "The body is a JSON object."))
    return body


def _job_url(request: HttpRequest, job: TrainingJob) -> str:
    path = reverse("job_detail", kwargs={"ws_slug": job.workspace.slug, "pk": job.pk})
    return request.build_absolute_uri(path)


def _started(request: HttpRequest, key: ApiKey, body: dict, data: dict) -> JsonResponse:
    model_id = body.get("modelId")
    if model_id:
        access, job = _job(key, model_id)
        try:
            job, attempt = external_run_resume(job=job, data=data)
        except RunRefused:
            # Over: the client then reports a new run under its name.
            return JsonResponse({"modelId": str(job.pk), "cancelled": True})
    else:
        project, name = body.get("project"), body.get("name") or "train"
        if not isinstance(project, str) or not project or not isinstance(name, str):
            raise _Refusal(_error(400, "training_started names its project (and run name)."))
        access, project_slug = _access_for_project(key, project)
        try:
            found = project_for_run(access=access, project_slug=project_slug)
        except RunNotFound:
            raise _Refusal(_error(404, NOT_FOUND)) from None
        job, attempt = external_run_start(access=access, project=found, name=slug(name), data=data)
    return JsonResponse(
        {
            "modelId": str(job.pk),
            "runId": attempt.pk,
            "modelSlug": job.name,
            "modelUrl": _job_url(request, job),
            "cancelled": run_cancelled(job),
        }
    )


def _identified(key: ApiKey, body: dict) -> TrainingJob:
    if body.get("modelId"):
        return _job(key, body["modelId"])[1]
    if isinstance(body.get("project"), str) and isinstance(body.get("name"), str):
        return _job_by_name(key, body["project"], body["name"])[1]
    raise _Refusal(_error(400, "Name the run: modelId, or project and name."))


@csrf_exempt
@require_http_methods(["POST"])
def training_metrics(request: HttpRequest) -> JsonResponse:
    try:
        key = _key(request)
        body = _body(request, key)
        event, data = body.get("event"), body.get("data")
        if event not in EVENTS or not isinstance(data, dict):
            _count_dropped(key, body.get("modelId"))
            return _error(400, f"Unknown event {str(event)[:40]!r}, or its data is not an object.")
        try:
            if event == "training_started":
                return _started(request, key, body, data)
            job = _identified(key, body)
            if event == "epoch_end":
                job = external_epoch(job=job, data=data)
            elif event == "console_output":
                job = external_console(job=job, data=data)
            elif event == "checkpoint_saved":
                upload = external_checkpoint_saved(job=job, token=data.get("modelPath"))
                return JsonResponse({"saved": True, "modelPath": upload.token})
            elif event == "training_complete":
                job = external_complete(job=job, data=data)
                return JsonResponse(
                    {"ok": True, "state": job.state, "modelUrl": _job_url(request, job)}
                )
            else:
                run_live_check(job)
                TrainingJob.objects.filter(pk=job.pk).update(client_seen_at=timezone.now())
            return JsonResponse({"ok": True, "cancelled": run_cancelled(job)})
        except RunEnded as e:
            return _error(410, str(e))
        except RunNotFound as e:
            return _error(404, str(e))
        except RunRefused as e:
            return _error(403, str(e))
        except ServiceError as e:
            _count_dropped(key, body.get("modelId"))
            return _error(400, str(e))
    except _Refusal as refusal:
        return refusal.response


@csrf_exempt
@require_http_methods(["POST"])
def model_upload(request: HttpRequest) -> JsonResponse:
    try:
        key = _key(request)
        body = _body(request, key)
        job = _identified(key, body)
        size = body.get("size")
        size = size if isinstance(size, int) and not isinstance(size, bool) else None
        try:
            upload, path = external_upload_create(job=job, filename=body.get("filename"), size=size)
        except UploadTooLarge as e:
            return _error(413, str(e))
        except RunEnded as e:
            return _error(410, str(e))
        except RunRefused as e:
            return _error(403, str(e))
        except ServiceError as e:
            return _error(400, str(e))
        url = request.build_absolute_uri(reverse("platform_model_upload_put", args=[upload.token]))
        return JsonResponse(
            {
                "uploadUrl": f"{url}?{path.partition('?')[2]}",
                "gcsPath": upload.token,
                "uploadPath": upload.token,
                "expiresAt": upload.expires_at.isoformat(),
            }
        )
    except _Refusal as refusal:
        return refusal.response


@csrf_exempt
@require_http_methods(["PUT"])
def model_upload_put(request: HttpRequest, token: str) -> JsonResponse:
    """The signed URL is the only key (like a presigned S3 URL): one file of one attempt of
    one job, once, while that attempt is live."""
    try:
        upload = external_upload_store(
            token=token,
            expires=request.GET.get("exp", ""),
            signature=request.GET.get("sig", ""),
            body=request,
            declared=request.META.get("CONTENT_LENGTH") or "",
        )
    except UploadForbidden as e:
        return _error(403, str(e))
    except RunEnded as e:
        return _error(410, str(e))
    except UploadTooLarge as e:
        return _error(413, str(e))
    except ServiceError as e:
        return _error(400, str(e))
    return JsonResponse({"stored": upload.filename, "size": upload.size})
