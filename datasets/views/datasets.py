from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from core.errors import ServiceError
from core.http import page_of
from datasets import selectors
from datasets.forms import DatasetCreateForm, DatasetEditForm
from datasets.selectors import counts
from datasets.selectors.labelling import labelling_progress
from datasets.services import datasets as services
from datasets.services.semantic_convert import semantic_dataset_from_segment
from workspaces.decorators import workspace_view
from workspaces.forms import ConfirmForm
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess


@workspace_view(Perm.READ)
def dataset_list(request, access: WorkspaceAccess) -> HttpResponse:
    page = page_of(request, selectors.dataset_list(workspace=access.workspace))
    return render(request, "datasets/dataset_list.html", {"access": access, "page": page})


@workspace_view(Perm.WRITE)
@require_http_methods(["GET", "POST"])
def dataset_create(request, access: WorkspaceAccess) -> HttpResponse:
    form = DatasetCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            dataset = services.dataset_create(
                access=access,
                name=form.cleaned_data["name"],
                task=form.cleaned_data["task"],
                class_names=services.class_names_parse(form.cleaned_data["classes"]),
                description=form.cleaned_data["description"],
                depth_scale=form.cleaned_data["depth_scale"],
            )
        except ServiceError as e:
            form.add_error(None, str(e))
        else:
            messages.success(request, f"Created the dataset {dataset.name}. Now add images.")
            return redirect("dataset_detail", ws_slug=access.workspace.slug, pk=dataset.pk)
    return render(request, "datasets/dataset_form.html", {"access": access, "form": form})


@workspace_view(Perm.READ)
def dataset_detail(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    return render(
        request,
        "datasets/dataset_detail.html",
        {
            "access": access,
            "dataset": dataset,
            # Exact up to a thousand, estimated past it (a million images took 0.6 s to count).
            "classes": counts.class_label_counts(dataset=dataset),
            "splits": counts.split_counts(dataset=dataset),
            "image_total": counts.dataset_image_count(dataset=dataset),
            "imports": selectors.import_list(dataset=dataset)[:5],
            "progress": labelling_progress(dataset=dataset),
        },
    )


@workspace_view(Perm.WRITE)
@require_http_methods(["GET", "POST"])
def dataset_edit(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    form = DatasetEditForm(request.POST or None, instance=dataset)
    if request.method == "POST" and form.is_valid():
        try:
            services.dataset_update(
                access=access,
                dataset=selectors.dataset_get(workspace=access.workspace, pk=pk),
                name=form.cleaned_data["name"],
                description=form.cleaned_data["description"],
                is_public=form.cleaned_data["is_public"],
                depth_scale=form.cleaned_data.get("depth_scale"),
            )
        except ServiceError as e:
            form.add_error("name", str(e))
        else:
            messages.success(request, "Dataset saved.")
            return redirect("dataset_detail", ws_slug=access.workspace.slug, pk=pk)
    return render(
        request, "datasets/dataset_edit.html", {"access": access, "form": form, "dataset": dataset}
    )


@workspace_view(Perm.WRITE)
@require_http_methods(["GET", "POST"])
def dataset_delete(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    form = ConfirmForm(request.POST or None)
    if request.method == "POST":
        try:
            services.dataset_delete(
                access=access, dataset=dataset, confirm_name=form.data.get("confirm", "")
            )
        except ServiceError as e:
            form.add_error("confirm", str(e))
        else:
            messages.success(request, f"Deleted the dataset {dataset.name}.")
            return redirect("dataset_list", ws_slug=access.workspace.slug)
    return render(
        request,
        "datasets/dataset_delete.html",
        {"access": access, "dataset": dataset, "form": form},
    )


@workspace_view(Perm.WRITE)
@require_POST
def dataset_semantic_convert(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """A segment dataset → a new semantic dataset of the same images; a worker draws the masks
    from the polygons."""
    source = selectors.dataset_get(workspace=access.workspace, pk=pk)
    try:
        target = semantic_dataset_from_segment(access=access, source=source)
    except ServiceError as e:
        messages.error(request, str(e))
        return redirect("dataset_detail", ws_slug=access.workspace.slug, pk=source.pk)
    messages.success(
        request,
        f"Created {target.name}: its masks are being drawn from {source.name}'s polygons "
        "(each image shows its mask once drawn).",
    )
    return redirect("dataset_detail", ws_slug=access.workspace.slug, pk=target.pk)
