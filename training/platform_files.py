"""`model=ul://<workspace>/<project>/<model>` for stock `ultralytics` (issue 20).

`GET /api/models/<owner>/<project>/<model>/files` answers `{"files": [{name, size,
downloadUrl}]}`; the client downloads `files[0]` (ultralytics/utils/checks.py,
resolve_platform_uri), so the one file listed is the model's weights (its best.pt), through a
signed URL. `<model>` is what a person or the client calls the model: its name or the slug of
it (a run reported by the client is named after the run: `run1`), the name or slug of the job
that trained it, or its id; several models of one name: the newest. Uploads still being
inspected, or refused, are never served.

The client keeps the download at <weights_dir>/<owner>/<project>/<model>/<file name of the URL>
and uses it again whenever that file exists, so the URL's file name carries a digest of the
weights: new weights under the same name are downloaded again.
"""

import hashlib

from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.views.decorators.http import require_GET

from core.files import stored_file_response
from core.signed_urls import signed_query, signed_query_valid
from training.models import TrainedModel
from workspaces.permissions import Perm
from workspaces.platform_api import (
    PlatformRefusal,
    platform_access,
    platform_error,
    platform_matches,
    platform_name_forms,
    platform_project_find,
    platform_require_any,
)

WEIGHTS_PURPOSE = "platform.model-weights"
WEIGHTS_SECONDS = 15 * 60


def _not_found(owner: str, project: str, model: str) -> str:
    return f"No model “{model}” in project “{project}” of workspace “{owner}” for this caller."


def _usable(project) -> list[TrainedModel]:
    return list(
        TrainedModel.objects.usable()
        .filter(project=project)
        .exclude(weights_key="")
        .select_related("job")
        .order_by("-created_at", "-id")
    )


def platform_model_find(*, project, ident: str, not_found: str) -> TrainedModel:
    """The newest usable model of `project` that `ident` names."""
    models = _usable(project)
    if ident.isdigit():
        by_id = [m for m in models if m.pk == int(ident)]
        if by_id:
            return by_id[0]

    def names(model: TrainedModel) -> list[str]:
        job_name = model.job.name if model.job is not None else ""
        return [*platform_name_forms(model.name), *platform_name_forms(job_name)]

    found = platform_matches(models, ident, names)
    if not found:
        raise PlatformRefusal(404, not_found)
    return found[0]  # newest first


def weights_tag(model: TrainedModel) -> str:
    """12 hex digits that change with the weights (their sha256, or their content-addressed
    key for rows that predate it)."""
    if model.weights_sha256:
        return model.weights_sha256[:12]
    return hashlib.sha256(model.weights_key.encode()).hexdigest()[:12]


def weights_filename(model: TrainedModel) -> str:
    return f"best-{weights_tag(model)}.pt"


@require_GET
def platform_model_files(request: HttpRequest, owner: str, project: str, model: str):
    not_found = _not_found(owner, project, model)
    try:
        access = platform_access(request, owner=owner, not_found=not_found)
        # A key made to train may start from a model of the workspace.
        platform_require_any(access, (Perm.READ, Perm.TRAIN), "download model weights")
        found_project = platform_project_find(
            workspace=access.workspace, ident=project, not_found=not_found
        )
        row = platform_model_find(project=found_project, ident=model, not_found=not_found)
    except PlatformRefusal as refusal:
        return platform_error(refusal.status, refusal.message)
    filename = weights_filename(row)
    path = reverse("platform_model_weights", kwargs={"pk": row.pk, "filename": filename})
    query = signed_query(WEIGHTS_PURPOSE, f"{row.pk}/{filename}", seconds=WEIGHTS_SECONDS)
    return JsonResponse(
        {
            "files": [
                {
                    "name": "best.pt",
                    "size": row.weights_size,
                    "downloadUrl": request.build_absolute_uri(f"{path}?{query}"),
                }
            ],
            "modelId": row.pk,
            "model": row.name,
        }
    )


@require_GET
def platform_model_weights(request: HttpRequest, pk: int, filename: str) -> HttpResponse:
    """The weights a signed URL names: one model, the weights it had when signed."""
    if not signed_query_valid(WEIGHTS_PURPOSE, f"{pk}/{filename}", request.GET):
        return platform_error(403, "This download URL is not valid or has expired.")
    row = TrainedModel.objects.usable().filter(pk=pk).exclude(weights_key="").first()
    if row is None or weights_filename(row) != filename:
        return platform_error(404, "These weights are no longer stored: resolve the model again.")
    try:
        return stored_file_response(key=row.weights_key, filename=filename)
    except Http404:
        return platform_error(404, "These weights are no longer stored.")
