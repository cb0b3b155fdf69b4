"""The training engine end to end: real Celery workers, Redis streams, Ultralytics training of
yolo11n from its YAML at imgsz 64 on real images, PostgreSQL for everything that lasts."""

import os
import re
import signal

import pytest
from django.core.files.storage import default_storage

from core.errors import ServiceError
from tests.training.helpers import (
    NEVER_HUNG,
    job_reload,
    submit,
    trainer_frozen_at_checkpoint,
    wait_for,
    wait_state,
)
from training.models import (
    AttemptEnd,
    EpochMetric,
    JobState,
    LogChunk,
    TrainedModel,
    TrainingJob,
)
from training.reaper import jobs_reap
from training.services.arguments import TrainParams
from training.services.jobs import job_submit
from workspaces.selectors import workspace_access_for_user

pytestmark = pytest.mark.django_db(transaction=True)


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
    log = "\n".join(LogChunk.objects.filter(job=job).values_list("text", flat=True))
    assert "engine/trainer:" in log and "\x1b[" in log  # Ultralytics' own lines, in colour
    assert "metrics/mAP50(B)" in job.final_metrics
    model = TrainedModel.objects.get(job=job)
    assert model.class_names == ["object"] and model.task == "detect" and model.imgsz == 64
    assert model.dataset_version_id == detect_version.pk
    assert default_storage.exists(model.weights_key) and model.weights_size > 100_000
    assert default_storage.exists(job.checkpoint_key)
    assert "results.png" in job.artifacts
    assert any(name.startswith("val_batch0_pred") for name in job.artifacts)
    [row] = job.results["per_class"]  # the final validation, per class
    assert row["class"] == "object" and row["instances"] > 0 and row["mAP50"] is not None
    matrix = job.results["confusion_matrix"]
    assert matrix["names"] == ["object", "background"] and len(matrix["matrix"]) == 2
    assert job.dropped_events == 0
    attempt = job.attempt_rows.get()
    assert attempt.end_reason == AttemptEnd.FINISHED and attempt.ended_at is not None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (killed, not yet reaped by its parent) is not running.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _after_first_checkpoint(job):
    return wait_for(
        lambda: (j := job_reload(job)).checkpoint_epoch and j.state == JobState.RUNNING and j,
        what="the first checkpoint",
    )


def _assert_resumed_whole(job, epochs: int, attempts: int):
    assert job.state == JobState.SUCCEEDED, job.error
    history = list(EpochMetric.objects.filter(job=job).order_by("epoch"))
    assert [m.epoch for m in history] == list(range(1, epochs + 1))  # each epoch exactly once
    rows = list(job.attempt_rows.order_by("number"))
    assert len(rows) == attempts
    assert rows[0].end_reason == AttemptEnd.LOST and rows[-1].end_reason == AttemptEnd.FINISHED
    for earlier, later in zip(rows, rows[1:], strict=False):
        assert earlier.ended_at <= later.started_at  # never two at once
    assert rows[-1].resumed_from_epoch and rows[-1].resumed_from_epoch >= 1
    # The resumed attempt trained only the epochs after its checkpoint (none, when the loss
    # came after the final one: its model was then made from the checkpoint).
    resumed = rows[-1].resumed_from_epoch
    assert {m.attempt for m in history if m.epoch <= resumed} == {1}
    after = {m.attempt for m in history if m.epoch > resumed}
    assert after == ({attempts} if resumed < epochs else set())
    assert TrainedModel.objects.filter(job=job).exists()


@pytest.mark.same_on_any_database(
    "the fault is a process's: the lease and resume rows are written as in the tests that run on "
    "both (two workers, a held lease, a job lost three times)"
)
def test_killing_the_trainer_resumes_from_the_checkpoint(
    team, project, detect_version, gpu_local, workers
):
    # Killed mid-run however far its supervisor lags: frozen at its first checkpoint until the
    # supervisor has stored it, then killed (a kill after the final checkpoint ends with the
    # model made from it, test_a_run_lost_after_its_final_checkpoint...).
    job = submit(team, project, detect_version, gpu_local, epochs=10)
    workers.start(**NEVER_HUNG)
    pid = trainer_frozen_at_checkpoint(job).pid
    os.kill(pid, signal.SIGKILL)
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED, timeout=300)
    _assert_resumed_whole(job, 10, 2)
    assert "signal 9" in job.attempt_rows.get(number=1).message


