"""Model-assisted labelling: outline an object from a rough box (GrabCut offline, or SAM), a
trained model's suggestions for images, and the overlap test that hides a suggestion an image
already has a label for.

Pure functions over image files and normalised coordinates, as `datasets.models.Label` stores
them; no database. Weights are user uploads: they open only through torch's restricted unpickler
(`training.weights_check`), Ultralytics never reaches the network, and it is imported only
when a model is first needed, so a web process does not pay for it at startup. Each function
returns a whole answer or raises AssistError, whose message is for the user.
"""

from annotation.assist.errors import AssistError
from annotation.assist.grabcut import (
    GRABCUT_BOX_SIDE,
    GRABCUT_CORE,
    GRABCUT_MARGIN,
    GRABCUT_MAX_SIDE,
    GRABCUT_MIN_FILL,
    GRABCUT_MIN_MARGIN,
    GRABCUT_SETTLED,
    grabcut_polygon,
)
from annotation.assist.overlap import RASTER_SIDE, shape_iou, suggestions_filter
from annotation.assist.predict import (
    BELOW_CONF_FACTOR,
    MAX_PREDICTIONS_PER_IMAGE,
    MODEL_CACHE_SIZE,
    POLYGON_MAX_POINTS,
    PREDICT_BATCH,
    SEGMENT_BATCH,
    ImagePredictions,
    Prediction,
    detection_uncertainty,
    model_predict,
)

# Tests set Ultralytics up offline, through this, before they import it themselves.
from annotation.assist.predict import _ultralytics_env as _ultralytics_env
from annotation.assist.sam import sam_polygon

__all__ = [
    "BELOW_CONF_FACTOR",
    "GRABCUT_BOX_SIDE",
    "GRABCUT_CORE",
    "GRABCUT_MARGIN",
    "GRABCUT_MAX_SIDE",
    "GRABCUT_MIN_FILL",
    "GRABCUT_MIN_MARGIN",
    "GRABCUT_SETTLED",
    "MAX_PREDICTIONS_PER_IMAGE",
    "MODEL_CACHE_SIZE",
    "POLYGON_MAX_POINTS",
    "PREDICT_BATCH",
    "RASTER_SIDE",
    "SEGMENT_BATCH",
    "AssistError",
    "ImagePredictions",
    "Prediction",
    "detection_uncertainty",
    "grabcut_polygon",
    "model_predict",
    "sam_polygon",
    "shape_iou",
    "suggestions_filter",
]
