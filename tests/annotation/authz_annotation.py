"""Authorisation-matrix rows for the editor, the labelling page, the review and
least-confident queues, and the labels API (tests/test_authz_matrix.py).

@image is labelled, so it can be approved; reviewing needs the admin role here (an editor
flagged as reviewer is tested in test_review.py). The assist endpoints are called with input
they refuse (400) once the caller is let in: the matrix checks who is let in, not GrabCut."""

from datasets.models import Image, LabelStatus
from tests.authz import ApiRow, Row, _ws

_DS = {"pk": "@dataset"}
_IMAGE = {"image_id": "@image"}

ROUTES = [
    Row("image_annotate", "get", "viewer", 200, _ws(image_pk="@image", **_DS)),
    Row("dataset_labelling", "get", "viewer", 200, _ws(**_DS)),
    # No model chosen: back to the labelling page with the reason.
    Row("prelabel_start", "post", "editor", 302, _ws(**_DS)),
    Row("review_queue", "get", "viewer", 302, _ws(**_DS)),
    Row("uncertain_queue", "get", "viewer", 302, _ws(**_DS)),
]

API = [
    ApiRow("/api/v1/images/{image_id}/labels", "get", "viewer", "read", 200, ids=_IMAGE),
    ApiRow(
        "/api/v1/images/{image_id}/labels",
        "put",
        "editor",
        "write",
        200,
        {"revision": 0, "labels": []},
        ids=_IMAGE,
    ),
    ApiRow(
        "/api/v1/images/{image_id}/review",
        "post",
        "admin",
        "write",
        200,
        {"action": "approve"},
        ids=_IMAGE,
    ),
    ApiRow(
        "/api/v1/images/{image_id}/suggestions",
        "post",
        "editor",
        "write",
        400,
        {"model_id": 0},
        ids=_IMAGE,
    ),
    ApiRow(
        "/api/v1/images/{image_id}/smart-polygon",
        "post",
        "editor",
        "write",
        400,
        {"box": []},
        ids=_IMAGE,
    ),
    ApiRow("/api/v1/images/{image_id}/sam", "post", "editor", "write", 400, {}, ids=_IMAGE),
    ApiRow(
        "/api/v1/datasets/{dataset_id}/classes", "post", "editor", "write", 201, {"name": "heron"}
    ),
]


def annotation_ctx(values: dict) -> dict:
    Image.objects.filter(pk=values["image"]).update(status=LabelStatus.LABELLED)
    return {}


CTX = [annotation_ctx]
