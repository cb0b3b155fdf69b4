"""Pages of the labelling workflow: the editor, a dataset's labelling page (progress by status
and person, the review queue, least-confident-first, pre-labelling runs)."""

from django import forms
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST, require_safe

from annotation import selectors, services
from core.errors import ServiceError
from datasets import selectors as dataset_selectors
from datasets.models import Image, LabelStatus
from datasets.selectors.labelling import labelling_progress
from training.models import TrainedModel
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess


class PrelabelForm(forms.Form):
    model = forms.ModelChoiceField(queryset=TrainedModel.objects.none(), empty_label=None)
    conf = forms.FloatField(
        min_value=0.01, max_value=0.99, initial=0.25, label="Confidence at least"
    )
    only_unlabelled = forms.BooleanField(
        required=False, initial=True, label="Only unlabelled images"
    )

    def __init__(self, *args, access: WorkspaceAccess, dataset, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["model"].queryset = TrainedModel.objects.for_workspace(access.workspace).filter(
            task=dataset.task
        )


@workspace_view(Perm.READ)
@require_safe
def image_annotate(request, access: WorkspaceAccess, pk: int, image_pk: int) -> HttpResponse:
    dataset = dataset_selectors.dataset_get(workspace=access.workspace, pk=pk)
    image = dataset_selectors.image_get(dataset=dataset, pk=image_pk)
    data = selectors.editor_data(request=request, access=access, dataset=dataset, image=image)
    context = {"access": access, "dataset": dataset, "image": image, "editor_data": data}
    # Where a deployment's collection rule took it from (deploy.CollectedImage, by its reverse
    # name: annotation does not import deploy); None for an image uploaded as usual.
    context["collected"] = getattr(image, "collected", None)
    return render(request, "annotation/editor.html", context)


def _labelling_url(access: WorkspaceAccess, dataset) -> str:
    return reverse("dataset_labelling", args=[access.workspace.slug, dataset.pk])


@workspace_view(Perm.READ)
@require_safe
def dataset_labelling(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    dataset = dataset_selectors.dataset_get(workspace=access.workspace, pk=pk)
    runs = list(selectors.prelabel_runs(dataset=dataset))
    context = {
        "access": access,
        "dataset": dataset,
        "progress": labelling_progress(dataset=dataset),
        "runs": runs,
        "running": any(not r.is_final for r in runs),
        "form": PrelabelForm(access=access, dataset=dataset),
        "can_write": access.can(Perm.WRITE),
        "can_review": access.can(Perm.REVIEW),
        "uncertain": Image.objects.filter(
            dataset=dataset, status=LabelStatus.UNLABELLED, uncertainty__isnull=False
        ).count(),
    }
    if request.htmx:
        return render(request, "annotation/labelling.html#runs", context)
    return render(request, "annotation/labelling.html", context)


@workspace_view(Perm.WRITE)
@require_POST
def prelabel_start(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    dataset = dataset_selectors.dataset_get(workspace=access.workspace, pk=pk)
    form = PrelabelForm(request.POST, access=access, dataset=dataset)
    if not form.is_valid():
        for errors in form.errors.values():
            messages.error(request, " ".join(errors))
        return redirect(_labelling_url(access, dataset))
    try:
        run = services.prelabel_start(
            access=access,
            dataset=dataset,
            model_id=form.cleaned_data["model"].pk,
            only_unlabelled=form.cleaned_data["only_unlabelled"],
            conf=form.cleaned_data["conf"],
        )
    except ServiceError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(
            request,
            f"Pre-labelling {run.total} image{'s' if run.total != 1 else ''} with "
            f"“{run.model.name}”; suggestions appear in the editor as they are made.",
        )
    return redirect(_labelling_url(access, dataset))


def _queue_start(access, dataset, queryset, queue: str, empty: str, request) -> HttpResponse:
    first = queryset.values_list("pk", flat=True).first()
    if first is None:
        messages.info(request, empty)
        return redirect(_labelling_url(access, dataset))
    url = reverse("image_annotate", args=[access.workspace.slug, dataset.pk, first])
    return redirect(f"{url}?queue={queue}")


@workspace_view(Perm.READ)
@require_safe
def review_queue(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """The first image waiting for review, opened in the editor in review-queue mode."""
    dataset = dataset_selectors.dataset_get(workspace=access.workspace, pk=pk)
    waiting = Image.objects.filter(dataset=dataset, status=LabelStatus.IN_REVIEW).order_by("pk")
    return _queue_start(
        access, dataset, waiting, "review", "Nothing is waiting for review.", request
    )


@workspace_view(Perm.READ)
@require_safe
def uncertain_queue(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """Unlabelled images, the model's least confident first (after a pre-labelling run)."""
    dataset = dataset_selectors.dataset_get(workspace=access.workspace, pk=pk)
    unlabelled = Image.objects.filter(dataset=dataset, status=LabelStatus.UNLABELLED).order_by(
        "-uncertainty", "pk"
    )
    return _queue_start(
        access, dataset, unlabelled, "uncertain", "Every image is labelled.", request
    )
