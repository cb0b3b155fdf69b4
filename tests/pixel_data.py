"""Tiny synthetic data for the per-pixel tasks (semantic segmentation and depth), and models
trained on it once per test run. Shared by the training and serving tests.

The pictures are drawn, not downloaded: a soft background with a square and a disc on it.

- Semantic: classes 0 "ground", 1 "square", 2 "disc"; the mask paints each shape's pixels with
  its class and a 2-pixel ring around the disc with the ignore index (255).
- Depth: the ground is a ramp from DEPTH_FAR metres (top row) to DEPTH_NEAR (bottom row); the
  square and the disc stand nearer (SHAPE_DEPTH) and are drawn brighter the nearer they are.
  Stored as 16-bit PNG millimetres (`depth_scale` 1000: the PNG value of one metre).

What to call:
- `semantic_sample(k)` / `depth_sample(k)`: (RGB image uint8 H×W×3, mask uint8 or depth float
  metres H×W), the same for the same k on every machine.
- `pixel_version_create(access=, task=, train=, val=, unmasked=)`: a dataset of that task in the
  access's workspace, its images stored like an ingest leaves them, their maps saved through
  `datasets.services.pixel_maps.pixel_map_save`, frozen into a version ready to train; needs
  the database.
- `pixel_folder_write(root, task=, train=, val=)`: the same pictures in Ultralytics' own layout
  (data.yaml, images/, masks/ or depth/), no database.
- `trained_semantic_weights()` / `trained_depth_weights()`: the path of a best.pt of
  yolo26n-sem / yolo26n-depth trained on these pictures (imgsz 64), once per test run: the
  first caller in the run trains it (about 10 s on a CPU) or finds the one a Kestrel training
  job of this run published (`trained_weights_publish`); later callers, in this process or
  another xdist worker of the same run, get the same file. No database needed.
"""

import io
from pathlib import Path

import numpy as np
from PIL import Image as PILImage
from PIL import ImageDraw

from tests.run_cache import run_kept, run_shared

SIZE = (64, 48)  # width, height: small, and not square, so a swapped axis shows
SEMANTIC_CLASSES = ("ground", "square", "disc")
DEPTH_SCALE = 1000.0  # PNG value of one metre: millimetres
DEPTH_FAR, DEPTH_NEAR, SHAPE_DEPTH = 8.0, 2.0, 1.0
IGNORE = 255
IMGSZ = 64