@pytest.mark.same_on_any_database(
    "the fault is a process's: the lease and resume rows are written as in the tests that run on "
    "both (two workers, a held lease, a job lost three times)"
)
def test_killing_the_worker_is_reaped_and_resumed_by_another(
    team, project, detect_version, gpu_local, workers
):
    job = submit(team, project, detect_version, gpu_local, epochs=12)
    first = workers.start()
    job = _after_first_checkpoint(job)
    trainer = job.attempt_rows.get(number=1).pid
    workers.kill(first)
    wait_for(lambda: not _alive(trainer), timeout=20, what="the trainer to die with its worker")
    # The reaper acts once three heartbeats are missed (1 s each in tests).
    wait_for(lambda: jobs_reap() > 0, timeout=30, every=0.5, what="the reaper")
    assert job_reload(job).state == JobState.QUEUED
    workers.start()
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED, timeout=300)
    _assert_resumed_whole(job, 12, 2)
    assert "No heartbeat" in job.attempt_rows.get(number=1).message


def test_two_workers_get_the_same_job_and_only_one_runs_it(
    team, project, detect_version, gpu_local, workers
):
    from training.tasks import run_job

    job = submit(team, project, detect_version, gpu_local, epochs=2)
    run_job.delay(job.pk)  # a second message for the same job
    workers.start()
    workers.start()
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED)
    assert job.state == JobState.SUCCEEDED, job.error
    assert job.attempt_rows.count() == 1


def test_a_held_lease_turns_the_second_runner_away(team, project, detect_version, gpu_local):
    from datetime import timedelta

    from django.utils import timezone

    from training.process.supervisor import run_job

    job = submit(team, project, detect_version, gpu_local)
    TrainingJob.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING,
        lease_owner="other-host:1:abc",
        lease_until=timezone.now() + timedelta(minutes=1),
    )
    result = run_job(job.pk)
    assert "lease is held by other-host:1:abc" in result
    assert job.attempt_rows.count() == 0
    assert job_reload(job).state == JobState.RUNNING


@pytest.mark.same_on_any_database(
    "stop and resume are a process's signals and a checkpoint on disk: their rows are written as "
    "in the tests of tests/training/test_views.py, which run on both"
)
def test_stop_keeps_best_and_last_and_resume_finishes_the_run(
    team, project, detect_version, gpu_local, workers
):
    from training.services.jobs import job_resume, job_stop

    access = workspace_access_for_user(user=team.editor, slug=team.workspace.slug)
    job = submit(team, project, detect_version, gpu_local, epochs=10)
    workers.start(**NEVER_HUNG)
    # Stopped mid-run however far its supervisor lags: the trainer, frozen at its first
    # checkpoint while Stop is asked, reads the word at the end of the epoch it is in.
    trainer = trainer_frozen_at_checkpoint(job).pid
    try:
        job_stop(access=access, job=job_reload(job))
    finally:
        os.kill(trainer, signal.SIGCONT)
    job = wait_state(job, JobState.STOPPED, JobState.FAILED, JobState.SUCCEEDED)
    assert job.state == JobState.STOPPED, job.error
    assert 1 <= job.checkpoint_epoch < 10
    assert default_storage.exists(job.checkpoint_key) and default_storage.exists(job.best_key)
    model = TrainedModel.objects.get(job=job)
    assert default_storage.exists(model.weights_key)
    assert job.attempt_rows.get().end_reason == AttemptEnd.STOPPED

    stopped_at = job.checkpoint_epoch
    job_resume(access=access, job=job)
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED, timeout=300)
    assert job.state == JobState.SUCCEEDED, job.error
    assert [m.epoch for m in EpochMetric.objects.filter(job=job)] == list(range(1, 11))
    assert job.attempt_rows.get(number=2).resumed_from_epoch == stopped_at
    assert TrainedModel.objects.filter(job=job).count() == 1


@pytest.mark.same_on_any_database(
    "cancel is a process's signal: its rows are written as in tests/training/test_views.py, "
    "which runs on both"
)
def test_cancel_kills_the_trainer_at_once(team, project, detect_version, gpu_local, workers):
    from training.services.jobs import job_cancel

    access = workspace_access_for_user(user=team.editor, slug=team.workspace.slug)
    job = submit(team, project, detect_version, gpu_local, epochs=50)
    workers.start()
    job = _after_first_checkpoint(job)
    pid = job.attempt_rows.get().pid
    job_cancel(access=access, job=job)
    job = wait_state(job, JobState.CANCELED, timeout=30)
    assert not _alive(pid)
    assert not TrainedModel.objects.filter(job=job).exists()
    assert job.attempt_rows.get().end_reason == AttemptEnd.CANCELED
    assert job.epochs_done < 50


