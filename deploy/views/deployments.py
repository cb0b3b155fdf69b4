"""Dedicated endpoint pages: the list (with the form that deploys a model), one deployment's
page (state, URL, stats, logs, usage; start, stop, swap the model, delete)."""

from django import forms
from django.contrib import messages
from django.db.models import Sum
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from billing.ledger import credits_format_rounded
from core.errors import ServiceError
from deploy import services, supervisor
from deploy.collection.rules import collection_panel
from deploy.models import Deployment, DeploymentState, Placement, UsageDay
from deploy.remote_endpoint import owed
from deploy.selectors import deployment_usage_by_day
from training.models import GpuType, TrainedModel
from training.services.catalog import gpu_choices
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess


class DeployForm(forms.Form):
    model = forms.ModelChoiceField(queryset=TrainedModel.objects.none(), empty_label=None)
    name = forms.CharField(max_length=100, required=False, label="Name (optional)")
    gpu = forms.ModelChoiceField(
        queryset=GpuType.objects.none(),
        required=False,
        empty_label="This machine (free)",
        label="Runs on",
    )

    def __init__(self, *args, access: WorkspaceAccess, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["model"].queryset = TrainedModel.objects.for_workspace(
            access.workspace
        ).select_related("project")
        self.fields["model"].label_from_instance = lambda m: f"{m.name} ({m.project.name})"
        # The training catalogue's GPUs SkyPilot rents that this workspace may use, priced.
        rented = [
            c.gpu.pk
            for c in gpu_choices(workspace=access.workspace)
            if c.available and c.gpu.provider == "skypilot"
        ]
        gpu = self.fields["gpu"]
        gpu.queryset = GpuType.objects.filter(pk__in=rented)
        gpu.label_from_instance = lambda g: (
            f"{g.name} via SkyPilot ({g.hourly_price.normalize()} credits an hour)"
        )
        if not rented:
            gpu.widget = forms.HiddenInput()


def _deployment(access: WorkspaceAccess, pk: int) -> Deployment:
    from django.http import Http404

    deployment = (
        Deployment.objects.for_workspace(access.workspace)
        .select_related("model", "model__project", "created_by", "gpu_type")
        .filter(pk=pk)
        .first()
    )
    if deployment is None:
        raise Http404("No such deployment.")
    return deployment


def endpoint_url(request, deployment: Deployment) -> str:
    return request.build_absolute_uri(f"/d/{deployment.slug}/predict")


@workspace_view(Perm.READ)
@require_safe
def deployment_list(request, access: WorkspaceAccess) -> HttpResponse:
    deployments = list(
        Deployment.objects.for_workspace(access.workspace).select_related("model", "model__project")
    )
    initial = {"model": request.GET.get("model")} if request.GET.get("model") else None
    plan = access.workspace.plan
    return render(
        request,
        "deploy/deployment_list.html",
        {
            "access": access,
            "deployments": deployments,
            "form": DeployForm(initial=initial, access=access),
            "can_write": access.can(Perm.WRITE),
            "limit": getattr(plan, "max_deployments", 1),
            "plan": plan,
        },
    )


@workspace_view(Perm.WRITE)
@require_POST
def deployment_create(request, access: WorkspaceAccess) -> HttpResponse:
    form = DeployForm(request.POST, access=access)
    if not form.is_valid():
        messages.error(request, "Choose a model of this workspace to deploy.")
        return redirect("deployment_list", ws_slug=access.workspace.slug)
    try:
        deployment = services.deployment_create(
            access=access,
            model=form.cleaned_data["model"],
            name=form.cleaned_data["name"],
            gpu_type=form.cleaned_data["gpu"],
        )
    except ServiceError as exc:
        messages.error(request, str(exc))
        return redirect("deployment_list", ws_slug=access.workspace.slug)
    messages.success(request, f"Starting {deployment.name}; it takes a few seconds.")
    return redirect("deployment_detail", ws_slug=access.workspace.slug, pk=deployment.pk)


@workspace_view(Perm.READ)
@require_safe
def deployment_detail(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    deployment = _deployment(access, pk)
    running = deployment.state == DeploymentState.RUNNING
    usage = UsageDay.objects.filter(deployment=deployment).select_related("api_key")
    by_day = deployment_usage_by_day(deployment=deployment)
    by_key = list(
        usage.values("api_key__name", "api_key__prefix")
        .annotate(calls=Sum("calls"), errors=Sum("errors"))
        .order_by("-calls")[:20]
    )
    context = {
        "access": access,
        "deployment": deployment,
        # The status partial polls every 2 s and shows none of it.
        "collection": None
        if request.htmx
        else collection_panel(access=access, deployment=deployment),
        "url": endpoint_url(request, deployment),
        "stats": supervisor.stats(deployment) if running else None,
        "log": deployment.log
        if deployment.placement == Placement.SKYSERVE
        else supervisor.log_tail(deployment)[-6000:] or deployment.log,
        "by_day": by_day,
        "by_key": by_key,
        "can_write": access.can(Perm.WRITE),
        "swap_models": TrainedModel.objects.for_workspace(access.workspace)
        .filter(task=deployment.model.task)
        .exclude(pk=deployment.model_id),
        "replica_minutes": deployment.replica_seconds / 60,
        "owed": credits_format_rounded(owed(deployment)) if owed(deployment) else "",
        "settled": deployment.state
        in (DeploymentState.RUNNING, DeploymentState.STOPPED, DeploymentState.FAILED),
    }
    if request.htmx:
        return render(request, "deploy/deployment_detail.html#status", context)
    return render(request, "deploy/deployment_detail.html", context)


def _act(request, access, pk: int, action) -> HttpResponse:
    deployment = _deployment(access, pk)
    try:
        message = action(deployment)
    except ServiceError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, message)
    return redirect("deployment_detail", ws_slug=access.workspace.slug, pk=deployment.pk)


@workspace_view(Perm.WRITE)
@require_POST
def deployment_start(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    def start(d):
        services.deployment_set_running(access=access, deployment=d, running=True)
        return f"Starting {d.name}."

    return _act(request, access, pk, start)


@workspace_view(Perm.WRITE)
@require_POST
def deployment_stop(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    def stop(d):
        services.deployment_set_running(access=access, deployment=d, running=False)
        return f"Stopping {d.name}: calls to it now get 503."

    return _act(request, access, pk, stop)


@workspace_view(Perm.WRITE)
@require_POST
def deployment_swap(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    def swap(d):
        model = (
            TrainedModel.objects.for_workspace(access.workspace)
            .filter(pk=request.POST.get("model") or 0)
            .first()
        )
        if model is None:
            raise ServiceError("Choose a model of this workspace.")
        services.deployment_swap(access=access, deployment=d, model=model)
        return f"{d.name} now serves {model.name}, at the same URL."

    return _act(request, access, pk, swap)


@workspace_view(Perm.WRITE)
@require_POST
def deployment_delete(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    deployment = _deployment(access, pk)
    try:
        services.deployment_delete(access=access, deployment=deployment)
    except ServiceError as exc:
        messages.error(request, str(exc))
        return redirect("deployment_detail", ws_slug=access.workspace.slug, pk=deployment.pk)
    messages.success(request, f"{deployment.name} was deleted.")
    return redirect(reverse("deployment_list", args=[access.workspace.slug]))