def _shapes(k: int) -> tuple[tuple[int, int, int, int], tuple[int, int, int, int]]:
    """The square's and the disc's boxes (x0, y0, x1, y1) in picture k: they move with k."""
    w, h = SIZE
    sx, sy = 4 + (k * 7) % (w // 2 - 4), 4 + (k * 5) % (h // 2 - 6)
    dx, dy = w // 2 + (k * 3) % (w // 2 - 18), h // 2 - 4 + (k * 2) % (h // 2 - 12)
    return (sx, sy, sx + 14, sy + 14), (dx, dy, dx + 14, dy + 14)


def _background(k: int) -> np.ndarray:
    w, h = SIZE
    rows = np.linspace(60 + k % 5 * 8, 140, h, dtype=np.float32)[:, None]
    cols = np.linspace(0, 30, w, dtype=np.float32)[None, :]
    grey = rows + cols
    return np.stack([grey * 0.8, grey, grey * 0.7], axis=-1).clip(0, 255).astype(np.uint8)


def semantic_sample(k: int) -> tuple[np.ndarray, np.ndarray]:
    """(image, mask) of picture k: a red square (class 1) and a blue disc (class 2)."""
    square, disc = _shapes(k)
    image = PILImage.fromarray(_background(k))
    mask = PILImage.new("L", SIZE, 0)
    draw, paint = ImageDraw.Draw(image), ImageDraw.Draw(mask)
    draw.rectangle(square, fill=(220, 40, 30))
    paint.rectangle(square, fill=1)
    paint.ellipse((disc[0] - 2, disc[1] - 2, disc[2] + 2, disc[3] + 2), fill=IGNORE)
    draw.ellipse(disc, fill=(30, 60, 220))
    paint.ellipse(disc, fill=2)
    return np.asarray(image), np.asarray(mask, dtype=np.uint8)


def depth_sample(k: int) -> tuple[np.ndarray, np.ndarray]:
    """(image, depth in metres) of picture k: a ramp, far at the top, with two nearer shapes
    drawn brighter."""
    w, h = SIZE
    depth = np.repeat(np.linspace(DEPTH_FAR, DEPTH_NEAR, h, dtype=np.float32)[:, None], w, axis=1)
    image = PILImage.fromarray(_background(k))
    near = PILImage.new("L", SIZE, 0)
    draw, paint = ImageDraw.Draw(image), ImageDraw.Draw(near)
    square, disc = _shapes(k)
    draw.rectangle(square, fill=(240, 230, 200))
    paint.rectangle(square, fill=1)
    draw.ellipse(disc, fill=(250, 250, 250))
    paint.ellipse(disc, fill=1)
    depth[np.asarray(near) > 0] = SHAPE_DEPTH
    return np.asarray(image), depth


def _sample(task: str, k: int) -> tuple[np.ndarray, np.ndarray]:
    if task == "semantic":
        return semantic_sample(k)
    if task == "depth":
        return depth_sample(k)
    raise ValueError(f"no synthetic data for task {task!r}")


def _png(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(array).save(out, format="PNG")
    return out.getvalue()


def _depth_png_values(depth: np.ndarray) -> np.ndarray:
    return np.round(depth * DEPTH_SCALE).astype(np.uint16)


# --- in the database: a version ready to train --------------------------------------------------


def pixel_version_create(
    *, access, task: str, train: int = 6, val: int = 2, unmasked: int = 0, unmasked_split="train"
):
    """A `task` ("semantic" or "depth") dataset in the access's workspace with `train` + `val`
    masked images (and `unmasked` images of `unmasked_split` without a map), frozen into a
    version."""
    from datasets.models import Dataset, DatasetClass, Image
    from datasets.services.pixel_maps import pixel_map_save
    from datasets.services.versions import version_create
    from tests.datasets.factories import blob_for

    dataset = Dataset.objects.create(
        workspace=access.workspace,
        name=f"Synthetic {task}",
        task=task,
        created_by=access.user,
        **({"depth_scale": DEPTH_SCALE} if task == "depth" else {}),
    )
    names = SEMANTIC_CLASSES if task == "semantic" else ("depth",)
    for index, name in enumerate(names):
        DatasetClass.objects.create(dataset=dataset, index=index, name=name)
    splits = ["train"] * train + ["val"] * val + [unmasked_split] * unmasked
    for k, split in enumerate(splits):
        picture, target = _sample(task, k)
        image = Image.objects.create(
            dataset=dataset,
            blob=blob_for(_png(picture)),
            filename=f"{task}-{k:02d}.png",
            split=split,
        )
        if k < train + val:
            array = _depth_png_values(target) if task == "depth" else target
            pixel_map_save(image=image, array=array, user=access.user)
    return version_create(access=access, dataset=dataset, note="synthetic")


# --- no database: Ultralytics' layout, and models trained once per run ---------------------------


def pixel_folder_write(root: Path, *, task: str, train: int = 6, val: int = 2) -> Path:
    """The pictures in Ultralytics' layout under `root`; returns its data.yaml."""
    import yaml

    folder = "masks" if task == "semantic" else "depth"
    for k in range(train + val):
        split = "train" if k < train else "val"
        picture, target = _sample(task, k)
        for sub, array in (
            ("images", picture),
            (folder, _depth_png_values(target) if task == "depth" else target),
        ):
            path = root / sub / split / f"{task}-{k:02d}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(_png(array))
    doc: dict = {"path": str(root), "train": "images/train", "val": "images/val"}
    if task == "semantic":
        doc.update(names=dict(enumerate(SEMANTIC_CLASSES)), masks_dir="masks")
    else:
        doc.update(names={0: "depth"}, depth_scale=DEPTH_SCALE)
    data = root / "data.yaml"
    data.write_text(yaml.safe_dump(doc, sort_keys=False))
    return data


def _weights_name(task: str) -> str:
    return f"{task}-best.pt"


def trained_weights_publish(task: str, source) -> Path:
    """Keep a best.pt of `task` trained in this run (by a Kestrel job: a file, or an open
    binary file) for the later callers of trained_weights; a file already kept stays."""
    return run_kept(_weights_name(task), source)


def trained_weights(task: str) -> Path:
    """A best.pt of yolo26n-<sem|depth> trained on these pictures, once per test run."""
    return run_shared(_weights_name(task), lambda work: _train(task, work))


def trained_semantic_weights() -> Path:
    return trained_weights("semantic")


def trained_depth_weights() -> Path:
    return trained_weights("depth")


def _train(task: str, work: Path) -> Path:
    """One epoch of yolo26n-<sem|depth> from its YAML on CPU, offline, in this process."""
    from annotation.assist.predict import _ultralytics_env

    _ultralytics_env()  # offline, before the first import of Ultralytics
    from ultralytics import YOLO

    data = pixel_folder_write(work / "data", task=task)
    suffix = "-sem" if task == "semantic" else "-depth"
    YOLO(f"yolo26n{suffix}.yaml", task=task).train(
        data=str(data),
        epochs=1,
        imgsz=IMGSZ,
        batch=4,
        workers=0,
        amp=False,
        device="cpu",
        project=str(work / "runs"),
        name=task,
        exist_ok=True,
        plots=False,
        seed=0,
        verbose=False,
    )
    return work / "runs" / task / "weights" / "best.pt"
