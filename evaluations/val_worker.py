"""The process that evaluates user weights: Ultralytics `val` on a folder Kestrel wrote, the
weights opened only through torch's restricted unpickler (as training.weights_worker opens
them, whose protocol it speaks). Web and Celery processes never import torch for this; they
start this module through training.weights_process.worker_run.

    python -m evaluations.val_worker <weights.pt> <data> <outdir> <options.json>

options.json: {"task", "class_names" (the model row's, which the weights must have; null for
depth, which has no classes), "imgsz", "batch", "name" (what an answer calls the weights)}. The
answer's result: the metrics val returned, the arguments it ran with, its per-class summary, the
confusion matrix, the precision-recall curves and the worst images (semantic segmentation and
depth: evaluations.val_pixels). Django is not imported here.
"""

import json
import sys
from pathlib import Path

from evaluations import val_pixels
from training.weights_check import checkpoint_loading_restrict, weights_check
from training.weights_worker import EXIT_FAILED, EXIT_USAGE, Reporter, _failure, _protocol_stream

WORST_IMAGES = 20
# A prediction counts for an image's false positives from this confidence on (Ultralytics'
# own default for predict), matched to the labels at IoU 0.5 as val matches them. val itself
# keeps everything above 0.001, which is right for mAP but would count noise as errors.
COUNT_CONF = 0.25
CURVE_POINTS = 101  # of the 1000 val computes, evenly, both ends included
CURVE_CLASSES = 100
MATRIX_CLASSES = 200  # past this the matrix is not kept (it grows as n²)


def _names(model) -> list[str]:
    names = model.names
    return [str(names[i]) for i in sorted(names)] if isinstance(names, dict) else list(names)


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


VAL_ARGS = ("conf", "iou", "batch", "imgsz", "max_det", "rect")


class Found:
    """What the validator saw: each image's errors by file name, and the arguments it ran with."""

    def __init__(self):
        self.images: dict[str, dict] = {}
        self.args: dict = {}

    def start(self, validator, keys: tuple[str, ...] = VAL_ARGS) -> None:
        self.images.clear()
        for key in keys:
            value = getattr(validator.args, key, None)
            if isinstance(value, bool | int | float | str):
                self.args[key] = value
        self.args["device"] = str(getattr(validator, "device", ""))


def _counting_validator(base, found: Found):
    """`base` (the task's validator) counting each image's errors into `found` as it goes, and
    drawing no figures: the numbers are kept, the plots are not needed."""
    import torch

    class Counting(base):
        def init_metrics(self, model) -> None:
            super().init_metrics(model)
            found.start(self)
            # plots=True is what makes val fill its confusion matrix; its drawings are skipped.
            self.confusion_matrix.plot = lambda *args, **kwargs: None
            process = getattr(self.metrics, "process", None)
            if process is not None and self.args.task != "classify":

                def unplotted(*args, **kwargs):
                    return process(*args, **{**kwargs, "plot": False})

                self.metrics.process = unplotted

        def plot_val_samples(self, *args, **kwargs) -> None:
            pass

        def plot_predictions(self, *args, **kwargs) -> None:
            pass

        def _process_batch(self, preds, batch):
            out = super()._process_batch(preds, batch)
            keep = preds["conf"] >= COUNT_CONF
            n = keep.shape[0]
            sure = {
                k: v[keep] if isinstance(v, torch.Tensor) and v.shape[:1] == (n,) else v
                for k, v in preds.items()
            }
            # Masks are what a segment model is judged on; boxes for the other tasks.
            column = "tp_m" if "tp_m" in out else "tp"
            matched = int(super()._process_batch(sure, batch)[column][:, 0].sum())
            labels = int(batch["cls"].shape[0])
            found.images[Path(batch["im_file"]).name] = {
                "tp": matched,
                "fp": int(keep.sum()) - matched,
                "fn": labels - matched,
                "labels": labels,
            }
            return out

    class CountingClassify(base):
        def init_metrics(self, model) -> None:
            super().init_metrics(model)
            found.start(self)
            self.confusion_matrix.plot = lambda *args, **kwargs: None
            self.kestrel_seen = 0

        def plot_val_samples(self, *args, **kwargs) -> None:
            pass

        def plot_predictions(self, *args, **kwargs) -> None:
            pass

        def get_dataloader(self, dataset_path, batch_size):
            # In file order (val's own shuffles), so the n-th prediction is the n-th file;
            # top-1, top-5 and the confusion matrix do not depend on the order.
            from ultralytics.data import build_dataloader

            dataset = self.build_dataset(dataset_path)
            if not dataset.samples:
                raise FileNotFoundError(f"No images from the model's classes in {dataset_path}")
            self.kestrel_files = [sample[0] for sample in dataset.samples]
            return build_dataloader(
                dataset, batch_size, self.args.workers, shuffle=False, rank=-1, device=self.device
            )

        def update_metrics(self, preds, batch) -> None:
            super().update_metrics(preds, batch)
            confidence, top1 = preds.max(1)
            for truth, guess, conf in zip(
                batch["cls"].tolist(), top1.tolist(), confidence.tolist(), strict=True
            ):
                name = Path(self.kestrel_files[self.kestrel_seen]).name
                self.kestrel_seen += 1
                found.images[name] = {
                    "true": int(truth),
                    "predicted": int(guess),
                    "confidence": conf,
                }

    return CountingClassify if base.__name__ == "ClassificationValidator" else Counting


