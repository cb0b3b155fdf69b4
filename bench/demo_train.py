"""How fast the seeded demo dataset trains on this machine: wall time and mAP50 per epoch, and
how many of the val images' shapes the trained model finds with confidence above 0.5.

Writes the demo's images (the same bytes `make run` seeds) as a YOLO folder and trains
yolo11n from its YAML (no pretrained weights, no network) with the settings the first
`make run`'s demo job uses (training.services.demo_model.DEMO_PARAMS); options override them.

    .venv/bin/python bench/demo_train.py [--epochs N] [--imgsz N] [--batch N] [key=value ...]

e.g. `bench/demo_train.py --epochs 60 patience=0 mosaic=1.0` (any Ultralytics train argument).
"""

import argparse
import csv
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def write_yolo(root: Path) -> None:
    from datasets.services.demo import CLASSES, TRAIN, demo_images

    for n, (data, labels) in enumerate(demo_images()):
        split = "train" if n < TRAIN else "val"
        (root / "images" / split).mkdir(parents=True, exist_ok=True)
        (root / "labels" / split).mkdir(parents=True, exist_ok=True)
        (root / "images" / split / f"{n:03d}.jpg").write_bytes(data)
        lines = "".join(f"{c} {' '.join(f'{v:.6f}' for v in box)}\n" for c, box in labels)
        (root / "labels" / split / f"{n:03d}.txt").write_text(lines)
    names = ", ".join(CLASSES)
    (root / "data.yaml").write_text(f"train: images/train\nval: images/val\nnames: [{names}]\n")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--imgsz", type=int)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--model", default="yolo11n", help="a model YAML's stem, e.g. yolo26n")
    parser.add_argument("overrides", nargs="*", help="Ultralytics train arguments, key=value")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="kestrel-demo-train-"))
    config = work / "config"
    os.environ.update(YOLO_OFFLINE="1", YOLO_AUTOINSTALL="0", YOLO_CONFIG_DIR=str(config))
    import django

    django.setup()
    from training.services.demo_model import DEMO_PARAMS, demo_val_found
    from training.ultralytics_env import fonts_install

    fonts_install(config)
    write_yolo(work / "data")
    from ultralytics import YOLO

    train_args = {
        "epochs": args.epochs or DEMO_PARAMS.epochs,
        "imgsz": args.imgsz or DEMO_PARAMS.imgsz,
        "batch": args.batch or DEMO_PARAMS.batch,
        "patience": DEMO_PARAMS.patience,
        "seed": DEMO_PARAMS.seed,
        "optimizer": DEMO_PARAMS.optimizer,
        **DEMO_PARAMS.extra_args,
    }
    for item in args.overrides:
        key, _, value = item.partition("=")
        train_args[key] = yaml.safe_load(value)
    print("train arguments:", " ".join(f"{k}={v}" for k, v in train_args.items()))
    start = time.perf_counter()
    YOLO(f"{args.model}.yaml").train(
        data=str(work / "data" / "data.yaml"),
        device="cpu",
        workers=0,
        amp=False,
        plots=False,
        verbose=False,
        project=str(work / "runs"),
        name="demo",
        **train_args,
    )
    wall = time.perf_counter() - start
    with (work / "runs" / "demo" / "results.csv").open() as f:
        rows = [{k.strip(): v for k, v in row.items()} for row in csv.DictReader(f)]
    for row in rows:
        print(
            f"epoch {int(float(row['epoch'])):3d}  {float(row['time']):6.1f} s  "
            f"mAP50 {float(row['metrics/mAP50(B)']):.3f}  "
            f"mAP50-95 {float(row['metrics/mAP50-95(B)']):.3f}"
        )
    best = max(float(r["metrics/mAP50(B)"]) for r in rows)
    print(f"wall time (build model → last validation)  {wall:.1f} s for {len(rows)} epochs")
    print(f"mAP50 last epoch {float(rows[-1]['metrics/mAP50(B)']):.3f}, best {best:.3f}")
    found, total = demo_val_found(work / "runs" / "demo" / "weights" / "best.pt")
    print(f"val shapes found with confidence > 0.5 (right class, IoU ≥ 0.5): {found} of {total}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
