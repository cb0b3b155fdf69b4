"""The gallery of a dataset, its image pages, image bytes and thumbnails, bulk changes, classes
and automatic splits. Also the two image routes of public datasets (Explore)."""

from urllib.parse import urlencode

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import (
    Http404,
    HttpResponse,
    HttpResponseRedirect,
    QueryDict,
)
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import get_conditional_response
from django.views.decorators.http import require_http_methods, require_POST, require_safe

from core.errors import ServiceError
from core.files import stored_file_response
from core.http import reverse_each
from datasets import selectors
from datasets.models import PIXEL_TASKS, Dataset, Image, LabelStatus, PixelMap, Split
from datasets.selectors import gallery as gallery_selectors
from datasets.services import classes
from datasets.services import gallery as services
from datasets.services.pixel_maps import overlay_key
from datasets.services.thumbnails import thumbnail_placeholder, thumbnails_request
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

CACHE_SECONDS = 24 * 3600
# The name a browser saves an image under: ours, never the uploaded one.
_EXTENSIONS = {
    "image/jpeg": "jpg",
    "image/png": "png",
    "image/webp": "webp",
    "image/bmp": "bmp",
    "image/tiff": "tif",
}


class SplitAutoForm(forms.Form):
    train = forms.IntegerField(min_value=0, max_value=100, initial=80, label="Train %")
    val = forms.IntegerField(min_value=0, max_value=100, initial=20, label="Val %")
    test = forms.IntegerField(min_value=0, max_value=100, initial=0, label="Test %")
    seed = forms.IntegerField(min_value=0, max_value=2**31 - 1, initial=0, label="Seed")

    def clean(self):
        data = super().clean()
        parts = [data.get(k) for k in ("train", "val", "test")]
        if None not in parts and sum(parts) != 100:
            raise forms.ValidationError(f"The percentages add up to {sum(parts)}, not 100.")
        return data


# --- helpers ----------------------------------------------------------------------------------


def _cursor(params, name: str) -> int | None:
    value = params.get(name, "")
    return int(value) if value.isdigit() and len(value) < 19 else None


def _gallery_url(access: WorkspaceAccess, dataset: Dataset, **params) -> str:
    url = reverse("dataset_gallery", kwargs={"ws_slug": access.workspace.slug, "pk": dataset.pk})
    query = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    return f"{url}?{query}" if query else url


def _back(access: WorkspaceAccess, dataset: Dataset, back: str) -> HttpResponseRedirect:
    """Back to the gallery page a form was sent from, rebuilt from known fields only."""
    params = QueryDict(back or "")
    flt = gallery_selectors.GalleryFilter.from_query(params)
    cursor = {k: _cursor(params, k) for k in ("after", "before")}
    return redirect(_gallery_url(access, dataset, **flt.params(), **cursor))


def _ids(values: list[str]) -> list[int]:
    return [int(v) for v in values if v.isdigit() and len(v) < 19]


def _image_headers(response: HttpResponse, etag: str | None) -> HttpResponse:
    response["X-Content-Type-Options"] = "nosniff"
    if etag is None:
        response["Cache-Control"] = "no-store"
    else:
        response["ETag"] = etag
        response["Cache-Control"] = f"private, max-age={CACHE_SECONDS}"
    return response


def _serve(
    request, *, key: str, content_type: str, etag: str, filename: str, size: int | None = None
) -> HttpResponse:
    """The stored image, or a 304 for a matching ETag; 404 when the object is missing, an
    error when it is not the `size` recorded (a truncated file is never sent as the image)."""
    # condition()'s own check; not the decorator, whose etag_func would look the image up again.
    conditional = get_conditional_response(request, etag=etag)  # 304, or 412 for If-Match
    if conditional is not None:
        return _image_headers(conditional, etag) if conditional.status_code == 304 else conditional
    response = stored_file_response(
        key=key, filename=filename, inline_type=content_type, cache_seconds=CACHE_SECONDS, size=size
    )
    if response.status_code == 200:
        # Not on a redirect to S3: a 304 would renew a cached redirect whose signature expired.
        response["ETag"] = etag
    return response


