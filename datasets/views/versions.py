"""Versions, exports, the public catalog (Explore) and cloning."""

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, F, Q, Window
from django.db.models.functions import RowNumber
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.urls import NoReverseMatch, reverse
from django.views.decorators.http import require_http_methods, require_POST

from core.errors import ServiceError
from core.files import generated_file_response
from core.http import HtmxHttpRequest
from core.pages import page_parts
from datasets import selectors
from datasets.models import PIXEL_TASKS, Dataset, DatasetVersion, Image, Task
from datasets.selectors import counts
from datasets.selectors.gallery import dataset_classes
from datasets.services import versions as services
from datasets.services.clone import clone_targets_for_user, dataset_clone
from datasets.services.export import FORMATS, export_filename, export_formats, export_run
from datasets.services.import_report import classes_without_labels_line
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess, workspace_access_for_user, workspace_labels

EXPLORE_PAGE_SIZE = 24
EXPLORE_THUMBS = 4
PUBLIC_THUMBS = 24
DIFF_SHOWN = 200  # image rows listed per change kind on a version page


class VersionForm(forms.Form):
    note = forms.CharField(
        max_length=200,
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "What changed (optional)"}),
    )


class CloneForm(forms.Form):
    # A plain field with a select widget: a workspace outside the list is answered by the
    # workspace's own rules (404 for a stranger, 403 without the editor role), not a form error.
    workspace = forms.CharField(label="Into workspace", widget=forms.Select)
    name = forms.CharField(
        max_length=100, required=False, help_text="Leave empty to keep the name (or add “copy”)."
    )

    def __init__(self, *args, targets, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["workspace"].widget.choices = [
            (w.slug, label) for w, label in workspace_labels(targets)
        ]


def _thumb_url(dataset_pk: int, image_pk: int) -> str | None:
    try:
        return reverse("public_image_thumb", kwargs={"pk": dataset_pk, "image_pk": image_pk})
    except NoReverseMatch:  # image serving is another area's; without it, no thumbnails
        return None


def _thumbs_by_dataset(dataset_ids: list[int], per_dataset: int) -> dict[int, list[str]]:
    """The first few thumbnails of each dataset, in one query for all of them."""
    if not dataset_ids or _thumb_url(0, 0) is None:
        return {}
    rows = (
        Image.objects.filter(dataset_id__in=dataset_ids)
        .annotate(rank=Window(RowNumber(), partition_by=[F("dataset_id")], order_by=F("id").asc()))
        .filter(rank__lte=per_dataset)
        .order_by("dataset_id", "id")
        .values_list("dataset_id", "id")
    )
    thumbs: dict[int, list[str]] = {}
    for dataset_id, image_id in rows:
        thumbs.setdefault(dataset_id, []).append(_thumb_url(dataset_id, image_id))
    return thumbs


# --- versions -----------------------------------------------------------------------------------


@workspace_view(Perm.READ)
def version_list(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    page = Paginator(services.version_list(dataset=dataset), 25).get_page(request.GET.get("page"))
    return render(
        request,
        "datasets/version_list.html",
        {
            "access": access,
            "dataset": dataset,
            "page": page,
            "form": VersionForm(),
            "formats": export_formats(task=dataset.task),
        },
    )


@workspace_view(Perm.WRITE)
@require_POST
def version_create(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    form = VersionForm(request.POST)
    if not form.is_valid():
        messages.error(request, "The note is at most 200 characters; nothing was saved.")
        return redirect("version_list", ws_slug=access.workspace.slug, pk=dataset.pk)
    try:
        version = services.version_create(
            access=access, dataset=dataset, note=form.cleaned_data["note"]
        )
    except ServiceError as e:
        messages.error(request, str(e))
        return redirect("version_list", ws_slug=access.workspace.slug, pk=dataset.pk)
    messages.success(request, f"Saved version {version.number} of {dataset.name}.")
    return redirect(
        "version_detail", ws_slug=access.workspace.slug, pk=dataset.pk, number=version.number
    )


@workspace_view(Perm.READ)
def version_detail(
    request: HtmxHttpRequest, access: WorkspaceAccess, pk: int, number: int
) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    version = selectors.version_get(dataset=dataset, number=number)
    previous = services.version_previous(version=version)
    diff, more = None, {}
    if previous is not None:
        diff = services.manifest_diff(
            before=services.version_manifest_load(previous),
            after=services.version_manifest_load(version),
        )
        more = {
            kind: max(0, len(getattr(diff, kind)) - DIFF_SHOWN)
            for kind in ("added", "removed", "split_changed")
        }
    # The classes with labels as a table; those without as one line, as the import page says it.
    # In the classes' order: PostgreSQL's jsonb keeps the summary's keys in an order of its own.
    index = {c.name: i for i, c in enumerate(dataset_classes(dataset=dataset).values())}
    per_class = sorted(
        (version.summary.get("labels_per_class") or {}).items(),
        key=lambda item: (index.get(item[0], len(index)), item[0]),
    )
    empty = [name for name, n in per_class if not n]
    return render(
        request,
        "datasets/version_detail.html",
        {
            "access": access,
            "dataset": dataset,
            "version": version,
            "previous": previous,
            "diff": diff,
            "shown": f":{DIFF_SHOWN}",
            "more": more,
            "formats": export_formats(task=dataset.task),
            "pixel_task": dataset.task in PIXEL_TASKS,
            "map_word": "depth map" if dataset.task == Task.DEPTH else "mask",
            "labelled_classes": [(name, n) for name, n in per_class if n],
            "classes_without_labels": classes_without_labels_line(empty, len(empty)),
        },
    )


# --- export -------------------------------------------------------------------------------------


def _download(request, access, dataset: Dataset, fmt: str, version: DatasetVersion | None):
    if fmt not in FORMATS:
        raise Http404("No such export format.")
    try:
        archive = export_run(fmt=fmt, dataset=None if version else dataset, version=version)
    except ServiceError as e:
        messages.error(request, str(e))
        if version is not None:
            return redirect(
                "version_detail",
                ws_slug=access.workspace.slug,
                pk=dataset.pk,
                number=version.number,
            )
        return redirect("dataset_detail", ws_slug=access.workspace.slug, pk=dataset.pk)
    return generated_file_response(
        archive,
        filename=export_filename(dataset=dataset, fmt=fmt, version=version),
        content_type="application/zip",
    )


@workspace_view(Perm.READ)
def dataset_export(request, access: WorkspaceAccess, pk: int, fmt: str) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    return _download(request, access, dataset, fmt, None)


@workspace_view(Perm.READ)
def version_export(
    request, access: WorkspaceAccess, pk: int, number: int, fmt: str
) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    version = selectors.version_get(dataset=dataset, number=number)
    return _download(request, access, dataset, fmt, version)


# --- explore and clone --------------------------------------------------------------------------


def explore(request: HtmxHttpRequest) -> HttpResponse:
    datasets = selectors.dataset_public_list().annotate(image_count=Count("images"))
    query = request.GET.get("q", "").strip()[:100]
    task = request.GET.get("task", "")
    if query:
        datasets = datasets.filter(Q(name__icontains=query) | Q(description__icontains=query))
    if task in Task.values:
        datasets = datasets.filter(task=task)
    else:
        task = ""
    page = Paginator(datasets, EXPLORE_PAGE_SIZE).get_page(request.GET.get("page"))
    thumbs = _thumbs_by_dataset([d.pk for d in page.object_list], EXPLORE_THUMBS)
    for d in page.object_list:
        d.thumbs = thumbs.get(d.pk, [])
    return render(
        request,
        "datasets/explore.html",
        {"page": page, "q": query, "task": task, "tasks": Task.choices},
    )


def _dataset_overview(dataset: Dataset) -> dict:
    # Anyone may open a public dataset's page: its counts stop at a thousand and estimate past
    # it (datasets.selectors.counts), so no visitor makes the database count a million rows.
    return {
        "dataset": dataset,
        "classes": counts.class_label_counts(dataset=dataset),
        "splits": counts.split_counts(dataset=dataset),
        "image_total": counts.dataset_image_count(dataset=dataset),
        "versions": services.version_list(dataset=dataset)[:10],
    }


def public_dataset(request: HtmxHttpRequest, pk: int) -> HttpResponse:
    dataset = selectors.dataset_public_get(pk=pk)
    context = _dataset_overview(dataset)
    context["thumbs"] = _thumbs_by_dataset([dataset.pk], PUBLIC_THUMBS).get(dataset.pk, [])
    context.update(page_parts("public_dataset_page", dataset=dataset))  # its public models (deploy)
    if request.user.is_authenticated:
        targets = clone_targets_for_user(user=request.user, source=dataset)
        context["targets"] = targets
        context["form"] = CloneForm(targets=targets)
        context["clone_action"] = reverse("public_dataset_clone", kwargs={"pk": dataset.pk})
    return render(request, "datasets/public_dataset.html", context)


def _clone(request, source: Dataset, action: str, access: WorkspaceAccess | None) -> HttpResponse:
    targets = clone_targets_for_user(user=request.user, source=source)
    initial = {"workspace": access.workspace.slug} if access is not None else None
    form = CloneForm(request.POST or None, targets=targets, initial=initial)
    if request.method == "POST" and form.is_valid():
        target = workspace_access_for_user(user=request.user, slug=form.cleaned_data["workspace"])
        request.workspace_access = target
        try:
            clone = dataset_clone(
                access=target, source=source, name=form.cleaned_data["name"] or None
            )
        except ServiceError as e:
            form.add_error(None, str(e))
        else:
            messages.success(request, f"Cloned {source.name} into {target.workspace.name}.")
            return redirect("dataset_detail", ws_slug=target.workspace.slug, pk=clone.pk)
    context = _dataset_overview(source)
    context.update(
        {
            "access": access,
            "form": form,
            "targets": targets,
            "clone_action": action,
            "clone_page": True,
        }
    )
    if source.is_public:
        context["thumbs"] = _thumbs_by_dataset([source.pk], PUBLIC_THUMBS).get(source.pk, [])
    return render(request, "datasets/public_dataset.html", context)


@workspace_view(Perm.READ)
@require_http_methods(["GET", "POST"])
def dataset_clone_view(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    source = selectors.dataset_get(workspace=access.workspace, pk=pk)
    action = reverse("dataset_clone", kwargs={"ws_slug": access.workspace.slug, "pk": pk})
    return _clone(request, source, action, access)


@login_required
@require_http_methods(["GET", "POST"])
def public_dataset_clone(request, pk: int) -> HttpResponse:
    source = selectors.dataset_public_get(pk=pk)
    return _clone(request, source, reverse("public_dataset_clone", kwargs={"pk": pk}), None)
