"""Exports on the model page: start one, the card's live state (polled by htmx while an export
runs), and the download of a finished export."""

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from core.errors import ServiceError
from core.files import stored_file_response
from core.http import HtmxHttpRequest
from deploy.exports import export_filename, export_get, export_start, exports_panel
from training import selectors as training_selectors
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess


def _card(
    request: HtmxHttpRequest, access: WorkspaceAccess, model, notice: str = ""
) -> HttpResponse:
    context = {"access": access, "model": model, **exports_panel(access=access, model=model)}
    return render(request, "deploy/_exports.html", {**context, "export_notice": notice})


@workspace_view(Perm.WRITE)
@require_POST
def model_export_start(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    model = training_selectors.model_get(workspace=access.workspace, pk=pk)
    fmt = request.POST.get("format", "")
    try:
        export_start(access=access, model=model, fmt=fmt)
    except ServiceError as e:
        if request.htmx:  # said inside the card it replaces
            return _card(request, access, model, notice=str(e))
        messages.error(request, str(e))
    if request.htmx:
        return _card(request, access, model)
    return redirect("model_detail", ws_slug=access.workspace.slug, pk=model.pk)


@workspace_view(Perm.READ)
@require_GET
def model_exports(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """The exports card alone: what htmx swaps in every 2 s while an export runs."""
    model = training_selectors.model_get(workspace=access.workspace, pk=pk)
    return _card(request, access, model)


@workspace_view(Perm.READ)
@require_GET
def export_download(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    export = export_get(workspace=access.workspace, pk=pk)
    return stored_file_response(key=export.file_key, filename=export_filename(export))
