"""What each event of an attempt's trainer writes (training.process.supervisor reads them,
training.process.follow calls these): epochs, console and system samples through the one writer
external runs use too (training.process.writer); the final metrics and results, with the run
folder's plots and results.csv collected by name. Each event is a model of
training.event_schema: files are named, never given by path."""

import logging

from django.db import transaction
from django.utils import timezone

from core.storage import storage_put
from datasets.models import Task
from training import event_schema as schema
from training.models import TrainingAttempt
from training.process.writer import console_write, epoch_write, progress_write, system_write
from training.run_files import MAX_PLOT_BYTES, MAX_RESULTS_CSV_BYTES, RESULTS_CSV

logger = logging.getLogger(__name__)

_MAIN_PREFIX = {"segment": "Mask", "pose": "Pose"}


class Handlers:
    """The Supervisor's handler of each kind of event but checkpoints
    (training.process.checkpoints)."""

    def _on_started(self, event: schema.Started, seq: int) -> None:
        """The trainer process is up (its pid is on the attempt already)."""

    def _on_train_start(self, event: schema.TrainStart, seq: int) -> None:
        """Ultralytics built the model and the loaders; batches follow. A resumed attempt says
        from which epoch it really goes on (the checkpoint's own): the stored file may be a
        newer one than the job's row names, when a worker was killed between storing last.pt
        and saving its epoch. The attempt records what the trainer does."""
        if self.attempt.resumed_from_epoch and event.start_epoch != self.attempt.resumed_from_epoch:
            self.attempt.resumed_from_epoch = event.start_epoch
            TrainingAttempt.objects.filter(pk=self.attempt.pk).update(
                resumed_from_epoch=event.start_epoch
            )

    def _on_batch(self, event: schema.Batch, seq: int) -> None:
        progress_write(self.job.pk, event, client=self.redis)
        if event.first and self.job.first_batch_at is None:
            self._save_job(first_batch_at=timezone.now())

    def _on_val_batch(self, event: schema.ValBatch, seq: int) -> None:
        """Validation goes on (training.process.watchdog reads it; nothing is stored)."""

    def _on_epoch(self, event: schema.Epoch, seq: int) -> None:
        with transaction.atomic():
            epoch_write(
                job_id=self.job.pk,
                attempt=self.attempt.number,
                epoch=event.epoch,
                metrics=event.metrics,
                seconds=event.seconds,
            )
            self._save_job(epochs_done=event.epoch, latest_metrics=event.metrics)

    def _on_log(self, event: schema.Log, seq: int) -> None:
        console_write(job_id=self.job.pk, attempt=self.attempt.number, seq=seq, lines=event.lines)

    def _on_system(self, event: schema.System, seq: int) -> None:
        values = event.model_dump(exclude_none=True)
        system_write(job_id=self.job.pk, attempt=self.attempt.number, seq=seq, values=values)

    def _on_final(self, event: schema.Final, seq: int) -> None:
        self.outcome.final_metrics = event.metrics
        self._save_job(final_metrics=event.metrics)

    def _on_train_end(self, event: schema.TrainEnd, seq: int) -> None:
        """The results, and the run folder's plots and results.csv by name; a name that is not
        a plain file of the run folder (missing, a link, too big) is skipped."""
        self.outcome.train_end = event
        artifacts = dict(self.job.artifacts)
        wanted = [(name, f"plots/{name}", MAX_PLOT_BYTES) for name in event.plots]
        wanted.append((RESULTS_CSV, RESULTS_CSV, MAX_RESULTS_CSV_BYTES))
        for name, key, max_bytes in wanted:
            key = f"training/jobs/{self.job.pk}/{key}"
            try:
                with self._run_file(name, max_bytes=max_bytes) as f:
                    storage_put(key, f, replace=True)
            except OSError as e:
                logger.warning("job %s: %s not collected: %s", self.job.pk, name, e)
                continue
            artifacts[name] = key
        results = _results(event.results.model_dump(), self.job.task)
        self._save_job(artifacts=artifacts, results=results)

    def _on_done(self, event: schema.Done, seq: int) -> None:
        self.outcome.done = event

    def _on_error(self, event: schema.Error, seq: int) -> None:
        self.outcome.error = event.message
        self.outcome.error_kind = event.kind or ""


def _results(raw: dict, task: str) -> dict:
    """The final validation as the results tab reads it: a per-class table with the task's
    main figures (mask for segment, pose for pose, box otherwise) and the confusion matrix."""
    prefix = _MAIN_PREFIX.get(task, "Box")
    rows = []
    for row in raw.get("per_class") or []:
        if not isinstance(row, dict) or "Class" not in row:
            continue
        if task == Task.SEMANTIC:
            # Ultralytics' semantic summary: images and pixels of the class, and its IoU.
            rows.append(
                {
                    "class": str(row["Class"]),
                    "images": row.get("Images"),
                    "pixels": row.get("Pixels"),
                    "IoU": row.get("IoU"),
                }
            )
            continue
        rows.append(
            {
                "class": str(row["Class"]),
                "images": row.get("Images"),
                "instances": row.get("Instances"),
                "precision": row.get(f"{prefix}-P", row.get("Box-P")),
                "recall": row.get(f"{prefix}-R", row.get("Box-R")),
                "mAP50": row.get("mAP50"),
                "mAP50-95": row.get("mAP50-95"),
            }
        )
    out: dict = {"per_class": rows, "per_class_raw": raw.get("per_class") or []}
    matrix = raw.get("confusion_matrix")
    if isinstance(matrix, dict) and isinstance(matrix.get("matrix"), list):
        out["confusion_matrix"] = {"names": matrix.get("names", []), "matrix": matrix["matrix"]}
    return out
