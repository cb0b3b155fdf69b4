"""The per-pixel tasks in the evaluation worker (evaluations.val_worker): semantic segmentation
and depth. Their `val` scores pixels, not objects, so an image's errors are not counted by
matching predictions to labels: each image is scored on its own by the same metrics class val
scores the whole split with (Ultralytics' SemanticMetrics, DepthMetrics), on the very tensors
val passes it, and the images are ranked by that score. Imported by the worker only (torch is
imported inside the functions)."""

from pathlib import Path

PIXEL_TASKS = ("semantic", "depth")
# The arguments worth keeping: conf, iou and max_det mean nothing to a per-pixel model.
PIXEL_VAL_ARGS = ("batch", "imgsz", "rect")


def pixel_validator(base, found):
    """`base` (the task's validator) scoring each image on its own into `found.images` (by file
    name) as it goes, and drawing nothing."""

    class PixelScoring(base):
        def init_metrics(self, model) -> None:
            super().init_metrics(model)
            found.start(self, keys=PIXEL_VAL_ARGS)
            self.kestrel_files: list[str] = []
            whole = self.metrics.update_stats

            def update_stats(preds, targets) -> None:
                whole(preds, targets)
                for file, pred, target in zip(self.kestrel_files, preds, targets, strict=True):
                    # None: seen, but with nothing to score (still one of the images evaluated).
                    score = pixel_image_score(self.metrics, pred[None], target[None])
                    found.images[Path(file).name] = score

            self.metrics.update_stats = update_stats

        def update_metrics(self, preds, batch) -> None:
            # The files of the batch, in the order update_stats receives its images.
            self.kestrel_files = list(batch["im_file"])
            super().update_metrics(preds, batch)

        def plot_val_samples(self, *args, **kwargs) -> None:
            pass

        def plot_predictions(self, *args, **kwargs) -> None:
            pass

    return PixelScoring


def pixel_image_score(metrics, pred, target) -> dict | None:
    """One image scored as val scores the split, by a fresh metrics object of the same kind and
    settings; None for an image val scores nothing of (no valid pixel in its truth)."""
    if hasattr(metrics, "miou"):  # SemanticMetrics
        one = type(metrics)(names=metrics.names)
        one.update_stats(pred, target)
        if one.matrix is None or float(one.matrix.sum()) == 0:
            return None
        if one.nc == 1 and float(one.matrix[1].sum() + one.matrix[:, 1].sum()) == 0:
            # Binary: its IoU is the foreground's, and an image with none, and none found, is
            # right, not 0.
            return None
        one.process(plot=False)
        return {
            "iou": round(float(one.miou), 6),
            "pixel_acc": round(float(one.pixel_accuracy), 6),
            "pixels": int(one.matrix.sum()),
        }
    one = type(metrics)(
        min_depth=metrics.min_depth, max_depth=metrics.max_depth, align=metrics.align
    )
    one.update_stats(pred, target)
    if not one._count:  # fewer valid pixels than DepthMetrics scores an image on
        return None
    one.process()
    return {
        "abs_rel": round(float(one.abs_rel), 6),
        "rmse": round(float(one.rmse), 6),
        "delta1": round(float(one.delta1), 6),
    }


def pixel_per_class(metrics, names: list[str], task: str) -> list[dict]:
    """Semantic: per class present in the truth, its images and pixels, its IoU and its pixel
    accuracy (SemanticMetrics.class_result). Depth has no classes."""
    if task != "semantic":
        return []
    rows = []
    for i, c in enumerate(metrics.ap_class_index):
        iou, accuracy = metrics.class_result(i)
        rows.append(
            {
                "class": names[int(c)],
                "images": int(metrics.nt_per_image[int(c)]),
                "pixels": int(metrics.nt_per_class[int(c)]),
                "values": {"iou": float(iou), "pixel_acc": float(accuracy)},
            }
        )
    return rows


def pixel_confusion(metrics, limit: int) -> dict:
    """Semantic: the pixel confusion matrix val filled (rows predicted, columns true), under
    the names val gave its rows (a binary model has "background" first). Depth has none."""
    matrix = getattr(getattr(metrics, "confusion_matrix", None), "matrix", None)
    if matrix is None or len(matrix) > limit:
        return {}
    names = metrics.confusion_matrix.names
    labels = [str(names[i]) for i in sorted(names)] if isinstance(names, dict) else list(names)
    if len(labels) != len(matrix):
        return {}
    return {"names": labels, "matrix": [[int(v) for v in row] for row in matrix.tolist()]}


def pixel_worst(found: dict[str, dict | None], task: str, count: int) -> list[dict]:
    """The images scored worst on their own: lowest IoU (semantic), highest AbsRel (depth).
    A semantic image with every pixel right is not among them."""
    rows = [{"file": file, **score} for file, score in found.items() if score is not None]
    if task == "semantic":
        rows = [r for r in rows if r["iou"] < 1]
        rows.sort(key=lambda r: (r["iou"], r["pixel_acc"], r["file"]))
    else:
        rows.sort(key=lambda r: (-r["abs_rel"], r["delta1"], r["file"]))
    return rows[:count]
