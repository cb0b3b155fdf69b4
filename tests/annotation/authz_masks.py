"""Authorisation-matrix rows for the mask API (tests/test_authz_matrix.py).

@semantic_image has a stored mask, so reading it answers 200. A save is sent the matrix's JSON
body, which is no PNG: once the caller is let in it is refused (400); the matrix checks who is
let in, test_masks_api.py what a mask must be."""

import numpy as np

from datasets.services.pixel_maps import pixel_map_save
from tests.authz import ApiRow
from tests.datasets.factories import DatasetClassFactory, DatasetFactory, ImageFactory

_IMAGE = {"image_id": "@semantic_image"}

API = [
    ApiRow("/api/v1/images/{image_id}/pixels", "get", "viewer", "read", 200, ids=_IMAGE),
    ApiRow(
        "/api/v1/images/{image_id}/mask",
        "put",
        "editor",
        "write",
        400,
        {"not": "a png"},
        ids=_IMAGE,
        query="?revision=1",
    ),
]


def masks_ctx(values: dict) -> dict:
    dataset = DatasetFactory(workspace=values["team"].workspace, task="semantic", name="Roads")
    DatasetClassFactory(dataset=dataset, index=0, name="road")
    image = ImageFactory(dataset=dataset)
    pixel_map_save(image=image, array=np.zeros((image.blob.height, image.blob.width), np.uint8))
    return {"semantic_image": image.pk}


CTX = [masks_ctx]
