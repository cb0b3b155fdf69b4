"""A tiny semantic segmentation model and a tiny depth model, trained on painted shapes.

    python -m tests.deploy.pixel_models WORKDIR [SEMANTIC_EPOCHS [DEPTH_EPOCHS]]

Run as its own process, outside pytest (as tests.training.checkpoint_matrix), with restricted
checkpoint loading set up first, as the trainer does. Each image is a grey field with one red
disc: semantic masks say background (0) / disc (1); depth maps put the disc at 1.5 m and the
field at 4 m. Writes WORKDIR/manifest.json: each task's last.pt and a held-out image with its
true mask.
"""

import json
import sys
from pathlib import Path

import cv2
import numpy as np

from training.weights_check import checkpoint_loading_restrict

DISC_BGR = (30, 30, 220)
NEAR_M, FAR_M, DEPTH_SCALE = 1.5, 4.0, 1000


def painted(rng: np.random.Generator, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """An image with one disc, and its mask (1 on the disc)."""
    image = np.full((height, width, 3), 110, np.uint8)
    image = cv2.add(image, rng.integers(0, 25, image.shape, dtype=np.uint8))
    mask = np.zeros((height, width), np.uint8)
    side = min(width, height)
    radius = int(rng.integers(side // 5, side // 3))
    x = int(rng.integers(radius, width - radius))
    y = int(rng.integers(radius, height - radius))
    cv2.circle(image, (x, y), radius, DISC_BGR, -1)
    cv2.circle(mask, (x, y), radius, 1, -1)
    return image, mask


def dataset_write(root: Path, task: str, rng: np.random.Generator) -> Path:
    folder = "masks" if task == "semantic" else "depth"
    for split, count in (("train", 12), ("val", 2)):
        (root / "images" / split).mkdir(parents=True)
        (root / folder / split).mkdir(parents=True)
        for i in range(count):
            image, mask = painted(rng, 64, 64)
            cv2.imwrite(str(root / "images" / split / f"{i}.jpg"), image)
            if task == "depth":
                metres = np.where(mask == 1, NEAR_M, FAR_M)
                mask = np.rint(metres * DEPTH_SCALE).astype(np.uint16)
            cv2.imwrite(str(root / folder / split / f"{i}.png"), mask)
    extra = (
        "masks_dir: masks\nnames: {0: background, 1: disc}\n"
        if task == "semantic"
        else f"names: {{0: depth}}\ndepth_scale: {DEPTH_SCALE}\n"
    )
    data = root / "data.yaml"
    data.write_text(f"path: {root}\ntrain: images/train\nval: images/val\n{extra}")
    return data


def main(work: Path, epochs: dict[str, int]) -> None:
    checkpoint_loading_restrict()
    from ultralytics import YOLO

    rng = np.random.default_rng(0)
    manifest: dict = {}
    for task, yaml_name in (("semantic", "yolo26n-sem.yaml"), ("depth", "yolo26n-depth.yaml")):
        data = dataset_write(work / "data" / task, task, rng)
        YOLO(yaml_name).train(
            data=str(data),
            epochs=epochs[task],
            imgsz=64,
            batch=4,
            workers=0,
            amp=False,
            device="cpu",
            project=str(work / "runs"),
            name=task,
            exist_ok=True,
            plots=False,
            val=False,
            seed=0,
            verbose=False,
        )
        manifest[task] = str(work / "runs" / task / "weights" / "last.pt")
    # A held-out picture, not square and larger than the training size: answers come back at
    # the original size, whatever size the model ran at.
    image, mask = painted(rng, 96, 72)
    cv2.imwrite(str(work / "held_out.png"), image)
    cv2.imwrite(str(work / "held_out_mask.png"), mask)
    manifest["image"] = str(work / "held_out.png")
    manifest["mask"] = str(work / "held_out_mask.png")
    (work / "manifest.json").write_text(json.dumps(manifest))


if __name__ == "__main__":
    counts = [int(n) for n in sys.argv[2:4]]
    main(Path(sys.argv[1]), dict(zip(("semantic", "depth"), [*counts, 2, 2][:2], strict=True)))