@pytest.mark.same_on_any_database(
    "a task's own training: the job's rows are a detect job's, tested on both above"
)
@pytest.mark.parametrize("task", ["segment", "classify"])
def test_segment_and_classify_jobs_train_too(task, team, project, gpu_local, workers, tmp_path):
    from tests.training.helpers import SHARED, single_class_copy, version_of

    if task == "segment":
        folder = single_class_copy(SHARED / "coco8-seg", tmp_path / "seg")
    else:
        folder = SHARED / "imagenet10"
    version = version_of(
        user=team.owner, workspace=team.workspace, folder=folder, task=task, name=task
    )
    job = submit(team, project, version, gpu_local, epochs=1)
    workers.start()
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED)
    assert job.state == JobState.SUCCEEDED, job.error
    metric = EpochMetric.objects.get(job=job, epoch=1).values
    key = "metrics/mAP50(M)" if task == "segment" else "metrics/accuracy_top1"
    assert key in metric
    model = TrainedModel.objects.get(job=job)
    assert model.task == task
    assert model.architecture == {"segment": "yolo11n-seg", "classify": "yolo11n-cls"}[task]
    if task == "classify":
        assert len(model.class_names) == 10


def _checkpoint_zip(pickled: bytes) -> bytes:
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("archive/data.pkl", pickled)
        zf.writestr("archive/version", "3\n")
    return out.getvalue()


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("kind", ["hostile", "unpicklable"])
def test_uploaded_weights_that_are_hostile_or_broken_fail_with_a_reason(
    kind, team, project, detect_version, gpu_local, workers, tmp_path
):
    import pickle

    from django.core.files.uploadedfile import SimpleUploadedFile

    from training.services.models import model_upload

    marker = tmp_path / "pwned"
    pickled = pickle.dumps(_Payload(marker), protocol=4) if kind == "hostile" else b"\x80\x04junk"
    access = workspace_access_for_user(user=team.editor, slug=team.workspace.slug)
    upload = SimpleUploadedFile("model.pt", _checkpoint_zip(pickled))
    base = model_upload(access=access, project=project, name="mine", task="detect", upload=upload)
    params = TrainParams(
        task="detect",
        model_family="yolo11",
        model_size="n",
        weights="model",
        epochs=1,
        imgsz=64,
        batch=2,
    )

    def submit_it():
        return job_submit(
            access=access,
            project=project,
            version=detect_version,
            gpu_type_id=gpu_local.pk,
            params=params,
            base_model=base,
        )

    # An upload is not trained from until a worker has inspected it...
    with pytest.raises(ServiceError, match="still being checked"):
        submit_it()
    # ...and should a row say "checked" anyway, the trainer checks the file again itself.
    TrainedModel.objects.filter(pk=base.pk).update(inspect_state="ok")
    base.refresh_from_db()
    job = submit_it()
    workers.start()
    job = wait_state(job, JobState.FAILED, JobState.SUCCEEDED)
    assert job.state == JobState.FAILED
    if kind == "hostile":
        assert "would call posix.system" in job.error and "not loaded" in job.error
    else:
        assert "pickle is damaged" in job.error
    assert not marker.exists()  # nothing in it ran, anywhere
    assert job.attempt_rows.get().end_reason == AttemptEnd.FAILED


def test_a_job_lost_three_times_fails_with_the_reason(team, project, detect_version, gpu_local):
    from datetime import timedelta

    from django.utils import timezone

    from training.models import TrainingAttempt

    job = submit(team, project, detect_version, gpu_local)
    long_ago = timezone.now() - timedelta(minutes=5)
    TrainingJob.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING,
        heartbeat_at=long_ago,
        lost_attempts=2,
        attempts=3,
        lease_owner="gone:1:x",
        lease_until=long_ago,
    )
    TrainingAttempt.objects.create(job=job, number=3, worker="gone:1:x")
    assert jobs_reap() == 1
    job = job_reload(job)
    assert job.state == JobState.FAILED and job.lost_attempts == 3
    assert "lost 3 times" in job.error and "No heartbeat from gone:1:x" in job.error
    attempt = job.attempt_rows.get()
    assert attempt.end_reason == AttemptEnd.LOST and attempt.ended_at == long_ago


def _lost_after_its_final_checkpoint(job, **fields):
    """What a run lost after its final epoch's checkpoint was stored, before its final
    validation, leaves: every epoch trained and its checkpoints stored, no model, no final
    metrics (its trainer or worker killed at that moment; a kill cannot be timed to land there
    every time, so the rows are set as _lost finds them)."""
    from datetime import timedelta

    from django.utils import timezone

    TrainedModel.objects.filter(job=job).delete()
    long_ago = timezone.now() - timedelta(minutes=5)
    fields = {"final_metrics": {}, "results": {}, "finished_at": None, "error": "", **fields}
    TrainingJob.objects.filter(pk=job.pk).update(heartbeat_at=long_ago, **fields)
    return job_reload(job)