def _image_file(request, image: Image) -> HttpResponse:
    blob = image.blob
    ext = _EXTENSIONS.get(blob.content_type, "bin")
    return _serve(
        request,
        key=blob.storage_key,
        content_type=blob.content_type,
        etag=f'"{blob.sha256}"',
        filename=f"image-{image.pk}.{ext}",
        size=blob.size,
    )


def _image_thumb(request, image: Image) -> HttpResponse:
    """The JPEG thumbnail; until it is made, a tiny grey placeholder that no one caches."""
    blob = image.blob
    if blob.has_thumbnail:
        try:
            return _serve(
                request,
                key=blob.thumbnail_key,
                content_type="image/jpeg",
                etag=f'"{blob.sha256}-t{settings.DATASET_THUMBNAIL_PX}j"',
                filename=f"image-{image.pk}-thumb.jpg",
            )
        except Http404:
            pass  # its file is gone: the placeholder until it is made again
    response = HttpResponse(thumbnail_placeholder(), content_type="image/webp")
    response["Content-Disposition"] = f'inline; filename="image-{image.pk}-thumb.webp"'
    return _image_headers(response, None)


def _image_overlay(request, image: Image) -> HttpResponse:
    """The mask's (a colour per class) or depth map's (a colour map) overlay, an RGBA PNG drawn
    when the map was stored; 404 when the image has none. Named by the map's hash, so a new
    map is a new ETag (and the gallery asks for it by a new URL)."""
    pixel_map = PixelMap.objects.filter(image=image).select_related("blob").first()
    if pixel_map is None:
        raise Http404("This image has no mask or depth map.")
    sha = pixel_map.blob.sha256
    return _serve(
        request,
        key=overlay_key(sha),
        content_type="image/png",
        etag=f'"{sha}-o"',
        filename=f"image-{image.pk}-overlay.png",
    )


def _with_overlays(images, route: tuple, task: str) -> None:
    """Each image's overlay URL (None without a map): the map's hash in the query, so the
    browser's cached overlay is never the old map's."""
    if task not in PIXEL_TASKS:
        return
    overlay = reverse_each("dataset_image_overlay", *route)
    for image in images:
        sha = getattr(image, "mask_sha", None)
        image.mask_src = f"{overlay(image.pk)}?m={sha[:16]}" if sha else None


# --- gallery and image pages ------------------------------------------------------------------


def _gallery_context(request, access: WorkspaceAccess, dataset: Dataset) -> dict:
    flt = gallery_selectors.GalleryFilter.from_query(request.GET)
    after, before = _cursor(request.GET, "after"), _cursor(request.GET, "before")
    page = gallery_selectors.gallery_page(dataset=dataset, flt=flt, after=after, before=before)
    missing = [image.blob_id for image in page.images if not image.blob.has_thumbnail]
    thumbnails_request(blob_ids=missing)
    route = (access.workspace.slug, dataset.pk)
    query = f"?{flt.querystring}" if flt.active else ""
    detail = reverse_each("dataset_image_detail", *route, suffix=query)
    thumb = reverse_each("dataset_image_thumb", *route)
    annotate = reverse_each("image_annotate", *route, suffix=query)
    for image in page.images:
        image.detail_href = detail(image.pk)
        image.thumb_src = thumb(image.pk)
        image.annotate_href = annotate(image.pk)
    _with_overlays(page.images, route, dataset.task)
    cursor = {k: v for k, v in (("after", after), ("before", before)) if v is not None}
    back = urlencode({**flt.params(), **cursor})
    params = flt.params()
    return {
        "previous_url": page.has_previous
        and _gallery_url(access, dataset, **params, before=page.first_id),
        "next_url": page.has_next and _gallery_url(access, dataset, **params, after=page.last_id),
        "first_url": page.has_previous and _gallery_url(access, dataset, **params),
        "access": access,
        "dataset": dataset,
        "page": page,
        "flt": flt,
        "classes": list(page.classes.values()),
        "splits": Split.choices,
        "statuses": LabelStatus.choices,
        "back": back,
        "has_cursor": bool(cursor),
        "split_form": SplitAutoForm(),
        "can_write": access.can(Perm.WRITE),
        "pixel_task": dataset.task in PIXEL_TASKS,
        "evaluation": gallery_selectors.gallery_evaluation(
            dataset=dataset, evaluation_id=flt.evaluation
        ),
    }


