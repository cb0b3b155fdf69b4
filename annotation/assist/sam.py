"""Outlining one object with Segment Anything, prompted by clicks and/or a box."""

from pathlib import Path
from typing import Any

import cv2
import numpy as np

from annotation.assist.errors import AssistError
from annotation.assist.geometry import _box_numbers, _image_read, _normalised, _simplify
from annotation.assist.predict import _model_load


def sam_polygon(
    weights_path: str | Path,
    image_path: str | Path,
    *,
    points: list[list[float]] | None = None,
    box: list[float] | None = None,
    max_points: int = 60,
    device: str = "cpu",
) -> list[float]:
    """Outline one object with Segment Anything, prompted by clicks and/or a box.

    `points` are normalised [x, y] (the object) or [x, y, label] with label 1 for the object
    and 0 for background; `box` is [cx, cy, w, h]. Returns the largest mask's outline as a
    normalised polygon of 3..max_points vertices. The weights file must be named like an
    Ultralytics SAM checkpoint (sam_b.pt, mobile_sam.pt, sam2_t.pt, ...).
    """
    if not points and not box:
        raise AssistError("Click on the object or draw a box around it first.")
    if max_points < 3:
        raise AssistError("A polygon needs at least 3 points.")
    image = _image_read(image_path)
    height, width = image.shape[:2]
    prompts: dict[str, Any] = {}
    try:
        if points:
            prompts["points"] = [[[float(p[0]) * width, float(p[1]) * height] for p in points]]
            prompts["labels"] = [[int(p[2]) if len(p) > 2 else 1 for p in points]]
        if box:
            cx, cy, bw, bh = _box_numbers(box)
            prompts["bboxes"] = [
                [(cx - bw / 2) * width, (cy - bh / 2) * height]
                + [(cx + bw / 2) * width, (cy + bh / 2) * height]
            ]
    except (TypeError, ValueError, IndexError):
        raise AssistError("The clicks or the box could not be read as coordinates.") from None
    model, lock = _model_load(weights_path, "sam")
    try:
        with lock:
            result = model.predict(image, device=device, verbose=False, **prompts)[0]
    except Exception as e:  # noqa: BLE001
        raise AssistError(f"Segment Anything failed on this image ({type(e).__name__}).") from None
    masks = result.masks.data.cpu().numpy() > 0.5 if result.masks is not None else None
    if masks is None or not masks.any():
        raise AssistError("Segment Anything found no object there; try another click or box.")
    mask = masks[int(masks.reshape(len(masks), -1).sum(axis=1).argmax())].astype(np.uint8)
    contours = cv2.findContours(mask, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)[0]
    largest = max(contours, key=cv2.contourArea)
    outline = _simplify(largest.reshape(-1, 2), max_points)
    return _normalised(outline, mask.shape[1], mask.shape[0])