def _per_class(metrics, names: list[str], task: str) -> list[dict]:
    """Per class: its images and objects, and val's figures for it under val's own keys
    (those of results_dict: box, and mask or pose)."""
    if task == "classify":
        # Ultralytics' classify summary is one row for all classes: per class, from the
        # matrix (rows predicted, columns true), the share of its images called right.
        matrix = metrics.confusion_matrix.matrix
        top1_key = metrics.keys[0]  # results_dict's key of top-1 accuracy
        rows = []
        for j, name in enumerate(names):
            images = int(matrix[:, j].sum())
            if images:
                top1 = float(matrix[j, j] / images)
                rows.append({"class": name, "images": images, "values": {top1_key: top1}})
        return rows
    return [
        {
            "class": names[int(c)],
            "images": int(metrics.nt_per_image[int(c)]),
            "instances": int(metrics.nt_per_class[int(c)]),
            "values": {
                key: _number(value)
                for key, value in zip(metrics.keys, metrics.class_result(i), strict=False)
            },
        }
        for i, c in enumerate(metrics.ap_class_index)
    ]


def _confusion(metrics, names: list[str]) -> dict:
    matrix = getattr(getattr(metrics, "confusion_matrix", None), "matrix", None)
    if matrix is None or len(matrix) > MATRIX_CLASSES + 1:
        return {}
    labels = list(names)
    if len(matrix) == len(names) + 1:  # detection-like: a row and column for "nothing"
        labels.append("background")
    return {"names": labels, "matrix": [[int(v) for v in row] for row in matrix.tolist()]}


def _thinned(values, kept: list[int]) -> list[float]:
    return [round(float(values[i]), 4) for i in kept]


def _curves(metrics, names: list[str]) -> list[dict]:
    """The precision-recall curves (box, and mask or pose), thinned: the mean over classes,
    which Ultralytics draws as "all classes", and the classes themselves."""
    out = []
    for curve_name, (x, y, x_label, y_label) in zip(
        getattr(metrics, "curves", []), getattr(metrics, "curves_results", []), strict=False
    ):
        if (x_label, y_label) != ("Recall", "Precision") or len(y) == 0:
            continue
        kept = [round(i * (len(x) - 1) / (CURVE_POINTS - 1)) for i in range(CURVE_POINTS)]
        per_class = {
            names[int(c)]: _thinned(y[i], kept)
            for i, c in enumerate(metrics.ap_class_index[:CURVE_CLASSES])
        }
        out.append(
            {
                "name": curve_name,
                "recall": _thinned(x, kept),
                "mean": _thinned(y.mean(0), kept),
                "classes": per_class,
            }
        )
    return out


