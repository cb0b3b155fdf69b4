"""The dataset health report, its statistics, and the workspace's policy on unhealthy datasets."""

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRefresh

from core.http import HtmxHttpRequest
from datasets import selectors
from datasets.models import HealthRunState, Severity
from datasets.services import health as health_services
from datasets.services import health_runs
from datasets.services import stats as stats_services
from datasets.services.thumbnails import thumbnails_request
from datasets.services.version_checks import version_check
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

SEVERITY_SECTIONS = [
    (Severity.ERROR, "Errors", "Training on the dataset as it is will go wrong."),
    (Severity.WARNING, "Warnings", "Worth a look before training."),
    (Severity.INFO, "Notes", "For your information."),
]


@workspace_view(Perm.READ)
@require_GET
def dataset_health(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    latest = health_runs.health_run_latest(dataset=dataset)
    status = health_runs.health_status(latest)
    if request.htmx and request.GET.get("part") == "status":
        if status is None:  # the check finished: show its findings
            return HttpResponseClientRefresh()
        return render(
            request,
            "datasets/health.html#status",
            {"access": access, "dataset": dataset, "status": status},
        )
    findings, no_thumbnail = health_services.health_findings_with_previews(dataset=dataset)
    thumbnails_request(blob_ids=no_thumbnail)
    # A version's data checks, as the training form shows them (?version=<number>; the newest).
    versions = list(dataset.versions.order_by("-number").only("pk", "number", "dataset_id"))
    asked = request.GET.get("version", "")
    version = next((v for v in versions if str(v.number) == asked), None) or (
        versions[0] if versions else None
    )
    if version is not None:
        version.dataset = dataset
    sections = [
        {
            "severity": severity,
            "title": title,
            "blurb": blurb,
            "findings": [f for f in findings if f.severity == severity],
        }
        for severity, title, blurb in SEVERITY_SECTIONS
    ]
    return render(
        request,
        "datasets/health.html",
        {
            "access": access,
            "dataset": dataset,
            "status": status,
            "failed_run": latest if latest and latest.state == HealthRunState.FAILED else None,
            "sections": sections,
            "finding_total": len(findings),
            "versions": versions,
            "version_check": version_check(version) if version is not None else None,
        },
    )


@workspace_view(Perm.WRITE)
@require_POST
def dataset_health_run(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    if health_runs.health_run_request(access=access, dataset=dataset):
        messages.success(request, "Health check queued. This page updates when it is done.")
    else:
        messages.info(request, "A health check of this dataset is already queued or running.")
    return redirect("dataset_health", ws_slug=access.workspace.slug, pk=dataset.pk)


@workspace_view(Perm.READ)
@require_GET
def dataset_stats(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    stats = stats_services.dataset_stats(dataset=dataset)
    return render(
        request,
        "datasets/stats.html",
        {
            "access": access,
            "dataset": dataset,
            "stats": stats,
            "chart_data": stats_services.stats_chart_data(stats),
        },
    )


@workspace_view(Perm.MANAGE_WORKSPACE)
@require_POST
def workspace_dataset_health_policy(request, access: WorkspaceAccess) -> HttpResponse:
    block = request.POST.get("block_training") == "on"
    health_services.workspace_health_policy_set(access=access, block_training=block)
    if block:
        messages.success(
            request, "Training on datasets whose health check found errors is blocked."
        )
    else:
        messages.success(request, "Training is allowed whatever the dataset health check found.")
    return redirect("workspace_settings", ws_slug=access.workspace.slug)
