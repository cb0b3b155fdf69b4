"""Editing a deployment's collection rule (deploy.collection): on a dedicated endpoint's page,
and for the shared API on a model's try-it page. Editors only."""

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from core.errors import ServiceError
from core.http import HtmxHttpRequest
from deploy.collection.rules import CollectionRuleForm, collection_rule_save
from deploy.views.deployments import _deployment
from training import selectors as training_selectors
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess


def _save(request, access: WorkspaceAccess, *, deployment=None, model=None) -> None:
    served = deployment.model if deployment is not None else model
    form = CollectionRuleForm(request.POST, class_names=list(served.class_names or []))
    if not form.is_valid():
        messages.error(request, f"The collection rule was not saved. {form.errors_text()}")
        return
    data = form.cleaned_data
    try:
        rule = collection_rule_save(
            access=access,
            deployment=deployment,
            model=model,
            enabled=data["enabled"],
            dataset_id=data["dataset"],
            conf_min=data["conf_min"],
            conf_max=data["conf_max"],
            classes=list(data["classes"]),
            sample_rate=data["sample_rate"],
            daily_cap=data["daily_cap"],
        )
    except ServiceError as exc:
        messages.error(request, f"The collection rule was not saved: {exc}")
        return
    if rule.enabled:
        messages.success(
            request, f"Collecting the images the rule selects into “{rule.dataset.name}”."
        )
    else:
        messages.success(request, "Collection is off: callers' images are not kept.")


@workspace_view(Perm.WRITE)
@require_POST
def deployment_collection(
    request: HtmxHttpRequest, access: WorkspaceAccess, pk: int
) -> HttpResponse:
    deployment = _deployment(access, pk)
    _save(request, access, deployment=deployment)
    return redirect("deployment_detail", ws_slug=access.workspace.slug, pk=deployment.pk)


@workspace_view(Perm.WRITE)
@require_POST
def model_collection(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    model = training_selectors.model_get(workspace=access.workspace, pk=pk)
    _save(request, access, model=model)
    return redirect("model_try", ws_slug=access.workspace.slug, pk=model.pk)
