"""Reads of evaluations, always within one workspace (a stranger's id is not found)."""

from django.db.models import Count, QuerySet
from django.http import Http404

from datasets.models import DatasetVersion, Split
from evaluations.models import Evaluation, EvaluationState
from training.views.job_page import metric_groups
from workspaces.models import Project, Workspace

# Depth's errors (Ultralytics' DepthMetrics): the best model has the lowest.
LOWER_IS_BETTER = {"metrics/abs_rel", "metrics/rmse", "metrics/silog"}


def evaluation_list(*, workspace: Workspace, project: Project | None = None) -> QuerySet:
    rows = Evaluation.objects.for_workspace(workspace).select_related(
        "model", "project", "dataset_version__dataset", "created_by"
    )
    return rows.filter(project=project) if project is not None else rows


def evaluation_get(*, workspace: Workspace, pk: int) -> Evaluation:
    evaluation = evaluation_list(workspace=workspace).filter(pk=pk).first()
    if evaluation is None:
        raise Http404("No such evaluation.")
    return evaluation


def model_evaluations(*, model) -> QuerySet:
    """A model's evaluations, newest first (the card on its page)."""
    return (
        Evaluation.objects.for_workspace(model.workspace_id)
        .filter(model=model)
        .select_related("dataset_version__dataset")
    )


def versions_evaluated(*, workspace: Workspace) -> QuerySet[DatasetVersion]:
    """Versions with at least one finished evaluation, with how many: what can be compared."""
    return (
        DatasetVersion.objects.filter(
            dataset__workspace=workspace, evaluations__state=EvaluationState.SUCCEEDED
        )
        .select_related("dataset")
        .annotate(evaluated=Count("evaluations"))
        .order_by("dataset__name", "-number")
    )


def version_splits_evaluated(*, workspace: Workspace, version: DatasetVersion) -> list[str]:
    found = set(
        Evaluation.objects.for_workspace(workspace)
        .filter(dataset_version=version, state=EvaluationState.SUCCEEDED)
        .values_list("split", flat=True)
    )
    return [split for split in Split.values if split in found]


def version_comparison(*, workspace: Workspace, version: DatasetVersion, split: str) -> dict:
    """Every model evaluated on `split` of `version`: the latest finished evaluation of each,
    as rows with the same metric columns, the best of each column marked."""
    latest: dict[int, Evaluation] = {}
    rows = (
        evaluation_list(workspace=workspace)
        .filter(dataset_version=version, split=split, state=EvaluationState.SUCCEEDED)
        .order_by("-finished_at", "-id")
    )
    for evaluation in rows:
        latest.setdefault(evaluation.model_id, evaluation)
    evaluations = sorted(latest.values(), key=lambda e: (e.model.name.lower(), e.pk))
    columns: list[dict] = []
    for evaluation in evaluations:
        for metric in metric_groups(evaluation.metrics)["quality"]:
            if metric["key"] not in {c["key"] for c in columns}:
                columns.append(
                    {"key": metric["key"], "label": metric["label"], "what": metric["what"]}
                )
    best = {}
    for column in columns:
        values = [
            e.metrics.get(column["key"])
            for e in evaluations
            if isinstance(e.metrics.get(column["key"]), int | float)
        ]
        # A column where every model scores the same has no best.
        pick = min if column["key"] in LOWER_IS_BETTER else max
        best[column["key"]] = pick(values) if len(set(values)) > 1 else None
    table = []
    for evaluation in evaluations:
        cells = []
        for column in columns:
            value = evaluation.metrics.get(column["key"])
            number = value if isinstance(value, int | float) else None
            cells.append(
                {
                    "value": number,
                    "best": number is not None and number == best[column["key"]],
                }
            )
        table.append({"evaluation": evaluation, "cells": cells})
    return {"columns": columns, "rows": table}
