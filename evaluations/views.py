"""Evaluation pages: starting one from a model (picking the version and pairing the classes),
an evaluation's figures and worst images, the workspace's list, and the comparison of every
model evaluated on one version."""

from urllib.parse import urlencode

from django.contrib import messages
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from core.errors import ServiceError
from core.http import HtmxHttpRequest, page_of
from datasets.models import PIXEL_TASKS, DatasetClass, DatasetVersion, Split, Task
from evaluations import selectors
from evaluations.models import Evaluation
from evaluations.services.submit import (
    IGNORE,
    IMGSZ_MAX,
    IMGSZ_MIN,
    class_guess,
    class_pairing_needed,
    evaluation_refusal,
    evaluation_submit,
    version_class_names,
    version_split_images,
)
from training import selectors as training_selectors
from training.models import TrainedModel
from training.views.job_page import confusion_shaded, metric_groups
from workspaces import selectors as workspace_selectors
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

CURVE_WIDTH, CURVE_HEIGHT = 320, 240


def _version_asked(access: WorkspaceAccess, value: str) -> DatasetVersion | None:
    """The version an id names, of this workspace: another's, or none, is not found (404)."""
    if not value:
        return None
    if not value.isdigit():
        raise Http404("No such dataset version.")
    return training_selectors.trainable_version_get(workspace=access.workspace, pk=int(value))


def _setup(model: TrainedModel, version: DatasetVersion | None, data) -> dict:
    """The form's second step for `version`: why it is refused, or its splits and the pairing
    of the model's classes with its classes (what was posted, else the guess by name)."""
    if version is None:
        return {}
    refusal = evaluation_refusal(model=model, version=version)
    if refusal:
        return {"refusal": refusal}
    splits = version_split_images(version)
    split = data.get("split") or next((s for s in ("val", "test", "train") if s in splits), "")
    split_choices = [{"value": s, "images": n} for s, n in splits.items()]
    if not class_pairing_needed(model):
        return {"pairing": False, "splits": split_choices, "split": split}
    version_names = version_class_names(version)
    guess = class_guess([str(n) for n in model.class_names], version_names)
    rows = []
    for i, (name, guessed) in enumerate(zip(model.class_names, guess, strict=True)):
        picked = data.get(f"class_{i}") if f"class_{i}" in data else (guessed or "")
        rows.append({"index": i, "name": name, "picked": picked, "guessed": guessed})
    return {
        "pairing": True,
        "pairs": rows,
        "all_by_name": all(r["guessed"] == r["name"] for r in rows),
        "unmatched": sum(1 for r in rows if not r["guessed"]),
        "version_names": version_names,
        "splits": split_choices,
        "split": split,
        "ignore": IGNORE,
    }


