"""The Ultralytics callbacks of the trainer: what training does, as events (train start, batch
progress, validation progress, epochs, checkpoints, the final validation and the results), and
the stop request and fence read between batches."""

import os
import shutil
import sys
import threading
import time
from pathlib import Path

from training.event_schema import MAX_CLASSES, MAX_MATRIX_CLASSES, PLOT_NAME_RE
from training.process.events import FENCED, Events

BATCH_EVENTS_PER_SECOND = 4
CONTROL_CHECK_SECONDS = 0.5


def _number(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if number == number and abs(number) != float("inf") else None


def _copy_atomic(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def _metrics(trainer) -> dict:
    values = {}
    try:
        values.update(trainer.label_loss_items(trainer.tloss, prefix="train"))
    except Exception as e:  # noqa: BLE001 - a task whose loss items differ: metrics only
        sys.__stderr__.write(f"kestrel: no loss items: {e}\n")
    values.update(trainer.metrics or {})
    values.update(getattr(trainer, "lr", None) or {})
    return {k: v for k, v in ((k, _number(v)) for k, v in values.items()) if v is not None}


class Callbacks:
    def __init__(self, spec: dict, events: Events):
        self.spec, self.events = spec, events
        self.ckpt_dir = Path(spec["checkpoint_dir"])
        self.ckpt_dir.mkdir(parents=True, exist_ok=True)
        self.stop_requested = False
        self.started = False  # Ultralytics built the model and loaders, and began training
        self.pending_checkpoint: dict | None = None
        self.in_epoch = False
        self.batch = 0
        self.epoch_seen = 0  # the epoch under way (its validation's, after it)
        self.first_batch = True
        self.last_batch_event = 0.0
        self.last_control = 0.0
        # A remote trainer's link for its files (training.process.remote_trainer).
        self.kestrel = None
        if spec.get("uploads"):
            from training.process.remote_trainer import Kestrel

            self.kestrel = Kestrel(spec["job_url"], spec["events_token"])
        self.silent_limit = float(spec.get("lease_seconds") or 0)

    def _uploaded(self, files: dict[str, Path]) -> bool:
        """A remote trainer's files stored in Kestrel (True at once for a local one, whose
        supervisor reads them from this machine)."""
        if self.kestrel is None:
            return True
        from training.process.remote_trainer import RemoteError

        for name, path in files.items():
            try:
                self.kestrel.upload(name, path)
            except (RemoteError, OSError) as e:
                print(f"Kestrel: {name} was not uploaded: {e}")
                return False
        return True

    def register(self, model) -> None:
        model.add_callback("on_train_start", self.on_train_start)
        model.add_callback("on_train_epoch_start", self.on_train_epoch_start)
        model.add_callback("on_train_batch_end", self.on_train_batch_end)
        model.add_callback("on_val_batch_end", self.on_val_batch_end)  # the validator's too
        model.add_callback("on_model_save", self.on_model_save)
        model.add_callback("on_fit_epoch_end", self.on_fit_epoch_end)
        model.add_callback("on_train_end", self.on_train_end)

    def _check_control(self, trainer) -> None:
        now = time.monotonic()
        if now - self.last_control < CONTROL_CHECK_SECONDS:
            return
        self.last_control = now
        silent = self.events.silent_for()
        if self.silent_limit and silent > self.silent_limit and not self.stop_requested:
            # Kestrel has given this attempt up by now: stop, keeping the checkpoint here; the
            # resume starts from the last one Kestrel stored.
            self.stop_requested = True
            trainer.stop = True
            print(f"Kestrel: not reachable for {silent:.0f} s; stopping this attempt.")
        fence, control = self.events.control()
        if fence is not None and fence != str(self.spec["attempt"]):
            sys.__stderr__.write("kestrel: another attempt owns this job; exiting\n")
            os._exit(FENCED)
        if control in ("stop", "cancel") and not self.stop_requested:
            self.stop_requested = True
            trainer.stop = True
            print("Kestrel: stop requested; finishing this batch, then validating and saving.")

    def on_train_start(self, trainer) -> None:
        self.started = True
        self.events.emit(
            "train_start",
            {
                "epochs": trainer.epochs,
                "start_epoch": trainer.start_epoch,
                "batches": len(trainer.train_loader),
                "device": str(trainer.device)[:200],
            },
        )

    def on_train_epoch_start(self, trainer) -> None:
        self.in_epoch = True
        self.batch = 0
        self.epoch_seen = trainer.epoch + 1

    def on_train_batch_end(self, trainer) -> None:
        self.batch += 1
        now = time.monotonic()
        # The epoch's last batch always: the supervisor then knows validation follows.
        last = self.batch >= len(trainer.train_loader)
        if self.first_batch or last or now - self.last_batch_event >= 1 / BATCH_EVENTS_PER_SECOND:
            loss = trainer.tloss
            self.events.emit(
                "batch",
                {
                    "epoch": trainer.epoch + 1,
                    "epochs": trainer.epochs,
                    "batch": self.batch,
                    "batches": len(trainer.train_loader),
                    "batch_size": trainer.batch_size,
                    "loss": [
                        _number(v) for v in (loss.tolist() if hasattr(loss, "tolist") else [loss])
                    ]
                    if loss is not None
                    else [],
                    "first": self.first_batch,
                },
            )
            self.first_batch = False
            self.last_batch_event = now
        self._check_control(trainer)

    def on_val_batch_end(self, validator) -> None:
        """Validation is progress too: a run stuck in it is told from one that validates."""
        now = time.monotonic()
        if now - self.last_batch_event < 1 / BATCH_EVENTS_PER_SECOND:
            return
        self.last_batch_event = now
        self.events.emit(
            "val_batch",
            {
                "epoch": self.epoch_seen,
                "batch": int(getattr(validator, "batch_i", 0)) + 1,
                "batches": len(validator.dataloader) if validator.dataloader is not None else 0,
            },
        )

    def on_model_save(self, trainer) -> None:
        # Copied now: the final evaluation strips the optimizer from last.pt, and resuming
        # needs it.
        epoch = trainer.epoch + 1
        last = self.ckpt_dir / f"last-{epoch}.pt"
        _copy_atomic(Path(trainer.last), last)
        best = None
        if Path(trainer.best).exists() and trainer.best_fitness == trainer.fitness:
            best = self.ckpt_dir / f"best-{epoch}.pt"
            _copy_atomic(Path(trainer.best), best)
        # Sent after the epoch's metrics (on_fit_epoch_end): a checkpoint never gets ahead of
        # the metrics stored for it, so a resume never skips an epoch's row.
        # Named by epoch: the supervisor finds the files itself in the checkpoint folder.
        self.pending_checkpoint = {"epoch": epoch, "best": best is not None}

    def on_fit_epoch_end(self, trainer) -> None:
        if self.in_epoch:
            self.in_epoch = False
            self.events.emit(
                "epoch",
                {
                    "epoch": trainer.epoch + 1,
                    "epochs": trainer.epochs,
                    "metrics": _metrics(trainer),
                    "seconds": _number(getattr(trainer, "epoch_time", None)),
                },
            )
            if self.pending_checkpoint:
                epoch = self.pending_checkpoint["epoch"]
                files = {f"last-{epoch}.pt": self.ckpt_dir / f"last-{epoch}.pt"}
                if self.pending_checkpoint["best"]:
                    files[f"best-{epoch}.pt"] = self.ckpt_dir / f"best-{epoch}.pt"
                if self._uploaded(files):  # a checkpoint's event only once Kestrel can take it
                    self.events.emit("checkpoint", self.pending_checkpoint)
                self.pending_checkpoint = None
            self._check_control(trainer)
        else:  # the final validation of best.pt
            metrics = {k: _number(v) for k, v in (trainer.metrics or {}).items()}
            self.events.emit(
                "final", {"metrics": {k: v for k, v in metrics.items() if v is not None}}
            )

    def on_train_end(self, trainer) -> None:
        _join_plotting_threads()  # Ultralytics draws validation images on threads of its own
        # Files by name only: the supervisor reads them from the run folder it set up.
        plots = sorted(
            p.name for p in Path(trainer.save_dir).iterdir() if PLOT_NAME_RE.match(p.name)
        )
        if self.kestrel is not None:
            save_dir = Path(trainer.save_dir)
            files = {name: save_dir / name for name in plots[:100]}
            files.update(
                {
                    name: path
                    for name, path in (
                        ("results.csv", save_dir / "results.csv"),
                        ("best.pt", Path(trainer.best)),
                    )
                    if path.is_file()
                }
            )
            self._uploaded(files)
        self.events.emit(
            "train_end",
            {
                "best": Path(trainer.best).exists(),
                "names": [str(n) for n in (trainer.data or {}).get("names", {}).values()],
                "plots": plots[:100],
                "results": _final_results(trainer),
            },
        )


def _join_plotting_threads(timeout: float = 30) -> None:
    """Wait for Ultralytics' non-daemon plotting threads: this process ends with os._exit,
    which would not wait for them, and their images are part of the results."""
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(timeout)


def _final_results(trainer) -> dict:
    """The final validation explained: per-class rows and the confusion matrix."""
    out: dict = {}
    validator = getattr(trainer, "validator", None)
    metrics = getattr(validator, "metrics", None)
    try:
        rows = metrics.summary() if metrics is not None else []
        out["per_class"] = [
            {str(k): (v[:200] if isinstance(v, str) else _number(v)) for k, v in row.items()}
            for row in rows[:MAX_CLASSES]
        ]
    except Exception as e:  # noqa: BLE001 - results are a nicety; the run has succeeded
        sys.__stderr__.write(f"kestrel: no per-class summary: {e}\n")
    matrix = getattr(validator, "confusion_matrix", None)
    try:
        # Past a few hundred classes the matrix is not drawn (nor sent: it grows as n²).
        if (
            matrix is not None
            and getattr(matrix, "matrix", None) is not None
            and len(matrix.matrix) <= MAX_MATRIX_CLASSES
        ):
            names = [str(n) for n in matrix.names.values()]
            # Detection-like tasks add a row and column for what matched no object; classify
            # and semantic matrices are the classes alone.
            if len(matrix.matrix) == len(names) + 1:
                names.append("background")
            out["confusion_matrix"] = {
                "names": names,
                "matrix": [[_number(v) or 0 for v in row] for row in matrix.matrix.tolist()],
            }
    except Exception as e:  # noqa: BLE001
        sys.__stderr__.write(f"kestrel: no confusion matrix: {e}\n")
    return out
