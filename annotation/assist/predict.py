"""A trained YOLO model's suggestions for images, and how unsure it was about each image; and
loading YOLO and SAM weights: only through torch's restricted unpickler, after a check that
names what a refused file needs, Ultralytics kept offline and imported only when a model is
first needed, the last few models kept loaded."""

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from annotation.assist.errors import AssistError
from annotation.assist.geometry import _image_read, _normalised, _outline, _simplify
from datasets.services.masks import counts_decode
from training.weights_check import UnsafeWeights, checkpoint_loading_restrict, weights_check

PREDICT_BATCH = 16
# A segment model keeps a full-size mask per candidate until its batch is converted; a semantic
# one a full-size class map per image.
SEGMENT_BATCH = 4
MAX_PREDICTIONS_PER_IMAGE = 100
POLYGON_MAX_POINTS = 60
# Candidates down to this fraction of `conf` are looked at, only to rank uncertainty.
BELOW_CONF_FACTOR = 0.25
MODEL_CACHE_SIZE = 2
MASK_KIND = "mask"  # a semantic model's region of one class (annotation.models.MASK_KIND)
NO_CLASS = 255  # a semantic mask's "no class here" (datasets.models.IGNORE_INDEX)


@dataclass
class Prediction:
    """One suggested label: `kind` and `data` as `datasets.models.Label` stores them;
    `class_index` and `class_name` are the model's own (map them to the dataset's classes).

    A semantic model's suggestion is kind "mask": `data` is the class's pixels as COCO's
    uncompressed RLE ({"size": [h, w], "counts": [...]}, column-major, first run 0s), the same
    as the predict API answers, and `confidence` its share of the image's pixels (Ultralytics'
    semantic results hold the argmax only, no per-class confidence)."""

    kind: str
    class_index: int
    data: list[float] | dict[str, Any]
    confidence: float
    class_name: str = ""


@dataclass
class ImagePredictions:
    """A model's suggestions for one image, most confident first. Higher `uncertainty` means
    the model was less sure: see `detection_uncertainty`; for a classifier, 1 - top-1 prob."""

    image_path: str
    predictions: list[Prediction] = field(default_factory=list)
    uncertainty: float = 0.0


_env_ready = False
_models: OrderedDict[tuple, tuple[Any, threading.Lock]] = OrderedDict()
_models_lock = threading.Lock()


def _ultralytics_env() -> None:
    """Before Ultralytics is first imported: its settings and fonts in Kestrel's training
    folder (unless YOLO_CONFIG_DIR says otherwise), no downloads or installs, no chatter, and
    checkpoints opened only through torch's restricted unpickler."""
    global _env_ready
    if _env_ready:
        return
    from training.ultralytics_env import ultralytics_process_env

    os.environ.update(ultralytics_process_env())
    os.environ["YOLO_VERBOSE"] = "False"
    checkpoint_loading_restrict()
    _env_ready = True


