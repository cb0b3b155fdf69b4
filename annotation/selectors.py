"""Reads for the editor and the review queue (a dataset's labelling progress:
datasets.selectors.labelling)."""

from django.conf import settings
from django.middleware.csrf import get_token
from django.urls import reverse

from annotation.masks import depth_scale_of
from annotation.models import MASK_KIND, PrelabelRun, Suggestion
from datasets.models import Dataset, Image, Label, LabelStatus, Task
from datasets.selectors.counts import class_label_counts
from datasets.selectors.gallery import GalleryFilter, class_colour, filename_display, image_count
from training.models import TrainedModel
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess, row_for_caller

IOU_HIDE = 0.7  # a suggestion this close to an existing label of its class is not shown
QUEUES = ("all", "review", "uncertain")

COCO_KEYPOINTS = [
    "nose",
    "left eye",
    "right eye",
    "left ear",
    "right ear",
    "left shoulder",
    "right shoulder",
    "left elbow",
    "right elbow",
    "left wrist",
    "right wrist",
    "left hip",
    "right hip",
    "left knee",
    "right knee",
    "left ankle",
    "right ankle",
]
# COCO's person skeleton, 0-based (as Ultralytics draws it).
COCO_SKELETON = [
    [15, 13], [13, 11], [16, 14], [14, 12], [11, 12], [5, 11], [6, 12], [5, 6], [5, 7],
    [6, 8], [7, 9], [8, 10], [1, 2], [0, 1], [0, 2], [1, 3], [2, 4], [3, 5], [4, 6],
]  # fmt: skip


def image_for_caller(*, auth, user, image_id: int) -> tuple[WorkspaceAccess, Image]:
    """An image by id for an API caller: 404 unless the caller is in the image's workspace,
    the same 404 as for no such image."""
    return row_for_caller(
        Image.objects.select_related("blob", "dataset"),
        pk=image_id,
        auth=auth,
        user=user,
        not_found="No such image.",
        workspace="dataset__workspace",
    )


def label_out(label) -> dict:
    return {"kind": label.kind, "class_id": label.dataset_class_id, "data": label.data}


def suggestions_visible(image: Image, labels: list[dict]) -> list[dict]:
    """The image's suggestions, less those that duplicate an existing label (same class,
    IoU ≥ 0.7): a person has already drawn them."""
    rows = list(
        Suggestion.objects.filter(image=image)
        .select_related("model")
        .order_by("-confidence", "pk")  # ties in one order on every database
    )
    if not rows:
        return []
    from annotation import assist  # OpenCV: imported when first needed, not at start-up

    # A semantic model's masks have no shapes to duplicate: the editor paints them.
    shapes = [s for s in rows if s.kind != MASK_KIND]
    keep = assist.suggestions_filter(
        [(s.kind, s.dataset_class_id, s.data) for s in shapes],
        [(lb["kind"], lb["class_id"], lb["data"]) for lb in labels],
        threshold=IOU_HIDE,
    )
    hidden = {s.pk for s, kept in zip(shapes, keep, strict=True) if not kept}
    return [
        {
            "id": s.pk,
            "kind": s.kind,
            "class_id": s.dataset_class_id,
            "data": s.data,
            "confidence": round(s.confidence, 4),
            "model": s.model.name,
        }
        for s in rows
        if s.pk not in hidden
    ]


def labels_payload(image: Image) -> dict:
    labels = [label_out(lb) for lb in Label.objects.filter(image=image).order_by("id")]
    return {
        "image_id": image.pk,
        "revision": image.revision,
        "status": image.status,
        "review_comment": image.review_comment,
        "labels": labels,
        "suggestions": suggestions_visible(image, labels),
    }


def class_out(dataset_class, count: int = 0, count_text: str = "") -> dict:
    return {
        "id": dataset_class.pk,
        "index": dataset_class.index,
        "name": dataset_class.name,
        "color": class_colour(dataset_class.index),
        "count": count,
        "count_text": count_text or f"{count:,}",
    }


def skeleton_for(dataset: Dataset) -> dict | None:
    if dataset.task != Task.POSE:
        return None
    points = (dataset.keypoint_shape or [17, 3])[0]
    if points == len(COCO_KEYPOINTS):
        return {"names": COCO_KEYPOINTS, "edges": COCO_SKELETON}
    return {"names": [f"point {i + 1}" for i in range(points)], "edges": []}


# --- navigation --------------------------------------------------------------------------------


def _editor_url(access, dataset, image_id, query: str) -> str | None:
    if image_id is None:
        return None
    url = reverse("image_annotate", args=[access.workspace.slug, dataset.pk, image_id])
    return f"{url}?{query}" if query else url


def _first_after(queryset, image: Image):
    """The next image id after this one in id order, wrapping around; never the image itself."""
    after = queryset.filter(pk__gt=image.pk).order_by("pk").values_list("pk", flat=True).first()
    if after is None:
        after = queryset.exclude(pk=image.pk).order_by("pk").values_list("pk", flat=True).first()
    return after


