"""The labelling JSON API (under /api/v1/), used by the editor itself.

Bodies are Schemas, validated here rather than by Ninja's signature parsing, so a refusal is
400 with `detail` in words the editor shows as they are (naming the field, or in
annotation.shapes the label, and the reason) rather than Ninja's 422 list of schema paths."""

import json
import re
from typing import Annotated, Any, ClassVar, TypeVar

import pydantic
from celery.exceptions import TimeoutError as CeleryTimeout
from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Field, Router, Schema

from annotation import mask_suggestions, masks, selectors, services
from annotation.shapes import LabelsInvalid
from core.errors import ServiceError
from datasets import selectors as dataset_selectors
from datasets.services.classes import dataset_class_create
from workspaces.permissions import Perm

router = Router(tags=["labels"])
MAX_BODY = 8 * 1024 * 1024
WORKER_WAIT_SECONDS = 90

Number = pydantic.StrictInt | pydantic.StrictFloat
Box = Annotated[list[pydantic.StrictFloat], Field(min_length=4, max_length=4)]
BOX_REFUSAL = "Send the rough box as [cx, cy, w, h], normalised 0..1."


class Body(Schema):
    refusals: ClassVar[dict[str, str]] = {}  # field → what to say when it does not fit


class LabelsIn(Body):
    revision: Any = None  # labels_save answers a missing or stale one
    labels: Any = None  # annotation.shapes checks each label and names the one at fault
    accepted_suggestions: list[Any] | None = Field(None, max_length=10_000)
    rejected_suggestions: list[Any] | None = Field(None, max_length=10_000)

    refusals: ClassVar = dict.fromkeys(
        ["accepted_suggestions", "rejected_suggestions"],
        "Suggestion ids must be a list of numbers.",
    )


class ReviewIn(Body):
    model_config = pydantic.ConfigDict(coerce_numbers_to_str=True)

    action: str = ""  # image_review names the choices
    comment: str = ""

    refusals: ClassVar = {
        "action": "Choose submit, approve or reject.",
        "comment": "Write the comment as text.",
    }


class SuggestionsIn(Body):
    model_id: Any = None  # model_for_workspace answers a missing or foreign one
    conf: Annotated[pydantic.StrictFloat, Field(gt=0, lt=1)] = 0.25

    refusals: ClassVar = {"conf": "The confidence threshold is between 0 and 1."}


class SmartPolygonIn(Body):
    box: Box

    refusals: ClassVar = {"box": BOX_REFUSAL}


class SamIn(Body):
    points: (
        list[Annotated[list[pydantic.StrictBool | Number], Field(min_length=3, max_length=3)]]
        | None
    ) = None
    box: Box | None = None

    refusals: ClassVar = {
        "points": "Send points as [[x, y, 1 or 0], ...], normalised 0..1.",
        "box": BOX_REFUSAL,
    }


class ClassIn(Body):
    name: str

    refusals: ClassVar = {"name": "Give the class a name."}


BodyT = TypeVar("BodyT", bound=Body)


def _payload(request: HttpRequest, schema: type[BodyT]) -> BodyT:
    try:
        return schema.model_validate(_body(request))
    except pydantic.ValidationError as error:
        raise ServiceError(schema.refusals[error.errors()[0]["loc"][0]]) from None


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
        auth=request.auth, user=request.user, image_id=image_id
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
    payload = _payload(request, LabelsIn)
    try:
        saved = services.labels_save(
            access=access,
            image=image,
            revision=payload.revision,
            labels=payload.labels,
            accepted_suggestions=_ids(payload.accepted_suggestions),
            rejected_suggestions=_ids(payload.rejected_suggestions),
        )
    except services.StaleRevision as exc:
        return JsonResponse({"detail": str(exc), "revision": exc.revision}, status=409)
    except LabelsInvalid as exc:
        return JsonResponse({"detail": str(exc), "errors": exc.errors}, status=400)
    return JsonResponse(selectors.labels_payload(saved.image))


def _ids(values: list | None) -> list[int]:
    """The ids among them: anything else in the list is passed over."""
    return [v for v in values or [] if isinstance(v, int) and not isinstance(v, bool)]


@router.get("/images/{image_id}/pixels")
def pixels_get(request: HttpRequest, image_id: int):
    """The image's stored mask or depth map as raw values: zlib-deflated, little-endian, row
    by row (`X-Dtype` uint8 for a mask, uint16 for depth; `X-Width`, `X-Height`); 204 when it
    has none. `X-Revision` is the revision to save a painted mask at."""
    _, image = _image(request, image_id, Perm.READ)
    raw = masks.pixels_raw(image=image)
    headers = {"X-Revision": str(image.revision), "Cache-Control": "private, no-store"}
    if raw is None:
        return HttpResponse(status=204, headers=headers)
    headers.update({"X-Width": str(raw.width), "X-Height": str(raw.height), "X-Dtype": raw.dtype})
    return HttpResponse(raw.data, content_type="application/octet-stream", headers=headers)