def _model_load(weights_path: str | Path, kind: str) -> tuple[Any, threading.Lock]:
    """A YOLO or SAM model and the lock to hold while it predicts, from a small cache keyed by
    the file and its modification time (a replaced file is loaded afresh)."""
    path = Path(weights_path)
    try:
        stat = path.stat()
    except OSError:
        raise AssistError(f"The model's weights file {path.name} is missing.") from None
    if path.suffix.lower() not in ((".pt", ".pth") if kind == "sam" else (".pt",)):
        # Ultralytics would read any other name as an export format or a download.
        raise AssistError(f"{path.name} is not a .pt weights file.")
    key = (kind, str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    with _models_lock:
        if key in _models:
            _models.move_to_end(key)
            return _models[key]
    _ultralytics_env()
    try:
        weights_check(path)  # names what a refused file needs
    except UnsafeWeights as e:
        raise AssistError(f"The weights file was refused: {e}.") from None
    try:
        if kind == "sam":
            from ultralytics import SAM
            from ultralytics.models.sam.build import sam_model_map

            if not any(path.name.endswith(name) for name in sam_model_map):
                raise AssistError(
                    f"{path.name} is not named like a SAM checkpoint Ultralytics knows "
                    f"({', '.join(sorted(sam_model_map))}); it picks the architecture by name."
                )
            model = SAM(str(path))
        else:
            from ultralytics import YOLO

            model = YOLO(str(path))
    except AssistError:
        raise
    except Exception as e:  # noqa: BLE001 - any unloadable file gets one readable answer
        raise AssistError(
            f"{path.name} could not be loaded as a {'SAM' if kind == 'sam' else 'YOLO'} "
            f"model ({type(e).__name__}: {e})."
        ) from None
    with _models_lock:
        entry = _models.setdefault(key, (model, threading.Lock()))
        _models.move_to_end(key)
        while len(_models) > MODEL_CACHE_SIZE:
            _models.popitem(last=False)
    return entry


def detection_uncertainty(confidences: list[float], best_below: float, conf: float) -> float:
    """How unsure a detector was about an image, 0..1-conf, higher = less sure.

    With suggestions at or above `conf`: 1 - their mean confidence. With none: the nearer its
    best candidate came to `conf`, the higher, reaching the same 1-conf at the threshold, so a
    "nearly found something" image ranks with the barely-found ones and an image where the
    model saw nothing ranks last (0).
    """
    if confidences:
        return 1.0 - sum(confidences) / len(confidences)
    return (1.0 - conf) * min(max(best_below, 0.0), conf) / conf


def _keypoints_data(box: list[float], xyn: np.ndarray, kconf: np.ndarray | None) -> list[float]:
    data = list(box)
    for k, (x, y) in enumerate(xyn.tolist()):
        if x <= 0 and y <= 0:  # (0, 0) is how YOLO pose labels, and so models, say "none"
            data += [0.0, 0.0, 0.0]
            continue
        visible = 2.0 if kconf is None or kconf[k] >= 0.5 else 1.0
        data += [round(min(max(x, 0.0), 1.0), 6), round(min(max(y, 0.0), 1.0), 6), visible]
    return data


def mask_rle(mask: np.ndarray) -> dict[str, Any]:
    """COCO's uncompressed RLE of a boolean [h, w] mask (as deploy.inference.formats answers;
    annotation may not import deploy)."""
    flat = mask.ravel(order="F")
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    counts = np.diff(np.concatenate(([0], changes, [flat.size]))).tolist()
    if flat.size and flat[0]:
        counts = [0, *counts]  # COCO's counts start with the background's run
    return {"size": [int(mask.shape[0]), int(mask.shape[1])], "counts": counts}


def mask_from_rle(rle: Any) -> np.ndarray:
    """A boolean [h, w] mask from `mask_rle`'s answer (the importers' COCO RLE decoder);
    AssistError unless the runs cover it."""
    try:
        height, width = (int(v) for v in rle["size"])
        return counts_decode(list(rle["counts"]), width, height, order="F")
    except (TypeError, KeyError, ValueError) as e:
        raise AssistError(f"A mask suggestion is not COCO RLE of its image ({e}).") from None


def _semantic_predictions(data: Any, names: dict[int, str]) -> list[Prediction]:
    """One "mask" suggestion per class present, largest first. A one-class model answers
    foreground 1 / background 0 (as Results.summary reads it): its 1 is class 0."""
    raw = data.cpu().numpy() if hasattr(data, "cpu") else np.asarray(data)
    if len(names) == 1:
        class_map = np.where(raw == 1, 0, NO_CLASS)
    else:
        class_map = np.where(np.isin(raw, [c for c in names if 0 <= c < NO_CLASS]), raw, NO_CLASS)
    counts = np.bincount(class_map.astype(np.int64).ravel(), minlength=NO_CLASS + 1)
    out = [
        Prediction(
            MASK_KIND,
            index,
            mask_rle(class_map == index),
            int(counts[index]) / class_map.size,
            names[index],
        )
        for index in np.flatnonzero(counts[:NO_CLASS]).tolist()
    ]
    return sorted(out, key=lambda p: -p.confidence)


def _result_predictions(result: Any, conf: float, path: str | Path) -> ImagePredictions:
    """One Ultralytics result as Kestrel suggestions, with the image's uncertainty."""
    names = result.names
    out = ImagePredictions(image_path=str(path))
    semantic = getattr(result, "semantic_mask", None)
    if semantic is not None:
        # No uncertainty (0): Ultralytics' semantic results keep no class probabilities.
        out.predictions = _semantic_predictions(semantic.data, names)
        return out
    if result.probs is not None:  # a classifier: its top-1, and any other top-5 above conf
        probs = result.probs
        for rank, (index, prob) in enumerate(
            zip(probs.top5, probs.top5conf.tolist(), strict=False)
        ):
            if rank == 0 or prob >= conf:
                out.predictions.append(Prediction("tag", int(index), [], float(prob), names[index]))
        out.uncertainty = 1.0 - float(probs.top1conf)
        return out
    boxes = result.obb if result.obb is not None else result.boxes
    confidences = boxes.conf.tolist() if boxes is not None else []
    height, width = result.orig_shape
    for i, confidence in enumerate(confidences):
        if confidence < conf:
            continue
        index = int(boxes.cls[i])
        if result.obb is not None:
            kind, data = "obb", _normalised(boxes.xyxyxyxyn[i].cpu().numpy(), 1, 1)
        else:
            box = _normalised(boxes.xywhn[i].cpu().numpy(), 1, 1)
            kind, data = "box", box
            if result.keypoints is not None:
                kpts = result.keypoints
                kconf = kpts.conf[i].tolist() if kpts.conf is not None else None
                kind, data = "keypoints", _keypoints_data(box, kpts.xyn[i].cpu().numpy(), kconf)
            elif result.masks is not None:
                polygon = result.masks.xyn[i] * (width, height)
                kind = "polygon"
                if len(polygon) >= 3:
                    polygon = _simplify(polygon, POLYGON_MAX_POINTS)
                    data = _normalised(polygon, width, height)
                else:  # a mask too small to outline: its box, as a polygon
                    data = _normalised(_outline("box", box), 1, 1)
        out.predictions.append(Prediction(kind, index, data, float(confidence), names[index]))
    kept = [p.confidence for p in out.predictions]
    below = [c for c in confidences if c < conf]
    out.uncertainty = detection_uncertainty(kept, max(below, default=0.0), conf)
    return out


def model_predict(
    weights_path: str | Path,
    image_paths: list[str | Path],
    *,
    conf: float = 0.25,
    imgsz: int | None = None,
    device: str = "cpu",
) -> list[ImagePredictions]:
    """A trained YOLO model's suggestions for each image, in the order given.

    detect -> box, segment -> polygon (at most 60 points), pose -> keypoints (v 2 when the
    keypoint's confidence is >= 0.5, else 1; 0,0,0 where the model placed none), obb -> obb,
    classify -> tag (the top-1 class always, other top-5 classes at or above `conf`), semantic ->
    one mask per class present (see Prediction; `conf` does not apply). At most 100
    suggestions an image. `imgsz` None uses the size the model was trained at.
    """
    if not 0 < conf <= 1:
        raise AssistError("The confidence threshold must be between 0 and 1.")
    if not image_paths:
        return []
    model, lock = _model_load(weights_path, "yolo")
    batch = SEGMENT_BATCH if model.task in ("segment", "semantic") else PREDICT_BATCH
    options: dict[str, Any] = {
        "conf": conf * BELOW_CONF_FACTOR,
        "device": device,
        "max_det": MAX_PREDICTIONS_PER_IMAGE,
        "verbose": False,
    }
    if imgsz:
        options["imgsz"] = int(imgsz)
    answers: list[ImagePredictions] = []
    for start in range(0, len(image_paths), batch):
        paths = image_paths[start : start + batch]
        images = [_image_read(path) for path in paths]
        try:
            with lock:
                results = model.predict(images, **options)
            answers += [
                _result_predictions(result, conf, path)
                for path, result in zip(paths, results, strict=True)
            ]
        except Exception as e:  # noqa: BLE001 - a whole answer or a reason, never a part
            raise AssistError(
                f"The model could not predict on {Path(paths[0]).name} and the images after "
                f"it in its batch ({type(e).__name__}: {e})."
            ) from None
    return answers
