"""The labelling JSON API (under /api/v1/), used by the editor itself.

Bodies are read as plain JSON and checked here and in annotation.shapes, so a refusal names
the label and the reason rather than a schema path."""

import json

from celery.exceptions import TimeoutError as CeleryTimeout
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from ninja import Router

from annotation import selectors, services
from annotation.shapes import LabelsInvalid
from core.errors import ServiceError
from datasets import selectors as dataset_selectors
from datasets.services.classes import dataset_class_create
from workspaces.permissions import Perm
from workspaces.selectors import workspace_access_for_object

router = Router(tags=["labels"])
MAX_BODY = 8 * 1024 * 1024
WORKER_WAIT_SECONDS = 90


def _body(request: HttpRequest) -> dict:
    if len(request.body) > MAX_BODY:
        raise ServiceError("The request is too large.")
    try:
        data = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise ServiceError("Send a JSON object.") from None
    if not isinstance(data, dict):
        raise ServiceError("Send a JSON object.")
    return data


def _image(request: HttpRequest, image_id: int, perm: Perm):
    access, image = selectors.image_for_caller(
        image_id=image_id,
        access_for=lambda slug: workspace_access_for_object(
            auth=request.auth, user=request.user, slug=slug, not_found="No such image."
        ),
    )
    access.require(perm)
    return access, image


def _worker_answer(result) -> dict:
    """Wait for a model task's answer (models run in workers: web processes never load torch)."""
    try:
        return result.get(timeout=WORKER_WAIT_SECONDS)
    except CeleryTimeout:
        result.revoke()
        raise ServiceError(
            "No worker answered in time to run the model; it may be busy or stopped. "
            "Try again in a minute."
        ) from None


def _box(data: dict) -> list[float]:
    box = data.get("box")
    if (
        not isinstance(box, list)
        or len(box) != 4
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in box)
    ):
        raise ServiceError("Send the rough box as [cx, cy, w, h], normalised 0..1.")
    return [float(v) for v in box]


@router.get("/images/{image_id}/labels")
def labels_get(request: HttpRequest, image_id: int):
    """An image's labels (normalised coordinates), its revision, review status, and the
    model suggestions waiting on it."""
    _, image = _image(request, image_id, Perm.READ)
    return JsonResponse(selectors.labels_payload(image))


@router.put("/images/{image_id}/labels")
def labels_put(request: HttpRequest, image_id: int):
    """Replace an image's labels. Send the `revision` you read: a stale one gets 409 and
    nothing is written. Labels are clipped to the image; degenerate ones are refused (400)."""
    access, image = _image(request, image_id, Perm.WRITE)
    data = _body(request)
    try:
        saved = services.labels_save(
            access=access,
            image=image,
            revision=data.get("revision"),
            labels=data.get("labels"),
            accepted_suggestions=_ids(data.get("accepted_suggestions")),
            rejected_suggestions=_ids(data.get("rejected_suggestions")),
        )
    except services.StaleRevision as exc:
        return JsonResponse({"detail": str(exc), "revision": exc.revision}, status=409)
    except LabelsInvalid as exc:
        return JsonResponse({"detail": str(exc), "errors": exc.errors}, status=400)
    return JsonResponse(selectors.labels_payload(saved.image))


def _ids(value) -> list[int]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > 10_000:
        raise ServiceError("Suggestion ids must be a list of numbers.")
    return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]


@router.post("/images/{image_id}/review")
def review_post(request: HttpRequest, image_id: int):
    """`{"action": "submit" | "approve" | "reject", "comment": "..."}`: editors submit,
    reviewers (admins, or members marked reviewer) approve or reject with a comment."""
    access, image = _image(request, image_id, Perm.WRITE)  # reviewers can all write, too
    data = _body(request)
    image = services.image_review(
        access=access,
        image=image,
        action=str(data.get("action", "")),
        comment=str(data.get("comment", "")),
    )
    return JsonResponse({"status": image.status, "review_comment": image.review_comment})


@router.post("/images/{image_id}/suggestions")
def suggestions_post(request: HttpRequest, image_id: int):
    """Run a trained model of the workspace on this image now: `{"model_id": 3, "conf": 0.25}`.
    Its suggestions replace that model's earlier ones on this image."""
    access, image = _image(request, image_id, Perm.WRITE)
    data = _body(request)
    model = services.model_for_workspace(access=access, model_id=data.get("model_id"))
    conf = data.get("conf", 0.25)
    if not isinstance(conf, int | float) or isinstance(conf, bool) or not 0 < conf < 1:
        raise ServiceError("The confidence threshold is between 0 and 1.")
    if model.task != image.dataset.task:
        raise ServiceError(
            f"“{model.name}” is a {model.get_task_display().lower()} model; this image's "
            f"dataset needs a {image.dataset.get_task_display().lower()} one."
        )
    from annotation.tasks import image_predict_task

    answer = _worker_answer(image_predict_task.delay(image.pk, model.pk, float(conf)))
    if "error" in answer:
        raise ServiceError(answer["error"])
    return JsonResponse(selectors.labels_payload(image))


@router.post("/images/{image_id}/smart-polygon")
def smart_polygon(request: HttpRequest, image_id: int):
    """A polygon around the object in a rough box `{"box": [cx, cy, w, h]}`, from GrabCut
    (classic segmentation, no model needed). Nothing is saved: the editor adds it."""
    _, image = _image(request, image_id, Perm.WRITE)
    box = _box(_body(request))
    from annotation import assist
    from annotation.prelabel import image_files

    try:
        with image_files([image]) as (path,):
            polygon = assist.grabcut_polygon(path, box)
    except assist.AssistError as exc:
        raise ServiceError(str(exc)) from None
    return JsonResponse({"data": polygon})


@router.post("/images/{image_id}/sam")
def sam_post(request: HttpRequest, image_id: int):
    """A polygon from Segment Anything for clicked points `{"points": [[x, y, 1|0], ...]}`
    (1 foreground, 0 background) and/or a box, when an admin has configured SAM weights."""
    _, image = _image(request, image_id, Perm.WRITE)
    weights = settings.ANNOTATION_SAM_WEIGHTS
    if not weights:
        raise ServiceError(selectors.sam_message(""))
    data = _body(request)
    points = data.get("points") or []
    if not isinstance(points, list) or not all(
        isinstance(p, list) and len(p) == 3 and all(isinstance(v, int | float) for v in p)
        for p in points
    ):
        raise ServiceError("Send points as [[x, y, 1 or 0], ...], normalised 0..1.")
    box = _box(data) if data.get("box") is not None else None
    if not points and box is None:
        raise ServiceError("Click the object first.")
    from annotation.tasks import sam_polygon_task

    answer = _worker_answer(sam_polygon_task.delay(image.pk, weights, points, box))
    if "error" in answer:
        raise ServiceError(answer["error"])
    return JsonResponse({"data": answer["data"]})


@router.post("/datasets/{dataset_id}/classes")
def class_create(request: HttpRequest, dataset_id: int):
    """Add a class to a dataset: `{"name": "bicycle"}`."""
    access, dataset = dataset_selectors.dataset_access_for_caller(
        auth=request.auth, user=request.user, pk=dataset_id
    )
    name = _body(request).get("name")
    if not isinstance(name, str):
        raise ServiceError("Give the class a name.")
    created = dataset_class_create(access=access, dataset=dataset, name=name)
    return JsonResponse(selectors.class_out(created), status=201)
