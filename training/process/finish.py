"""The end of an attempt (training.process.supervisor): finished (its model made from the
inspected best.pt), stopped, cancelled, failed (saying whether Resume can help; Kestrel's own
failures refunded) or lost (resumed from its last stored checkpoint, or failed after too many).
Each end is written in one transaction that still holds the lease, or not at all."""

import logging
import math
import os
import shutil
import tempfile
from pathlib import Path

import redis
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.storage import storage_get_file
from training.metering import refund_platform_failure
from training.models import AttemptEnd, EpochMetric, FailureKind, JobState, TrainingAttempt
from training.process.checkpoints import WeightsRefused
from training.process.events import FENCED
from training.process.lease import LeaseGone
from training.run_files import BEST_WEIGHTS, RUN_NAME
from training.services.jobs import job_locked, job_lost, job_transition
from training.services.models import model_from_job
from training.streams import beat_key, control_key, kept_key, progress_key, stream_key

logger = logging.getLogger(__name__)


class Finish:
    """The Supervisor's endings."""

    def _end_attempt(self, reason: str, message: str = "", *, at=None) -> None:
        TrainingAttempt.objects.filter(pk=self.attempt.pk, ended_at__isnull=True).update(
            ended_at=at or timezone.now(), end_reason=reason, message=message[:2000]
        )

    def _cleanup(self) -> None:
        try:
            self.redis.delete(
                stream_key(self.job.pk),
                control_key(self.job.pk),
                progress_key(self.job.pk),
                beat_key(self.job.pk),
                kept_key(self.job.pk),
            )
        except redis.RedisError:
            logger.warning("job %s: could not remove its Redis keys", self.job.pk)

    def _fail(
        self,
        message: str,
        *,
        platform: bool = False,
        kind: str = FailureKind.CRASH,
        drop_checkpoints: bool = False,
    ) -> None:
        """End as failed, saying what kind of failure it was (whether Resume can help). A
        failure on Kestrel's side (not the data, arguments or weights) gives back every credit
        the job spent. `drop_checkpoints`: the job's stored checkpoints go too (its weights
        were refused)."""
        kind = FailureKind.PLATFORM if platform else kind
        now = self._billed_until(timezone.now())  # its trainer's last work
        try:
            with self._fenced():
                self._meter_end(now)
                self._end_attempt(AttemptEnd.FAILED, message, at=now)
                if drop_checkpoints:
                    self._checkpoints_drop()
                if self._transition(JobState.FAILED, error=message, failure_kind=kind) and platform:
                    refund_platform_failure(self.job, message)
        except LeaseGone:
            return
        self._cleanup()

    def _finish(self) -> None:
        if self.lost_lease:  # the reaper ended the attempt and another owns the job
            logger.warning(
                "job %s: attempt %s ended without its lease", self.job.pk, self.attempt.number
            )
            return
        if self.refused:  # a trainer that writes such files is not resumed
            self._fail(self.refused, kind=FailureKind.WEIGHTS, drop_checkpoints=True)
            return
        if self.redis_gone:  # resumed from its last stored checkpoint, as any lost attempt
            self._lost(self.redis_gone)
            return
        if self.hung is not None:
            self._lost(self._hung_message(), until=self._billed_until(timezone.now()))
            return
        code = self.provider.exit_code(self.handle)
        if self.provider_failure and self.outcome.done is None and not self.outcome.error:
            # Never reached training (no machine, a failed set-up): Kestrel's side, so every
            # credit held or spent is given back.
            self._fail(self.provider_failure, platform=True)
            return
        if self.canceling:
            now = self._billed_until(timezone.now())  # its trainer's last work
            try:
                with self._fenced():
                    self._meter_end(now)
                    self._end_attempt(AttemptEnd.CANCELED, at=now)
                    self._transition(JobState.CANCELED)
            except LeaseGone:
                return
            self._cleanup()
            self._remove_workdir()
            return
        if code == 0 and self.outcome.done is not None:
            self._succeed(stopped=self.outcome.done.stopped)
            return
        if code == 1 and self.outcome.error:
            kind = self.outcome.error_kind or FailureKind.CRASH
            self._fail(_readable_error(self.outcome.error), kind=kind)
            return
        if code == FENCED:
            self._lost("Another attempt owns the job.")
            return
        how = f"killed by signal {-code}" if code and code < 0 else f"exit status {code}"
        self._lost(f"The trainer process ended unexpectedly ({how}).")

    def _hung_message(self) -> str:
        return (
            f"No progress from the trainer for {math.ceil(self.hung.silent)} s while "
            f"{self.hung_phase} (its pace allowed {self.hung.allowance:.0f} s); it was stopped."
        )

    def _lost(self, message: str, *, until=None) -> None:
        """The attempt is lost (its trainer died, hung, or Redis was gone too long): end it at
        `until` (its last sign of work) and resume the job, or fail it after too many. The
        attempt says where the run goes on from, when it does."""
        until = until or self._billed_until(timezone.now())
        try:
            with self._fenced():
                self._meter_end(until)
                job = job_locked(self.job.pk)
                job_lost(job, message)
                if job.state == JobState.QUEUED:
                    epoch = job.checkpoint_epoch
                    where = f"restarts from epoch {epoch}" if epoch else "restarts from the start"
                    if epoch and epoch >= job.epochs:
                        where = "is finished from its stored checkpoint"
                    message = f"{message.rstrip('.')}; the run {where}."
                self._end_attempt(AttemptEnd.LOST, message, at=until)
        except LeaseGone:
            return
        self._cleanup()

    def _succeed(self, *, stopped: bool) -> None:
        end = self.outcome.train_end
        with tempfile.TemporaryDirectory(prefix="kestrel-weights-") as tmp:
            best = None  # the run's final weights, once they passed inspection
            if end is not None and end.best and not self.refused:
                parts = ("jobs", str(self.job.pk), RUN_NAME, *BEST_WEIGHTS)
                try:
                    best = self._inspected_copy(parts, Path(tmp))
                except OSError as e:
                    logger.warning("job %s: weights/best.pt not taken: %s", self.job.pk, e)
                except WeightsRefused as e:
                    self._weights_refused(
                        f"Training finished, but its final weights were refused and deleted: "
                        f"{e}. No model was made from them, and the run's checkpoints were "
                        "deleted too."
                    )
            if self.refused:
                self._fail(self.refused, kind=FailureKind.WEIGHTS, drop_checkpoints=True)
                return
            now = self._billed_until(timezone.now())  # its trainer's last work
            try:
                with self._fenced():
                    self._meter_end(now)
                    job = job_locked(self.job.pk)
                    model = None
                    if best is not None:
                        try:
                            # A savepoint: no model row is left without its stored weights.
                            with transaction.atomic(), open(best, "rb") as f:
                                model = model_from_job(
                                    job=job,
                                    best=f,
                                    names=end.names,
                                    metrics=self.outcome.final_metrics,
                                )
                        except OSError as e:
                            logger.warning("job %s: weights/best.pt not stored: %s", job.pk, e)
                            self._model_not_stored(job, e, now)
                            self.job = job
                            return
                    state = JobState.STOPPED if stopped else JobState.SUCCEEDED
                    error = "" if model else "Stopped before the first epoch."
                    if stopped and job.error:  # why it was stopped (credits, budget) stays
                        error = job.error
                    job_transition(job, state, error=error)
                    # in the same transaction: no reader sees the job ended and its attempt open
                    self._end_attempt(
                        AttemptEnd.STOPPED if stopped else AttemptEnd.FINISHED, at=now
                    )
                    self.job = job
            except LeaseGone:
                return
        self._cleanup()
        if not stopped:
            self._remove_workdir()

    def _model_not_stored(self, job, error: OSError, now) -> None:
        """In the fence: training ended, but storage could not take its model (a full disk).
        The job is stopped saying so, never "succeeded" without a model; Resume then makes the
        model from the stored checkpoint (every epoch's stored) or trains on from it. A stop
        already asked for with its reason (checkpoints that could not be stored) keeps it."""
        if job.state == JobState.STOPPING and job.error:
            message = job.error
        else:
            reason = (os.strerror(error.errno) if error.errno else str(error)).lower()
            kept = job.checkpoint_epoch
            if kept and kept >= job.epochs:
                then = f"its model is made from the stored checkpoint of epoch {kept}"
            else:
                then = f"it goes on from epoch {kept}" if kept else "it trains from the start"
            message = (
                f"Training finished, but its model could not be stored ({reason}). Free "
                f"space, then Resume: {then}."
            )
        job_transition(job, JobState.STOPPED, error=message)
        self._end_attempt(AttemptEnd.STOPPED, message, at=now)

    def _trained_to_the_end(self) -> bool:
        """Every epoch was trained and its checkpoint stored, but the attempt that trained them
        ended before its final validation (its trainer or worker lost at that moment)."""
        job = self.job
        return bool(
            job.checkpoint_epoch
            and job.checkpoint_epoch >= job.epochs
            and job.inspected_weights.get("last.pt") == job.checkpoint_key
        )

    def _finish_from_checkpoint(self) -> None:
        """Ultralytics refuses to resume a run that trained all its epochs ("nothing to
        resume"), so this attempt starts no machine and no trainer: the job's model is made
        from its best stored checkpoint (its last when none was kept as best), inspected again
        for its class names and epoch, with that epoch's validation metrics. Nothing is billed:
        no machine ran."""
        job = self.job
        kept = job.inspected_weights
        if kept.get("best.pt (training)") == job.best_key:
            name, key = "best.pt (training)", job.best_key
        else:
            name, key = "last.pt", job.checkpoint_key
        with tempfile.TemporaryDirectory(prefix="kestrel-weights-") as tmp:
            path = Path(tmp) / "checkpoint.pt"
            try:
                storage_get_file(key, path)
            except OSError as e:
                self._fail(
                    f"Every epoch was trained, but its stored checkpoint could not be read "
                    f"({e.strerror or e}); Resume tries again.",
                    platform=True,
                )
                return
            answer = self.inspector.inspect(
                path,
                name,
                keep_alive=self._inspection_keep_alive,
                every=settings.TRAINING_HEARTBEAT_SECONDS,
            )
            if self.lost_lease:
                return
            result = answer.result or {}
            if answer.error or not result.get("class_names"):
                self._fail(
                    f"Every epoch was trained, but its stored {name} could not be inspected: "
                    f"{answer.error or 'it names no classes'}",
                    platform=True,
                )
                return
            epoch = result.get("epoch") if isinstance(result.get("epoch"), int) else None
            row = EpochMetric.objects.filter(job=job, epoch=epoch or job.checkpoint_epoch).first()
            metrics = {
                k: v
                for k, v in (row.values if row else job.latest_metrics).items()
                if not k.startswith(("train/", "lr/"))
            }
            said = f"epoch {epoch}'s" if epoch else "the last stored"
            message = (
                f"All {job.epochs} epochs were trained, but the attempt that trained them ended "
                f"before its final validation; the model is {said} checkpoint, with that "
                "epoch's validation metrics. No machine was started."
            )
            try:
                with self._fenced():
                    self._meter_end(timezone.now())
                    job = job_locked(job.pk)
                    with open(path, "rb") as f:
                        model_from_job(
                            job=job, best=f, names=result["class_names"], metrics=metrics
                        )
                    job_transition(job, JobState.SUCCEEDED, error="", final_metrics=metrics)
                    self._end_attempt(AttemptEnd.FINISHED, message)
                    self.job = job
            except LeaseGone:
                return
        logger.info("job %s: %s", job.pk, message)
        self._cleanup()

    def _remove_workdir(self) -> None:
        shutil.rmtree(self._workdir(), ignore_errors=True)


def _readable_error(message: str) -> str:
    """Ultralytics' exception text, with a hint where the cause is a common one."""
    low = message.lower()
    if "out of memory" in low:
        return f"The GPU ran out of memory; lower the batch or image size. ({message[:300]})"
    if "unpickl" in low or "weights_only" in low or "invalid load key" in low:
        return (
            f"The weights file could not be loaded; it is not a valid YOLO model. ({message[:300]})"
        )
    return message
