"""Masks that labelling tools export as run-length codes, decoded and traced into polygons.

Kestrel stores shapes, not masks: a mask becomes one polygon per connected region (traced by
OpenCV, which Ultralytics already installs), or the box around it where the task wants boxes.
Each decoder checks its input and raises ValueError with the reason, never an IndexError.
"""

import cv2
import numpy as np

# Sizes past this are refused before anything is allocated (a 20,000 × 20,000 mask).
MAX_MASK_PIXELS = 400_000_000
# Regions smaller than this many pixels are noise of a brush, not a shape.
MIN_REGION_PIXELS = 4


def _size_check(width: int, height: int) -> None:
    if not (isinstance(width, int) and isinstance(height, int)) or width <= 0 or height <= 0:
        raise ValueError("mask without a valid width and height")
    if width * height > MAX_MASK_PIXELS:
        raise ValueError(f"mask of {width}×{height} is too large")


def counts_decode(counts: list[int], width: int, height: int, *, order: str = "C") -> np.ndarray:
    """Alternating runs, background first (CVAT's and COCO's uncompressed RLE). order "C" is
    row by row (CVAT), "F" column by column (COCO)."""
    _size_check(width, height)
    total = width * height
    if not all(isinstance(c, int) and c >= 0 for c in counts):
        raise ValueError("run lengths must be whole numbers ≥ 0")
    if sum(counts) != total:
        raise ValueError(f"run lengths add up to {sum(counts)}, not {width}×{height} = {total}")
    values = np.zeros(len(counts), dtype=np.uint8)
    values[1::2] = 1
    flat = np.repeat(values, counts)
    return flat.reshape((height, width), order=order).astype(bool)


def coco_counts_from_string(s: str) -> list[int]:
    """COCO's compressed RLE string → run lengths (pycocotools' rleFrString)."""
    counts: list[int] = []
    p = 0
    while p < len(s):
        x, k, more = 0, 0, True
        while more:
            if p >= len(s):
                raise ValueError("compressed RLE ends in the middle of a number")
            c = ord(s[p]) - 48
            if not 0 <= c < 64:
                raise ValueError("compressed RLE has a character outside its alphabet")
            x |= (c & 0x1F) << (5 * k)
            more = bool(c & 0x20)
            p += 1
            k += 1
            if not more and c & 0x10:
                x |= -1 << (5 * k)
            if k > 13:
                raise ValueError("compressed RLE number too long")
        if len(counts) > 2:
            x += counts[-2]
        counts.append(x)
    return counts


def coco_rle_decode(rle: dict) -> np.ndarray:
    """A COCO RLE segmentation {"size": [h, w], "counts": [..] or "..."} → a bool mask."""
    size = rle.get("size")
    if not (isinstance(size, list) and len(size) == 2):
        raise ValueError("RLE without a [height, width] size")
    height, width = size
    counts = rle.get("counts")
    if isinstance(counts, str):
        counts = coco_counts_from_string(counts)
    elif not isinstance(counts, list):
        raise ValueError("RLE counts must be a list or a string")
    return counts_decode(counts, width, height, order="F")


def _bits(data: bytes) -> str:
    return "".join(f"{b:08b}" for b in data)


def label_studio_rle_decode(rle: list[int], width: int, height: int) -> np.ndarray:
    """Label Studio's brush RLE (label_studio_converter.brush.decode_rle: a bit stream of
    RGBA bytes) → a bool mask of the alpha channel."""
    _size_check(width, height)
    if not isinstance(rle, list) or not all(isinstance(v, int) and 0 <= v < 256 for v in rle):
        raise ValueError("brush RLE must be a list of bytes")
    bits = _bits(bytes(rle))
    pos = 0

    def take(n: int) -> int:
        nonlocal pos
        if pos + n > len(bits):
            raise ValueError("brush RLE ends early")
        out = int(bits[pos : pos + n], 2) if n else 0
        pos += n
        return out

    num = take(32)
    if num != width * height * 4:
        raise ValueError(f"brush RLE holds {num} values, not {width}×{height}×4")
    word = take(5) + 1
    sizes = [take(4) + 1 for _ in range(4)]
    out = np.zeros(num, dtype=np.uint8)
    i = 0
    while i < num:
        repeat = take(1)
        j = i + 1 + take(sizes[take(2)])
        if j > num:
            raise ValueError("brush RLE runs past the image")
        if repeat:
            out[i:j] = take(word)
            i = j
        else:
            while i < j:
                out[i] = take(word)
                i += 1
    return out.reshape(height, width, 4)[:, :, 3] > 0


def label_studio_rle_encode(mask: np.ndarray) -> list[int]:
    """The inverse of label_studio_rle_decode (label_studio_converter.brush.encode_rle with its
    defaults: word size 8, run sizes 3, 4, 8, 16), for exports and tests."""
    rgba = np.zeros((*mask.shape, 4), dtype=np.uint8)
    rgba[mask] = 255
    flat = rgba.reshape(-1)
    sizes = [3, 4, 8, 16]
    out = [f"{len(flat):032b}", f"{7:05b}", *(f"{s - 1:04b}" for s in sizes)]
    i, n = 0, len(flat)
    while i < n:
        j = i + 1
        while j < n and flat[j] == flat[i] and j - i < 1 << 16:
            j += 1
        run = j - i
        idx = next(k for k, s in enumerate(sizes) if run - 1 < 1 << s)
        out.append(f"1{idx:02b}{run - 1:0{sizes[idx]}b}{int(flat[i]):08b}")
        i = j
    bits = "".join(out)
    bits += "0" * (-len(bits) % 8)
    return [int(bits[k : k + 8], 2) for k in range(0, len(bits), 8)]


def mask_to_polygons(mask: np.ndarray) -> list[list[float]]:
    """The outline of each region of a bool mask, as [x1, y1, x2, y2, ...] in pixels of the
    mask, largest region first; regions under MIN_REGION_PIXELS are left out."""
    m = np.ascontiguousarray(mask, dtype=np.uint8)
    contours, _ = cv2.findContours(m, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    polygons = []
    for contour in contours:
        area = cv2.contourArea(contour)
        if len(contour) < 3 or area < MIN_REGION_PIXELS:
            continue
        polygons.append((area, [float(v) for v in contour.reshape(-1)]))
    polygons.sort(key=lambda p: -p[0])
    return [p for _, p in polygons]


def mask_box(mask: np.ndarray) -> tuple[float, float, float, float] | None:
    """The pixel box (x1, y1, x2, y2) around a mask's set pixels, or None for an empty one."""
    ys, xs = np.nonzero(mask)
    if not len(xs):
        return None
    return float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)