def _worst(found: dict[str, dict], names: list[str], task: str) -> list[dict]:
    if task == "classify":
        wrong = [
            {
                "file": file,
                "true": names[v["true"]],
                "predicted": names[v["predicted"]],
                "confidence": round(v["confidence"], 4),
            }
            for file, v in found.items()
            if v["true"] != v["predicted"]
        ]
        return sorted(wrong, key=lambda r: (-r["confidence"], r["file"]))[:WORST_IMAGES]
    rows = [{"file": file, **v} for file, v in found.items() if v["fp"] + v["fn"]]
    rows.sort(key=lambda r: (-(r["fp"] + r["fn"]), -r["fn"], r["file"]))
    return rows[:WORST_IMAGES]


def evaluate(weights: Path, data: str, outdir: Path, options: dict, reporter: Reporter) -> dict:
    name = options.get("name") or None
    reporter.progress(5, "Checking what the weights file would run when loaded")
    checkpoint_loading_restrict()  # before Ultralytics is imported
    weights_check(weights, name=name)
    reporter.progress(15, "Loading the model")
    from ultralytics import YOLO

    model = YOLO(str(weights))
    if model.task != options["task"]:
        raise ValueError(f"the weights are a {model.task} model, not {options['task']}")
    names = _names(model)
    if options.get("class_names") is not None and names != list(options["class_names"]):
        raise ValueError("the weights' classes are not the ones Kestrel has for this model")
    found = Found()
    base = model.task_map[model.task]["validator"]
    pixels = model.task in val_pixels.PIXEL_TASKS
    validator = (
        val_pixels.pixel_validator(base, found) if pixels else _counting_validator(base, found)
    )
    reporter.progress(25, "Running val")
    metrics = model.val(
        validator=validator,
        data=data,
        split="val",
        imgsz=int(options["imgsz"]),
        batch=int(options.get("batch") or 16),
        project=str(outdir),
        name="val",
        exist_ok=True,
        # What fills the detection-like confusion matrix (its drawings are skipped); the
        # per-pixel tasks fill theirs without it.
        plots=not pixels,
        verbose=False,
    )
    reporter.progress(90, "Collecting the results")
    result = {
        "metrics": {k: _number(v) for k, v in metrics.results_dict.items() if k != "fitness"},
        "val_args": found.args,
        "images": len(found.images),
    }
    if pixels:
        return {
            **result,
            "per_class": val_pixels.pixel_per_class(metrics, names, model.task),
            "confusion": val_pixels.pixel_confusion(metrics, MATRIX_CLASSES),
            "curves": [],
            "worst": val_pixels.pixel_worst(found.images, model.task, WORST_IMAGES),
        }
    return {
        **result,
        "per_class": _per_class(metrics, names, model.task),
        "confusion": _confusion(metrics, names),
        "curves": _curves(metrics, names) if model.task != "classify" else [],
        "worst": _worst(found.images, names, model.task),
    }


def main(argv: list[str]) -> int:
    reporter = Reporter(_protocol_stream())
    if len(argv) != 4:
        reporter.send(error="usage: <weights.pt> <data> <outdir> <options.json>")
        return EXIT_USAGE
    weights = Path(argv[0])
    name = None
    try:
        options = json.loads(Path(argv[3]).read_text(encoding="utf-8"))
        name = options.get("name") or None
        result = evaluate(weights, argv[1], Path(argv[2]), options, reporter)
    except Exception as e:  # noqa: BLE001 - every failure becomes one readable answer
        reporter.send(error=_failure(e, weights, name))
        return EXIT_FAILED
    reporter.send(result=result)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