@workspace_view(Perm.READ)
@require_safe
def dataset_gallery(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    context = _gallery_context(request, access, dataset)
    if not context["page"].images and context["has_cursor"]:
        # A cursor past the end (its images were just deleted or moved): the first page instead.
        return redirect(_gallery_url(access, dataset, **context["flt"].params()))
    return render(request, "datasets/gallery.html", context)


@workspace_view(Perm.READ)
@require_safe
def image_detail(request, access: WorkspaceAccess, pk: int, image_pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    image = selectors.image_get(dataset=dataset, pk=image_pk)
    flt = gallery_selectors.GalleryFilter.from_query(request.GET)
    context = gallery_selectors.image_detail(dataset=dataset, image=image, flt=flt)
    _with_overlays([context["image"]], (access.workspace.slug, dataset.pk), dataset.task)
    return render(
        request,
        "datasets/image_detail.html",
        {**context, "access": access, "dataset": dataset, "flt": flt},
    )


@workspace_view(Perm.READ)
@require_safe
def image_file(request, access: WorkspaceAccess, pk: int, image_pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    return _image_file(request, selectors.image_get(dataset=dataset, pk=image_pk))


@workspace_view(Perm.READ)
@require_safe
def image_thumb(request, access: WorkspaceAccess, pk: int, image_pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    return _image_thumb(request, selectors.image_get(dataset=dataset, pk=image_pk))


@workspace_view(Perm.READ)
@require_safe
def image_overlay(request, access: WorkspaceAccess, pk: int, image_pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    return _image_overlay(request, selectors.image_get(dataset=dataset, pk=image_pk))


@require_safe
def public_image_file(request, pk: int, image_pk: int) -> HttpResponse:
    dataset = selectors.dataset_public_get(pk=pk)
    return _image_file(request, selectors.image_get(dataset=dataset, pk=image_pk))


@require_safe
def public_image_thumb(request, pk: int, image_pk: int) -> HttpResponse:
    dataset = selectors.dataset_public_get(pk=pk)
    return _image_thumb(request, selectors.image_get(dataset=dataset, pk=image_pk))


# --- bulk actions and splits ------------------------------------------------------------------


@workspace_view(Perm.WRITE)
@require_POST
def images_bulk(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """Move the ticked images to a split, or delete them (after a confirmation page)."""
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    post = request.POST
    back = post.get("back", "")
    field = "page_images" if post.get("all_on_page") else "images"
    ids = _ids(post.getlist(field))
    action = post.get("action")
    try:
        if action == "move":
            moved = services.images_split_set(
                access=access, dataset=dataset, image_ids=ids, split=post.get("to_split", "")
            )
            messages.success(
                request, f"Moved {moved} image{'s' * (moved != 1)} to {post['to_split']}."
            )
        elif action == "delete" and post.get("confirm") == "yes":
            deleted = services.images_delete(access=access, dataset=dataset, image_ids=ids)
            messages.success(request, f"Deleted {deleted} image{'s' * (deleted != 1)}.")
        elif action == "delete":
            chosen = list(
                Image.objects.filter(dataset=dataset, pk__in=ids[: services.BULK_MAX])
                .select_related("blob")
                .order_by("pk")
            )
            if not chosen:
                raise ServiceError("Tick at least one image.")
            for image in chosen:
                image.display_name = gallery_selectors.filename_display(image.filename)
            return render(
                request,
                "datasets/gallery.html",
                {"access": access, "dataset": dataset, "confirm_delete": chosen, "back": back},
            )
        else:
            raise ServiceError("Choose an action: move to a split, or delete.")
    except ServiceError as e:
        messages.error(request, str(e))
    return _back(access, dataset, back)


@workspace_view(Perm.WRITE)
@require_POST
def dataset_split_auto(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    form = SplitAutoForm(request.POST)
    if not form.is_valid():
        errors = [e for errs in form.errors.values() for e in errs]
        messages.error(request, "Auto-split not done: " + " ".join(errors))
    else:
        try:
            counts = services.dataset_split_auto(
                access=access, dataset=dataset, **form.cleaned_data
            )
        except ServiceError as e:
            messages.error(request, str(e))
        else:
            summary = ", ".join(f"{n} {split}" for split, n in counts.items())
            messages.success(request, f"Split by seed {form.cleaned_data['seed']}: {summary}.")
    return _back(access, dataset, request.POST.get("back", ""))


# --- classes ----------------------------------------------------------------------------------


def _classes_page(request, access, dataset, **extra) -> HttpResponse:
    return render(
        request,
        "datasets/classes.html",
        {
            "access": access,
            "dataset": dataset,
            "classes": classes.class_list_with_counts(dataset=dataset),
            "can_write": access.can(Perm.WRITE),
            "palette": gallery_selectors.PALETTE,
            **extra,
        },
    )


def _to_classes(access: WorkspaceAccess, dataset: Dataset) -> HttpResponseRedirect:
    return redirect("dataset_classes", ws_slug=access.workspace.slug, pk=dataset.pk)


@workspace_view(Perm.READ)
@require_safe
def dataset_classes(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    return _classes_page(request, access, dataset)


@workspace_view(Perm.WRITE)
@require_POST
def dataset_class_add(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    try:
        created = classes.dataset_class_create(
            access=access, dataset=dataset, name=request.POST.get("name", "")
        )
    except ServiceError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, f"Added the class {created.name} (id {created.index}).")
    return _to_classes(access, dataset)


@workspace_view(Perm.WRITE)
@require_POST
def dataset_class_rename(request, access: WorkspaceAccess, pk: int, class_pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    dataset_class = classes.class_get(dataset=dataset, pk=class_pk)
    old = dataset_class.name
    try:
        classes.dataset_class_rename(
            access=access, dataset_class=dataset_class, name=request.POST.get("name", "")
        )
    except ServiceError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, f"Renamed {old} to {dataset_class.name}.")
    return _to_classes(access, dataset)


@workspace_view(Perm.WRITE)
@require_POST
def dataset_class_merge(request, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """Merge the class `source` into the class `into`."""
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    source_pk, into_pk = _cursor(request.POST, "source"), _cursor(request.POST, "into")
    if source_pk is None or into_pk is None:
        messages.error(request, "Choose the class to merge and the class to merge it into.")
        return _to_classes(access, dataset)
    source = classes.class_get(dataset=dataset, pk=source_pk)
    target = classes.class_get(dataset=dataset, pk=into_pk)
    try:
        classes.dataset_class_merge(access=access, source=source, target=target)
    except ServiceError as e:
        messages.error(request, str(e))
    else:
        messages.success(request, f"Merged {source.name} into {target.name}.")
    return _to_classes(access, dataset)


@workspace_view(Perm.WRITE)
@require_http_methods(["GET", "POST"])
def dataset_class_delete(request, access: WorkspaceAccess, pk: int, class_pk: int) -> HttpResponse:
    dataset = selectors.dataset_get(workspace=access.workspace, pk=pk)
    dataset_class = classes.class_get(dataset=dataset, pk=class_pk)
    error = ""
    if request.method == "POST":
        try:
            deleted = classes.dataset_class_delete(
                access=access,
                dataset_class=dataset_class,
                confirm_name=request.POST.get("confirm", ""),
            )
        except ServiceError as e:
            error = str(e)
        else:
            messages.success(
                request,
                f"Deleted the class {dataset_class.name} and its {deleted} "
                f"label{'s' * (deleted != 1)}.",
            )
            return _to_classes(access, dataset)
    return _classes_page(
        request,
        access,
        dataset,
        confirm_class=dataset_class,
        confirm_labels=dataset_class.labels.count(),
        confirm_images=dataset_class.labels.values("image").distinct().count(),
        confirm_error=error,
    )