MAX_DECIDED = 10_000


def _decided_ids(request: HttpRequest) -> list[int]:
    """`?accepted=1,2&rejected=3`: the mask suggestions a save decides, as one list."""
    ids = []
    for name in ("accepted", "rejected"):
        for token in filter(None, request.GET.get(name, "").split(",")):
            # Ids fit a bigint: a longer number would fail in the database, not here.
            if not re.fullmatch(r"[0-9]{1,18}", token.strip()):
                raise ServiceError(f"Send {name} suggestions as ids separated by commas.")
            ids.append(int(token))
    if len(ids) > MAX_DECIDED:
        raise ServiceError(f"Decide at most {MAX_DECIDED:,} suggestions in one save.")
    return ids


@router.put("/images/{image_id}/mask")
def mask_put(request: HttpRequest, image_id: int):
    """Replace a semantic image's mask: the body is the PNG (8-bit greyscale, each pixel its
    class index, 255 where no class is), `?revision=` the revision it was read at. A stale
    revision gets 409 and nothing is written; a wrong size or a value outside the classes, 400.
    `&accepted=` / `&rejected=`: ids of this image's mask suggestions the new mask decides
    (comma-separated); they are removed in the same commit."""
    access, image = _image(request, image_id, Perm.WRITE)
    decided = _decided_ids(request)
    limit = masks.MASK_MAX_BYTES
    # Read from the stream: request.body would hold it to DATA_UPLOAD_MAX_MEMORY_SIZE, a form's.
    body = request.read(limit + 1)
    if len(body) > limit:
        raise ServiceError(f"The mask's PNG is larger than the {limit // 2**20} MiB taken.")
    try:
        revision = int(request.GET.get("revision", ""))
    except ValueError:
        raise ServiceError("Send the revision the mask was read at (?revision=).") from None
    try:
        saved = mask_suggestions.mask_save_deciding(
            access=access, image=image, revision=revision, png=body, decided=decided
        )
    except services.StaleRevision as exc:
        return JsonResponse({"detail": str(exc), "revision": exc.revision}, status=409)
    return JsonResponse(
        {
            "image_id": saved.pk,
            "revision": saved.revision,
            "status": saved.status,
            "review_comment": saved.review_comment,
            "stats": saved.pixel_map.stats,
        }
    )


@router.post("/images/{image_id}/review")
def review_post(request: HttpRequest, image_id: int):
    """`{"action": "submit" | "approve" | "reject", "comment": "..."}`: editors submit,
    reviewers (admins, or members marked reviewer) approve or reject with a comment."""
    access, image = _image(request, image_id, Perm.WRITE)  # reviewers can all write, too
    payload = _payload(request, ReviewIn)
    image = services.image_review(
        access=access, image=image, action=payload.action, comment=payload.comment
    )
    return JsonResponse({"status": image.status, "review_comment": image.review_comment})


@router.post("/images/{image_id}/suggestions")
def suggestions_post(request: HttpRequest, image_id: int):
    """Run a trained model of the workspace on this image now: `{"model_id": 3, "conf": 0.25}`.
    Its suggestions replace that model's earlier ones on this image."""
    access, image = _image(request, image_id, Perm.WRITE)
    payload = _payload(request, SuggestionsIn)
    model = services.model_for_workspace(access=access, model_id=payload.model_id)
    if model.task != image.dataset.task:
        raise ServiceError(
            f"“{model.name}” is a {model.get_task_display().lower()} model; this image's "
            f"dataset needs a {image.dataset.get_task_display().lower()} one."
        )
    from annotation.tasks import image_predict_task

    answer = _worker_answer(image_predict_task.delay(image.pk, model.pk, payload.conf))
    if "error" in answer:
        raise ServiceError(answer["error"])
    return JsonResponse(selectors.labels_payload(image))


@router.post("/images/{image_id}/smart-polygon")
def smart_polygon(request: HttpRequest, image_id: int):
    """A polygon around the object in a rough box `{"box": [cx, cy, w, h]}`, from GrabCut
    (classic segmentation, no model needed). Nothing is saved: the editor adds it."""
    _, image = _image(request, image_id, Perm.WRITE)
    box = _payload(request, SmartPolygonIn).box
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
    payload = _payload(request, SamIn)
    points, box = payload.points or [], payload.box
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
    name = _payload(request, ClassIn).name
    created = dataset_class_create(access=access, dataset=dataset, name=name)
    return JsonResponse(selectors.class_out(created), status=201)