@workspace_view(Perm.TRAIN)
@require_http_methods(["GET", "POST"])
def model_evaluate(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """Pick a version of the workspace (of the model's task), pair the classes, start."""
    model = training_selectors.model_get(workspace=access.workspace, pk=pk)
    versions = list(
        training_selectors.trainable_versions(workspace=access.workspace).filter(
            dataset__task=model.task
        )
    )
    data = request.POST if request.method == "POST" else request.GET
    version = _version_asked(access, data.get("version", ""))
    if version is None and request.method == "GET" and versions:
        version = versions[0]
    error = ""
    if request.method == "POST":
        chosen = [request.POST.get(f"class_{i}", "") for i in range(len(model.class_names))]
        if request.POST.get("ignore_rest"):
            chosen = [choice or IGNORE for choice in chosen]
        imgsz = request.POST.get("imgsz", "")
        try:
            if version is None:
                raise ServiceError("Pick a dataset version to evaluate on.")
            if imgsz and not imgsz.isdigit():
                raise ServiceError("The image size is a whole number of pixels.")
            evaluation = evaluation_submit(
                access=access,
                model=model,
                version=version,
                split=request.POST.get("split", "") or Split.VAL,
                class_map=chosen if model.class_names else None,
                imgsz=int(imgsz) if imgsz else None,
            )
        except ServiceError as e:
            error = str(e)
        else:
            messages.success(request, f"Evaluation queued: {model.name} on {version}.")
            return redirect("evaluation_detail", ws_slug=access.workspace.slug, pk=evaluation.pk)
    context = {
        "access": access,
        "model": model,
        "versions": versions,
        "version": version,
        "error": error,
        "imgsz": data.get("imgsz") or model.imgsz,
        "imgsz_min": IMGSZ_MIN,
        "imgsz_max": IMGSZ_MAX,
        **_setup(model, version, data),
    }
    template = "evaluations/evaluate.html"
    if request.htmx and request.htmx.target == "evaluate-setup":
        template += "#setup"
    return render(request, template, context, status=400 if error else 200)


def _headline(evaluation: Evaluation) -> dict | None:
    """The task's main figure: top-1 for classify, mIoU for semantic, δ1 for depth (each
    listed first by metric_groups); mAP50-95 otherwise, of masks for segment and keypoints for
    pose (metric_groups lists box figures first, the task's own last)."""
    quality = metric_groups(evaluation.metrics)["quality"]
    if not quality:
        return None
    first = evaluation.task == Task.CLASSIFY or evaluation.task in PIXEL_TASKS
    return quality[0] if first else quality[-1]


@workspace_view(Perm.READ)
@require_GET
def evaluation_list(request: HtmxHttpRequest, access: WorkspaceAccess) -> HttpResponse:
    project = None
    asked = request.GET.get("project", "")
    if asked:
        if not asked.isdigit():
            raise Http404("No such project.")
        project = workspace_selectors.project_get(workspace=access.workspace, pk=int(asked))
    page = page_of(request, selectors.evaluation_list(workspace=access.workspace, project=project))
    for evaluation in page:
        evaluation.headline = _headline(evaluation)
    return render(
        request,
        "evaluations/evaluation_list.html",
        {
            "access": access,
            "project": project,
            "page": page,
            "versions": selectors.versions_evaluated(workspace=access.workspace),
        },
    )


def _curve_svg(curve: dict) -> dict:
    """Polyline points of a precision-recall curve in a CURVE_WIDTH × CURVE_HEIGHT box."""

    def points(values: list) -> str:
        return " ".join(
            f"{r * CURVE_WIDTH:.1f},{(1 - p) * CURVE_HEIGHT:.1f}"
            for r, p in zip(curve.get("recall") or [], values, strict=False)
            if isinstance(r, int | float) and isinstance(p, int | float)
        )

    return {
        "name": curve.get("name", ""),
        "mean": points(curve.get("mean") or []),
        "classes": [
            {"name": name, "points": points(values)}
            for name, values in (curve.get("classes") or {}).items()
        ],
        "width": CURVE_WIDTH,
        "height": CURVE_HEIGHT,
    }


# Semantic segmentation's per-class figures (evaluations.val_pixels.pixel_per_class).
SEMANTIC_CLASS_FIGURES = [
    {"key": "iou", "label": "IoU", "what": ""},
    {"key": "pixel_acc", "label": "Pixel accuracy", "what": ""},
]


def _per_class(rows: list, link) -> dict | None:
    """The per-class figures as a table: images, objects (or pixels), then val's figures for
    the class in the order and with the names of the summary (box, then mask or pose; IoU and
    pixel accuracy for semantic segmentation)."""
    rows = [r for r in rows if isinstance(r, dict) and isinstance(r.get("values"), dict)]
    if not rows:
        return None
    counts = [c for c in ("images", "instances", "pixels") if c in rows[0]]
    if "iou" in rows[0]["values"]:
        figures = SEMANTIC_CLASS_FIGURES
    else:
        figures = metric_groups(rows[0]["values"])["quality"]
    columns = [c.capitalize() for c in counts] + [
        f"{m['label']} ({m['what']})" if m["what"] else m["label"] for m in figures
    ]
    table = []
    for row in rows:
        cells = [str(row.get(c, "")) for c in counts]
        for figure in figures:
            value = row["values"].get(figure["key"])
            cells.append(f"{value:.3f}" if isinstance(value, int | float) else "—")
        name = str(row.get("class", ""))
        table.append({"name": name, "url": link(name), "cells": cells})
    return {"columns": columns, "rows": table}


def _confusion_shown(evaluation: Evaluation) -> tuple[dict, int]:
    """The confusion matrix without the classes that have neither a label nor a prediction
    (a model of 80 classes on a dataset of a few), and how many were left out."""
    names = evaluation.confusion.get("names") or []
    matrix = evaluation.confusion.get("matrix") or []
    if not names or len(matrix) != len(names):
        return evaluation.confusion, 0
    # Detection-like matrices end with "background"; classify's and semantic's have none.
    background = len(names) - 1 if evaluation.task not in (Task.CLASSIFY, Task.SEMANTIC) else None
    kept = [
        i
        for i in range(len(names))
        if i == background or any(matrix[i]) or any(row[i] for row in matrix)
    ]
    shown = {
        "names": [names[i] for i in kept],
        "matrix": [[matrix[i][j] for j in kept] for i in kept],
    }
    return shown, len(names) - len(kept)


def _detail_context(access: WorkspaceAccess, evaluation: Evaluation) -> dict:
    dataset = evaluation.dataset_version.dataset
    slug = access.workspace.slug
    class_ids = dict(DatasetClass.objects.filter(dataset=dataset).values_list("name", "pk"))
    gallery = reverse("dataset_gallery", kwargs={"ws_slug": slug, "pk": dataset.pk})
    paired = {row["model"]: row.get("version") for row in evaluation.class_map}

    def link(name: str) -> str | None:
        pk = class_ids.get(paired.get(name) or "")
        return f"{gallery}?{urlencode({'class': pk})}" if pk else None

    # The worst images open in the gallery filtered to them (datasets' ?evaluation=), so
    # its previous and next go through these images only.
    only_worst = "?" + urlencode({"evaluation": evaluation.pk})
    worst = []
    for row in evaluation.worst_images:
        image_id = row.get("image_id")
        kwargs = {"ws_slug": slug, "pk": dataset.pk, "image_pk": image_id}
        worst.append(
            {
                **row,
                "thumb": reverse("dataset_image_thumb", kwargs=kwargs) if image_id else None,
                "detail": (
                    reverse("dataset_image_detail", kwargs=kwargs) + only_worst
                    if image_id
                    else None
                ),
            }
        )
    targets = {row.get("version") for row in evaluation.class_map}
    left_out = []
    if evaluation.class_map:  # none for depth: its maps hold metres, not classes
        left_out = [n for n in version_class_names(evaluation.dataset_version) if n not in targets]
    confusion, confusion_hidden = _confusion_shown(evaluation)
    return {
        "access": access,
        "evaluation": evaluation,
        "version": evaluation.dataset_version,
        "quality": metric_groups(evaluation.metrics)["quality"],
        "per_class": _per_class(evaluation.per_class, link),
        "confusion": confusion_shaded(confusion, link),
        "confusion_hidden": confusion_hidden,
        "curves": [_curve_svg(c) for c in evaluation.curves],
        "pixel_task": evaluation.task in PIXEL_TASKS,
        "worst": worst,
        "worst_gallery": gallery + only_worst
        if any(row.get("image_id") for row in evaluation.worst_images)
        else None,
        "renamed": [r for r in evaluation.class_map if r.get("version") not in (None, r["model"])],
        "ignored": evaluation.ignored_classes,
        "left_out": left_out,
        "compare_url": reverse("evaluation_compare", kwargs={"ws_slug": slug})
        + "?"
        + urlencode({"version": evaluation.dataset_version_id, "split": evaluation.split}),
    }


@workspace_view(Perm.READ)
@require_GET
def evaluation_detail(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    evaluation = selectors.evaluation_get(workspace=access.workspace, pk=pk)
    if request.htmx and request.htmx.target == "evaluation-status":
        response = render(
            request,
            "evaluations/evaluation_detail.html#status",
            {"access": access, "evaluation": evaluation},
        )
        if evaluation.is_final:
            response["HX-Refresh"] = "true"  # the figures are the rest of the page
        return response
    return render(
        request, "evaluations/evaluation_detail.html", _detail_context(access, evaluation)
    )


@workspace_view(Perm.READ)
@require_GET
def evaluation_compare(request: HtmxHttpRequest, access: WorkspaceAccess) -> HttpResponse:
    """Every model evaluated on one version (and split), side by side."""
    versions = list(selectors.versions_evaluated(workspace=access.workspace))
    version = _version_asked(access, request.GET.get("version", ""))
    if version is None and versions:
        version = versions[0]
    splits, split, comparison = [], "", None
    if version is not None:
        splits = selectors.version_splits_evaluated(workspace=access.workspace, version=version)
        asked = request.GET.get("split", "")
        split = asked if asked in splits else ("val" if "val" in splits else next(iter(splits), ""))
        if split:
            comparison = selectors.version_comparison(
                workspace=access.workspace, version=version, split=split
            )
    return render(
        request,
        "evaluations/compare.html",
        {
            "access": access,
            "versions": versions,
            "version": version,
            "splits": splits,
            "split": split,
            "comparison": comparison,
        },
    )