def test_a_run_lost_after_its_final_checkpoint_is_finished_from_it_with_no_machine(
    team, project, detect_version, gpu_local, workers
):
    """Before: the next attempt resumed from the final checkpoint, Ultralytics refused it
    ("training to N epochs is finished, nothing to resume") and the job failed, every epoch
    trained and paid for. Now: the model is made from the stored best checkpoint, with that
    epoch's metrics, and no machine or trainer is started; so also by a person's Resume of a job
    that failed so before."""
    from training.models import TrainingAttempt
    from training.services.jobs import job_resume

    job = submit(team, project, detect_version, gpu_local, epochs=2)
    workers.start()
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED)
    assert job.state == JobState.SUCCEEDED and job.checkpoint_epoch == 2, job.error

    # The reaper finds the attempt lost (no heartbeat) and queues the job again.
    long_ago = job.finished_at
    job = _lost_after_its_final_checkpoint(
        job, state=JobState.RUNNING, attempts=2, lease_owner="gone:1:x", lease_until=long_ago
    )
    TrainingAttempt.objects.create(job=job, number=2, worker="gone:1:x")
    assert jobs_reap() == 1
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED, timeout=120)
    assert job.state == JobState.SUCCEEDED, job.error
    third = job.attempt_rows.get(number=3)
    assert third.end_reason == AttemptEnd.FINISHED and third.pid is None  # no trainer
    assert "No machine was started" in third.message and third.billed_seconds == 0
    model = TrainedModel.objects.get(job=job)
    assert model.class_names == ["object"] and model.task == "detect"
    assert default_storage.exists(model.weights_key)
    # The best checkpoint's own epoch (Ultralytics' ckpt["epoch"]), and that epoch's metrics.
    best = int(re.search(r"the model is epoch (\d+)'s checkpoint", third.message)[1])
    assert best in (1, 2)
    metrics = {
        k: v
        for k, v in job.epoch_metrics.get(epoch=best).values.items()
        if k.startswith("metrics/")
    }
    assert "metrics/mAP50-95(B)" in metrics
    assert {k: model.metrics[k] for k in metrics} == metrics  # the best epoch's, whole
    assert not any(k.startswith(("train/", "lr/")) for k in model.metrics)
    assert job.final_metrics == model.metrics
    assert [m.epoch for m in job.epoch_metrics.all()] == [1, 2]  # nothing trained again

    # A job that failed so before this (the trainer's "nothing to resume") can be resumed.
    access = workspace_access_for_user(user=team.editor, slug=team.workspace.slug)
    job = _lost_after_its_final_checkpoint(
        job,
        state=JobState.FAILED,
        failure_kind="start",
        error="training to 2 epochs is finished, nothing to resume.",
    )
    job_resume(access=access, job=job)
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED, timeout=120)
    assert job.state == JobState.SUCCEEDED, job.error
    assert job.attempt_rows.get(number=4).end_reason == AttemptEnd.FINISHED
    assert TrainedModel.objects.filter(job=job).count() == 1


def test_malformed_or_out_of_order_events_are_dropped_and_counted(
    team, project, detect_version, gpu_local
):
    import json as json_

    from training.process.supervisor import Supervisor, lease_take

    job = submit(team, project, detect_version, gpu_local)
    supervisor = Supervisor(lease_take(job.pk, "here:1:x"))

    def entry(seq, kind="log", data=None, attempt=1):
        payload = json_.dumps(data if data is not None else {"lines": [f"line {seq}"]})
        return {b"a": str(attempt).encode(), b"s": str(seq).encode(), b"t": kind.encode(),
                b"d": payload.encode()}  # fmt: skip

    supervisor._handle(entry(1))
    supervisor._handle(entry(3))
    supervisor._handle(entry(2))  # out of order
    supervisor._handle(entry(3))  # a repeat (sent again after a fault): ignored, not lost
    supervisor._handle({b"a": b"1", b"s": b"4", b"t": b"log", b"d": b"{not json"})
    supervisor._handle(entry(5, kind="rm -rf"))  # no such kind
    supervisor._handle(entry(6, kind="epoch", data={"no": "epoch"}))  # missing fields
    supervisor._handle(entry(7, attempt=0))  # an older attempt: ignored, not an error
    assert list(LogChunk.objects.filter(job=job).values_list("seq", flat=True)) == [1, 3]
    assert not EpochMetric.objects.filter(job=job).exists()
    assert job_reload(job).dropped_events == 4

    from django.test import Client

    client = Client()
    client.force_login(team.viewer)
    page = client.get(f"/w/acme/training/jobs/{job.pk}/").content.decode()
    assert "4 malformed or out-of-order messages from the trainer, not shown" in page
    assert "line 2" not in page
