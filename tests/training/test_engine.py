"""The training engine end to end: real Celery workers, Redis streams, Ultralytics training of
yolo11n from its YAML at imgsz 64 on real images, PostgreSQL for everything that lasts."""

import pytest
from django.core.files.storage import default_storage

from tests.training.conftest import wait_state
from training.models import (
    AttemptEnd,
    EpochMetric,
    JobState,
    LogChunk,
    TrainedModel,
    TrainingJob,
)
from training.services.arguments import TrainParams
from training.services.jobs import job_submit
from workspaces.selectors import workspace_access_for_user

pytestmark = pytest.mark.django_db(transaction=True)


def submit(team, project, version, gpu, **overrides) -> TrainingJob:
    access = workspace_access_for_user(user=team.editor, slug=team.workspace.slug)
    params = TrainParams(
        task=version.dataset.task,
        model_family="yolo11",
        model_size="n",
        weights="scratch",
        epochs=overrides.pop("epochs", 2),
        imgsz=64,
        batch=overrides.pop("batch", 4),
        patience=100,
        optimizer="auto",
        seed=0,
        extra_args=overrides.pop("extra_args", {"plots": False}),
    )
    return job_submit(
        access=access, project=project, version=version, gpu_type_id=gpu.pk, params=params
    )


def test_a_job_trains_through_a_real_worker_and_makes_a_model(
    team, project, detect_version, gpu_local, workers
):
    job = submit(team, project, detect_version, gpu_local, extra_args={"plots": True})
    workers.start()
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED)
    assert job.state == JobState.SUCCEEDED, job.error
    assert job.device.startswith("CPU")  # what the page says is what it ran on
    epochs = list(EpochMetric.objects.filter(job=job).order_by("epoch"))
    assert [m.epoch for m in epochs] == [1, 2]
    assert "metrics/mAP50(B)" in epochs[-1].values and "train/box_loss" in epochs[-1].values
    assert job.epochs_done == 2 and job.checkpoint_epoch == 2
    assert job.first_batch_at is not None and job.first_batch_at >= job.started_at
    assert LogChunk.objects.filter(job=job).exists()
    assert "metrics/mAP50(B)" in job.final_metrics
    model = TrainedModel.objects.get(job=job)
    assert model.class_names == ["object"] and model.task == "detect" and model.imgsz == 64
    assert model.dataset_version_id == detect_version.pk
    assert default_storage.exists(model.weights_key) and model.weights_size > 100_000
    assert default_storage.exists(job.checkpoint_key)
    assert "results.png" in job.artifacts
    attempt = job.attempt_rows.get()
    assert attempt.end_reason == AttemptEnd.FINISHED and attempt.ended_at is not None
