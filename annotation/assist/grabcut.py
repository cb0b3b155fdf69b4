"""Outlining an object from a rough box with OpenCV's GrabCut: offline, no model needed."""

import math
from pathlib import Path

import cv2
import numpy as np

from annotation.assist.errors import AssistError
from annotation.assist.geometry import _box_numbers, _image_read, _normalised, _simplify

GRABCUT_MAX_SIDE = 384  # the box and its surroundings are outlined at most this large
# The graph cut's time grows with the box's area: a larger box is outlined at this size.
GRABCUT_BOX_SIDE = 256
GRABCUT_MARGIN = 1.0  # of the box's size, on each side
GRABCUT_MIN_MARGIN = 32.0  # pixels
GRABCUT_MIN_FILL = 0.05  # of the box: less, and GrabCut has lost the object
GRABCUT_SETTLED = 0.002  # of the box's pixels changing side: the outline has settled
GRABCUT_CORE = 0.25  # semi-axes of the centre held as foreground, of the box's size


def _grabcut_region(
    image: np.ndarray, rect: tuple[int, int, int, int], iterations: int, *, core: bool
) -> np.ndarray | None:
    """The largest foreground contour GrabCut finds in `rect`, or None when it finds next to
    nothing. With `core`, an ellipse at the box's centre is held as foreground."""
    x, y, w, h = rect
    mask = np.zeros(image.shape[:2], np.uint8)
    mode = cv2.GC_INIT_WITH_RECT
    if core:
        mask[y : y + h, x : x + w] = cv2.GC_PR_FGD
        axes = (max(1, round(w * GRABCUT_CORE)), max(1, round(h * GRABCUT_CORE)))
        cv2.ellipse(mask, (x + w // 2, y + h // 2), axes, 0, 0, 360, cv2.GC_FGD, -1)
        mode = cv2.GC_INIT_WITH_MASK
    models = (np.zeros((1, 65), np.float64), np.zeros((1, 65), np.float64))
    cv2.setRNGSeed(0)  # its k-means start: the same box gives the same outline every time
    try:
        cv2.grabCut(image, mask, rect, *models, 1, mode)
        for _ in range(iterations - 1):  # each a graph cut: stop once the outline settles
            before = mask.copy()
            cv2.grabCut(image, mask, rect, *models, 1, cv2.GC_EVAL)
            if np.count_nonzero(mask != before) <= GRABCUT_SETTLED * w * h:
                break
    except cv2.error:
        raise AssistError("GrabCut could not separate this box from its surroundings.") from None
    foreground = np.isin(mask, (cv2.GC_FGD, cv2.GC_PR_FGD)).astype(np.uint8)
    foreground = cv2.morphologyEx(foreground, cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
    contours = cv2.findContours(foreground, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)[0]
    largest = max(contours, key=cv2.contourArea, default=None)
    if largest is None or cv2.contourArea(largest) < GRABCUT_MIN_FILL * w * h:
        return None
    return largest


def grabcut_polygon(
    image_path: str | Path, box: list[float], *, max_points: int = 40, iterations: int = 5
) -> list[float]:
    """Outline the object inside `box` ([cx, cy, w, h], normalised) with OpenCV's GrabCut:
    the largest foreground region, as a normalised polygon [x1, y1, ...] of 3..max_points
    vertices. Works offline on any machine; a few hundred milliseconds on a CPU."""
    if max_points < 3:
        raise AssistError("A polygon needs at least 3 points.")
    iterations = min(max(int(iterations), 1), 20)
    image = _image_read(image_path)
    height, width = image.shape[:2]
    cx, cy, bw, bh = _box_numbers(box)
    x0, x1 = max(0.0, (cx - bw / 2) * width), min(float(width), (cx + bw / 2) * width)
    y0, y1 = max(0.0, (cy - bh / 2) * height), min(float(height), (cy + bh / 2) * height)
    if x1 - x0 < 4 or y1 - y0 < 4:
        raise AssistError(
            "The box is too small or lies outside the image: draw it around the object."
        )
    # GrabCut learns the background from what surrounds the box. A narrow margin can look
    # like the object (a white vase on a white railing), so it gets as much again as the box
    # on every side; a small box on a large image still makes little work.
    margin_x = max(GRABCUT_MIN_MARGIN, GRABCUT_MARGIN * (x1 - x0))
    margin_y = max(GRABCUT_MIN_MARGIN, GRABCUT_MARGIN * (y1 - y0))
    crop_x0, crop_y0 = int(max(0.0, x0 - margin_x)), int(max(0.0, y0 - margin_y))
    crop_x1 = int(min(width, math.ceil(x1 + margin_x)))
    crop_y1 = int(min(height, math.ceil(y1 + margin_y)))
    crop = image[crop_y0:crop_y1, crop_x0:crop_x1]
    scale = min(
        1.0, GRABCUT_MAX_SIDE / max(crop.shape[:2]), GRABCUT_BOX_SIDE / max(x1 - x0, y1 - y0)
    )
    if scale < 1.0:
        crop = cv2.resize(crop, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    work_h, work_w = crop.shape[:2]
    rx0, ry0 = round((x0 - crop_x0) * scale), round((y0 - crop_y0) * scale)
    rx1 = min(work_w, round((x1 - crop_x0) * scale))
    ry1 = min(work_h, round((y1 - crop_y0) * scale))
    if rx0 == 0 and ry0 == 0 and rx1 == work_w and ry1 == work_h:
        # The box is the whole image: leave GrabCut a border to learn the background from.
        inset_x, inset_y = max(1, work_w // 50), max(1, work_h // 50)
        rx0, ry0, rx1, ry1 = inset_x, inset_y, work_w - inset_x, work_h - inset_y
    rect = (rx0, ry0, rx1 - rx0, ry1 - ry0)
    largest = _grabcut_region(crop, rect, iterations, core=False)
    if largest is None:  # GrabCut gave the whole box to the background: insist on its centre
        largest = _grabcut_region(crop, rect, iterations, core=True)
    if largest is None:
        raise AssistError(
            "No object stood out inside the box. Draw a tighter box around one object, "
            "or draw the polygon by hand."
        )
    outline = _simplify(largest.reshape(-1, 2), max_points) / scale + (crop_x0, crop_y0)
    return _normalised(outline, width, height)
