"""The model page, promoting a model, and its weights download."""

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from core.errors import ServiceError
from core.files import stored_file_response
from core.pages import page_parts
from training import selectors
from training.models import InspectState
from training.services.models import model_promote, model_upload
from training.views.job_page import metric_groups
from workspaces import selectors as workspace_selectors
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess


@workspace_view(Perm.READ)
@require_GET
def model_detail(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    model = selectors.model_get(workspace=access.workspace, pk=pk)
    return render(
        request,
        "training/model_detail.html",
        {
            "access": access,
            "model": model,
            "metrics": metric_groups(model.metrics),
            **page_parts("model_page", access=access, model=model),  # exports (deploy)
        },
    )


@workspace_view(Perm.TRAIN)
@require_POST
def model_promote_view(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """Make the model its project's current one; back to the page the button was on."""
    model = selectors.model_get(workspace=access.workspace, pk=pk)
    try:
        model_promote(access=access, model=model)
    except ServiceError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, f"{model.name} is now the current model of {model.project.name}.")
    back = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(
        back, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(back)
    return redirect("model_detail", ws_slug=access.workspace.slug, pk=model.pk)


@workspace_view(Perm.READ)
@require_GET
def model_weights(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """The weights, once they passed inspection: pending or refused ones are never served."""
    model = selectors.model_get(workspace=access.workspace, pk=pk)
    if model.inspect_state != InspectState.OK:
        raise Http404("These weights have not passed inspection; they are not served.")
    return stored_file_response(
        key=model.weights_key,
        filename=f"kestrel-model-{model.pk}-{model.architecture or 'yolo'}.pt",
    )


@workspace_view(Perm.TRAIN)
@require_POST
def model_upload_view(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """Keep uploaded weights as a model of the project, to fine-tune from in the training form."""
    project = workspace_selectors.project_get(workspace=access.workspace, pk=pk)
    upload = request.FILES.get("weights")
    if upload is None:
        messages.error(request, "Choose a .pt file to upload.")
        return redirect("project_detail", ws_slug=access.workspace.slug, pk=project.pk)
    try:
        model = model_upload(
            access=access,
            project=project,
            name=request.POST.get("name", ""),
            task=request.POST.get("task", ""),
            upload=upload,
        )
    except ServiceError as e:
        messages.error(request, str(e))
        return redirect("project_detail", ws_slug=access.workspace.slug, pk=project.pk)
    messages.success(
        request, f"{model.name} is uploaded; pick it in the training form to fine-tune."
    )
    return redirect("model_detail", ws_slug=access.workspace.slug, pk=model.pk)