def editor_nav(*, access, dataset: Dataset, image: Image, params) -> dict:
    """Previous, next and "next unlabelled" for the editor, in the queue it was opened from:
    the gallery's filter ("all"), the review queue, or least-confident-first."""
    queue = params.get("queue", "all")
    queue = queue if queue in QUEUES else "all"
    images = Image.objects.filter(dataset=dataset)
    unlabelled = images.filter(status=LabelStatus.UNLABELLED)
    by_uncertainty = unlabelled.exclude(pk=image.pk).order_by("-uncertainty", "pk")
    nav = {"queue": queue, "prev": None, "position": 0, "total": 0}
    gallery = reverse("dataset_gallery", args=[access.workspace.slug, dataset.pk])
    # Exact up to EXACT_COUNT_MAX, estimated past it: a million images took 0.2-1.3 s to count.
    position = total = None
    if queue == "review":
        in_review = images.filter(status=LabelStatus.IN_REVIEW)
        nav["next"] = _editor_url(access, dataset, _first_after(in_review, image), "queue=review")
        total = image_count(in_review)
        gallery += "?status=in_review"
    elif queue == "uncertain":
        nav["next"] = _editor_url(
            access, dataset, by_uncertainty.values_list("pk", flat=True).first(), "queue=uncertain"
        )
        total = image_count(unlabelled)
        gallery += "?status=unlabelled"
    else:
        flt = GalleryFilter.from_query(params)
        bounded = flt.keyset(dataset=dataset)  # the gallery's bounded queries, its indexes
        matching = bounded(images)
        query = flt.querystring
        before = bounded(images, id_lt=image.pk)
        previous = before.order_by("-pk").values_list("pk", flat=True).first()
        following = bounded(images, id_gt=image.pk).order_by("pk")
        nav["prev"] = _editor_url(access, dataset, previous, query)
        nav["next"] = _editor_url(
            access, dataset, following.values_list("pk", flat=True).first(), query
        )
        # No estimate of a position: ids below one are no share of the table's statistics.
        position = image_count(before, estimable=False)
        total = image_count(matching, estimable=flt.estimable)
        if query:
            gallery += f"?{query}"
    nav["total"] = total.value
    nav["total_text"] = total.text
    nav["exact"] = total.exact
    if position is not None:
        nav["position"] = position.value + 1
        nav["position_text"] = (
            f"{position.value + 1:,}" if position.exact else f"{position.value + 1:,}+"
        )
        nav["exact"] = nav["exact"] and position.exact
    nav["next_unlabelled"] = _editor_url(
        access, dataset, _first_after(unlabelled, image), "" if queue == "all" else f"queue={queue}"
    )
    nav["gallery"] = gallery
    return nav


def editor_data(*, request, access: WorkspaceAccess, dataset: Dataset, image: Image) -> dict:
    """Everything the editor page's script starts from (see annotation/templates/editor.html)."""
    counts = class_label_counts(dataset=dataset)
    api = f"/api/v1/images/{image.pk}"
    sam_weights = getattr(settings, "ANNOTATION_SAM_WEIGHTS", "")
    models = TrainedModel.objects.for_workspace(access.workspace).filter(task=dataset.task)
    return {
        "image": {
            "id": image.pk,
            "filename": filename_display(image.filename),
            "width": image.blob.width,
            "height": image.blob.height,
            "url": reverse(
                "dataset_image_file", args=[access.workspace.slug, dataset.pk, image.pk]
            ),
        },
        "dataset": {
            "id": dataset.pk,
            "name": dataset.name,
            "task": dataset.task,
            "keypoint_shape": dataset.keypoint_shape,
            # Depth: the stored value of one metre (the editor shows metres under the cursor).
            "depth_scale": depth_scale_of(dataset),
        },
        "classes": [class_out(c, c.label_total, c.label_count.text) for c in counts],
        "labels_url": f"{api}/labels",
        "pixels_url": f"{api}/pixels",
        "mask_url": f"{api}/mask",
        "class_add_url": f"/api/v1/datasets/{dataset.pk}/classes",
        "review_url": f"{api}/review",
        "suggest_url": f"{api}/suggestions",
        "smart_polygon_url": f"{api}/smart-polygon",
        "sam": {
            "available": bool(sam_weights),
            "message": sam_message(sam_weights),
            "url": f"{api}/sam",
        },
        "models": [{"id": m.pk, "name": m.name} for m in models.order_by("-created_at")[:50]],
        "can_edit": access.can(Perm.WRITE),
        "can_review": access.can(Perm.REVIEW),
        "nav": editor_nav(access=access, dataset=dataset, image=image, params=request.GET),
        "skeleton": skeleton_for(dataset),
        "csrf_token": get_token(request),
    }


def sam_message(weights: str) -> str:
    if weights:
        return "Click the object (Shift+click: background), then Enter."
    return (
        "Segment Anything is not set up: an admin puts an Ultralytics SAM weights file on the "
        "server, keeping its published name (mobile_sam.pt, sam_b.pt, sam2.1_t.pt, ...: the "
        "name tells Ultralytics which model it is), and sets KESTREL_SAM_WEIGHTS to its path. "
        "Smart polygon (S) works without it."
    )


def prelabel_runs(*, dataset: Dataset):
    return PrelabelRun.objects.filter(dataset=dataset).select_related("model", "created_by")[:10]
