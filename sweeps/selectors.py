"""Reads of sweeps, always within one workspace (a stranger's id is not found)."""

from django.db.models import Count, Q, QuerySet
from django.http import Http404

from sweeps.models import Sweep, SweepTrial, TrialState
from workspaces.models import Project, Workspace


def sweep_list(*, workspace: Workspace, project: Project | None = None) -> QuerySet[Sweep]:
    rows = (
        Sweep.objects.for_workspace(workspace)
        .select_related("project", "dataset_version__dataset", "gpu_type", "created_by")
        .annotate(
            trials_started=Count("trials"),
            trials_done=Count("trials", filter=Q(trials__state=TrialState.COMPLETE)),
        )
        .order_by("-created_at", "-id")
    )
    return rows.filter(project=project) if project is not None else rows


def sweep_get(*, workspace: Workspace, pk: int) -> Sweep:
    sweep = (
        Sweep.objects.for_workspace(workspace)
        .select_related(
            "project", "dataset_version__dataset", "gpu_type", "created_by", "base_model"
        )
        .filter(pk=pk)
        .first()
    )
    if sweep is None:
        raise Http404("No such sweep.")
    return sweep


def sweep_trials(*, sweep: Sweep) -> list[SweepTrial]:
    return list(
        SweepTrial.objects.filter(sweep=sweep)
        .select_related("job__gpu_type", "job__model")
        .order_by("number")
    )
