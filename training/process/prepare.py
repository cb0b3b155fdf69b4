"""The start of an attempt (training.process.supervisor): a machine from the job's provider,
the dataset version materialised, the starting weights (the job's checkpoint, a model of the
workspace, pretrained weights fetched now or a bare architecture), the trainer's spec, a fresh
stream, and the trainer started."""

import json
import time
from pathlib import Path

import redis
from django.conf import settings
from django.utils import timezone

from core.storage import storage_get_file
from training.models import JobState, TrainingAttempt, WeightsSource
from training.pretrained_fetch import pretrained_fetch
from training.process.lease import Fault
from training.process.watchdog import Watchdog
from training.providers import provider_for
from training.run_files import RUN_NAME
from training.services.arguments import model_yaml_name, pretrained_weights
from training.services.catalog import local_type_refresh
from training.services.jobs import QUICK_TEST_TRAIN_IMAGES, QUICK_TEST_VAL_IMAGES, lease_seconds
from training.services.materialise import dataset_materialise
from training.streams import control_key, fence_key, kept_key, stream_key
from training.ultralytics_env import ultralytics_env


class Start:
    """The Supervisor's start phase."""

    def _prepare_and_start(self) -> None:
        job = self.job
        self.provider = provider_for(job.gpu_type.provider)
        self.machine = self.provider.provision(job_id=job.pk, gpu_slug=job.gpu_type.slug)
        if self.machine.provider == "local":
            local_type_refresh()
        if not self._transition(JobState.PREPARING, device=self.machine.name):
            return
        workdir = self._workdir()
        attempt_dir = workdir / f"attempt-{self.attempt.number}"
        attempt_dir.mkdir(parents=True, exist_ok=True)
        subset = (QUICK_TEST_TRAIN_IMAGES, QUICK_TEST_VAL_IMAGES) if job.is_quick_test else None
        data = dataset_materialise(
            job.dataset_version, workdir=Path(self.machine.workdir), subset=subset
        )
        resume = None
        if job.checkpoint_epoch:
            resume = attempt_dir / "resume.pt"
            storage_get_file(job.checkpoint_key, resume)
        if job.weights == WeightsSource.MODEL and job.base_model is not None:
            model = attempt_dir / "base.pt"
            storage_get_file(job.base_model.weights_key, model)
            model = str(model)
        elif job.weights == WeightsSource.PRETRAINED:
            weights = pretrained_weights(job.model_family, job.model_size, job.task)
            if not weights.present:  # downloads are on: fetched now, or the job fails here
                pretrained_fetch(
                    weights,
                    workdir=attempt_dir / "download",
                    env=ultralytics_env(
                        Path(self.machine.workdir) / "ultralytics-config", offline=False
                    ),
                    keep_alive=self._lease_renew,
                    every=settings.TRAINING_HEARTBEAT_SECONDS,
                )
            model = str(weights.path)
        else:
            model = model_yaml_name(job.model_family, job.model_size, job.task)
        train_args = {
            **job.extra_args,
            "data": data,
            "epochs": job.epochs,
            "imgsz": job.imgsz,
            "batch": job.batch,
            "patience": job.patience,
            "optimizer": job.optimizer,
            "seed": job.seed,
            "device": self.machine.device,
            "project": str(workdir),
            "name": RUN_NAME,
            "exist_ok": True,
            "verbose": True,
        }
        if self.machine.device == "cpu":
            train_args.update(amp=False, workers=0)
        spec = {
            "job_id": job.pk,
            "attempt": self.attempt.number,
            "task": job.task,
            "model": model,
            "resume": str(resume) if resume else None,
            "train_args": train_args,
            "redis_url": settings.TRAINING_REDIS_URL,
            "stream": stream_key(job.pk),
            "control_key": control_key(job.pk),
            "kept_key": kept_key(job.pk),
            "fence_key": fence_key(job.pk),
            "checkpoint_dir": str(Path(self.machine.workdir, *self._checkpoint_parts())),
            "workdir": self.machine.workdir,
            "system_sample_seconds": max(1.0, settings.TRAINING_HEARTBEAT_SECONDS / 2),
            # At its end, the trainer waits this long for a Redis that is away: past the lease,
            # this supervisor has given the attempt up.
            "spool_drain_seconds": lease_seconds() + settings.TRAINING_HEARTBEAT_SECONDS,
            "env": ultralytics_env(
                Path(self.machine.workdir) / "ultralytics-config",
                offline=not settings.TRAINING_ALLOW_DOWNLOADS,
            ),
        }
        if settings.TRAINING_EVENTS_URL:  # the trainer reports over HTTP, not to Redis
            from training.trainer_events import events_token

            base = settings.TRAINING_EVENTS_URL.rstrip("/")
            spec["events_url"] = f"{base}/api/v1/trainer/jobs/{job.pk}/events"
            spec["events_token"] = events_token(job.pk, self.attempt.number)
            del spec["redis_url"]  # as on a machine that cannot reach it
            from training.remote import remote_spec_store

            # What a trainer on another machine fetches instead (python -m training.runner
            # --remote): URLs of this server where this spec has paths of this machine.
            remote_spec_store(spec, base_url=base, subset=subset)
        spec_path = attempt_dir / "spec.json"
        spec_path.write_text(json.dumps(spec, indent=1))
        # A fresh stream for this attempt; the fence tells any older trainer to stop.
        self._redis_waiting(self._stream_fresh)
        if self.lost_lease:
            return
        self.handle = self.provider.start(
            self.machine, spec_path=str(spec_path), log_path=str(attempt_dir / "trainer.log")
        )
        TrainingAttempt.objects.filter(pk=self.attempt.pk).update(
            pid=self.handle.pid, machine=self.machine.name, provider_ref=self.handle.ref
        )
        self.watchdog = Watchdog(
            floor=settings.TRAINING_STALL_FLOOR_SECONDS,
            ceiling=settings.TRAINING_STALL_CEILING_SECONDS,
            factor=settings.TRAINING_STALL_FACTOR,
            now=time.time(),
        )
        self.progress_at = timezone.now()
        # Its checkpoints' inspector imports torch while the trainer starts, not at the first
        # checkpoint: the supervisor's loop is never held up seconds by it mid-run.
        self.inspector.start()
        self._transition(JobState.RUNNING)

    def _stream_fresh(self) -> None:
        pipe = self.redis.pipeline()
        pipe.delete(stream_key(self.job.pk), control_key(self.job.pk), kept_key(self.job.pk))
        pipe.set(fence_key(self.job.pk), self.attempt.number, ex=7 * 24 * 3600)
        pipe.execute()

    def _redis_waiting(self, call) -> None:
        """`call()`, Redis faults waited out with back-off for up to the lease's length."""
        fault = Fault()
        while True:
            try:
                call()
                fault.clear(self.job.pk)
                return
            except redis.RedisError as e:
                if fault.redis(self.job.pk, e) > lease_seconds():
                    raise
                self._lease_renew()  # the reaper must not take a wait for a loss
                fault.wait(settings.TRAINING_HEARTBEAT_SECONDS)
