"""Train every task x family Kestrel trains, tiny, under the restricted loader, as a trainer does.

    python -m tests.training.checkpoint_matrix WORKDIR

Run as its own process, outside pytest (Ultralytics behaves differently under pytest), with
restricted loading set up first, as in `training.process.runner`: the training itself,
Ultralytics' final evaluation and `strip_optimizer`, and a resume all open checkpoints through
it. Each run is one epoch on CPU at imgsz 64; its last.pt is copied while it still holds the
optimizer (the final evaluation strips it). Writes WORKDIR/manifest.json.
"""

import json
import shutil
import sys
import time
from pathlib import Path

from training.weights_check import checkpoint_loading_restrict

SHARED = Path(__file__).resolve().parents[3] / "shared" / "datasets"
TASKS = {  # task -> (dataset, YAML suffix); None: tests/pixel_data.py draws it
    "detect": ("coco8", ""),
    "segment": ("coco8-seg", "-seg"),
    "classify": ("imagenet10", "-cls"),
    "pose": ("coco8-pose", "-pose"),
    "obb": ("dota8", "-obb"),
    "semantic": (None, "-sem"),
    "depth": (None, "-depth"),
}
FAMILIES = ("yolo26n", "yolo11n", "yolov8n")
TASK_FAMILIES = {"semantic": ("yolo26n",), "depth": ("yolo26n",)}  # only YOLO26 has them


def families(task: str) -> tuple[str, ...]:
    return TASK_FAMILIES.get(task, FAMILIES)


RESUMED = "yolo11n"  # the run that is interrupted after its first epoch and resumed


def _data(work: Path, folder: str | None, task: str) -> Path:
    if folder is None:
        from tests.pixel_data import pixel_folder_write

        return pixel_folder_write(work / "data" / task, task=task)
    copy = work / "data" / folder
    shutil.copytree(SHARED / folder, copy)  # Ultralytics writes label caches beside the labels
    if task == "classify":
        return copy
    data = copy / "data.yaml"
    data.write_text((copy / f"{folder}.yaml").read_text().replace("path: #", f"path: {copy} #", 1))
    return data


def _train(name: str, data: Path, work: Path, *, epochs: int = 1, stop_after: int = 0) -> dict:
    from ultralytics import YOLO

    keep = work / "keep" / name
    keep.mkdir(parents=True)
    model = YOLO(f"{name}.yaml")

    def on_model_save(trainer) -> None:
        shutil.copyfile(trainer.last, keep / "last-optimizer.pt")
        if stop_after and trainer.epoch + 1 >= stop_after:
            trainer.stop = True  # as a stopped job: its copy above is what resumes

    model.add_callback("on_model_save", on_model_save)
    started = time.perf_counter()
    model.train(
        data=str(data),
        epochs=epochs,
        imgsz=64,
        batch=4,
        workers=0,
        amp=False,
        device="cpu",
        project=str(work / "runs"),
        name=name,
        exist_ok=True,
        plots=False,
        val=False,
        seed=0,
        verbose=False,
    )
    weights = work / "runs" / name / "weights"
    return {
        "seconds": round(time.perf_counter() - started, 1),
        "last_optimizer": str(keep / "last-optimizer.pt"),
        "best": str(weights / "best.pt"),
    }


def _resume(checkpoint: Path) -> dict:
    """Continue from `checkpoint` as training.process.runner resumes a job."""
    from ultralytics import YOLO

    seen: dict = {"epochs": []}
    model = YOLO(str(checkpoint))
    model.add_callback("on_train_start", lambda t: seen.update(start_epoch=t.start_epoch))
    model.add_callback("on_train_epoch_end", lambda t: seen["epochs"].append(t.epoch + 1))
    model.train(resume=True, device="cpu", workers=0)
    seen["best"] = str(Path(model.trainer.best))
    return seen


def _dotted(entry) -> str:
    return entry[1] if isinstance(entry, tuple) else f"{entry.__module__}.{entry.__qualname__}"


def main(work: Path) -> None:
    checkpoint_loading_restrict()  # before Ultralytics is imported, as the trainer does
    import torch

    runs: dict = {}
    resume = None
    for task, (folder, suffix) in TASKS.items():
        data = _data(work, folder, task)
        for family in families(task):
            name = f"{family}{suffix}"
            if task == "detect" and family == RESUMED:
                runs[name] = _train(name, data, work, epochs=2, stop_after=1)
                resumable = work / "resumable.pt"
                shutil.copyfile(runs[name]["last_optimizer"], resumable)
                resume = _resume(resumable)
            else:
                runs[name] = _train(name, data, work)
            runs[name]["task"] = task
    # What this process let torch's unpickler call, after all of that (Ultralytics registers
    # more for a checkpoint that names more; none here may).
    safe = sorted(_dotted(entry) for entry in torch.serialization.get_safe_globals())
    manifest = {"runs": runs, "resume": resume, "safe_globals": safe}
    (work / "manifest.json").write_text(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
