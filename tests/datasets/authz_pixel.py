"""Authorisation-matrix rows for semantic segmentation and depth datasets: the mask overlay of an
image and the polygon → semantic conversion (see tests/test_authz_matrix.py)."""

import numpy as np

from datasets.models import IGNORE_INDEX, LabelKind, Task
from datasets.services.pixel_maps import pixel_map_save
from tests.authz import Row, _ws
from tests.datasets.factories import (
    DatasetClassFactory,
    DatasetFactory,
    ImageFactory,
    LabelFactory,
)


def _pixel_objects(values: dict) -> dict:
    workspace = values["team"].workspace
    semantic = DatasetFactory(workspace=workspace, name="Authz semantic", task=Task.SEMANTIC)
    DatasetClassFactory(dataset=semantic, index=0, name="road")
    image = ImageFactory(dataset=semantic)
    mask = np.full((image.blob.height, image.blob.width), IGNORE_INDEX, dtype=np.uint8)
    mask[:10] = 0
    pixel_map_save(image=image, array=mask, dataset=semantic)
    segment = DatasetFactory(workspace=workspace, name="Authz polygons", task=Task.SEGMENT)
    cls = DatasetClassFactory(dataset=segment, index=0, name="cat")
    LabelFactory(
        image=ImageFactory(dataset=segment),
        dataset_class=cls,
        kind=LabelKind.POLYGON,
        data=[0.1, 0.1, 0.5, 0.1, 0.5, 0.5],
    )
    return {
        "semantic_dataset": semantic.pk,
        "semantic_image": image.pk,
        "segment_dataset": segment.pk,
    }


CTX = [_pixel_objects]

ROUTES = [
    Row(
        "dataset_image_overlay",
        "get",
        "viewer",
        200,
        _ws(pk="@semantic_dataset", image_pk="@semantic_image"),
    ),
    Row("dataset_semantic_convert", "post", "editor", 302, _ws(pk="@segment_dataset")),
]
