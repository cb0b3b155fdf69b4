"""Faults of the trainer's own processes and of the disk checkpoints go to, made for real: a
trainer frozen with SIGSTOP (a dataloader deadlock, a stuck collective, a driver fault look the
same from outside), its supervisor frozen with it and thawed after the reaper gave the attempt
to another worker, and the media disk full (a tmpfs of the test's own) while checkpoints are
stored. Each ends with every epoch once and every second charged once, for work that was done."""

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.reliability.helpers import PRICE, assert_billed_once, freeze
from tests.training.helpers import (
    NEVER_HUNG,
    job_described,
    job_reload,
    submit,
    supervisor_caught_up,
    trainer_frozen_at_checkpoint,
    trainer_frozen_once_sent,
    wait_for,
    wait_state,
)
from training.metering import spent
from training.models import AttemptEnd, EpochMetric, JobState, TrainedModel, TrainingJob
from training.reaper import jobs_reap
from training.selectors import job_watch

pytestmark = pytest.mark.django_db(transaction=True)

# A trainer is hung past FACTOR times its longest gap between batches, at least FLOOR seconds:
# figures that a loaded test machine (three suites' workers on two cores) never reaches while it
# trains, and a frozen one soon does.
STALL_ENV = {
    "TRAINING_STALL_FLOOR_SECONDS": "20",
    "TRAINING_STALL_FACTOR": "10",
    "TRAINING_STALL_CEILING_SECONDS": "60",  # how long a loaded machine waits, at most
}


@pytest.fixture
def priced(gpu_local):
    gpu_local.hourly_price = PRICE
    gpu_local.save()
    return gpu_local


def _running_with_checkpoint(job: TrainingJob, epoch: int = 2) -> TrainingJob:
    return wait_for(
        lambda: (
            (j := job_reload(job)).state == JobState.RUNNING
            and (j.checkpoint_epoch or 0) >= epoch
            and j
        ),
        timeout=240,
        what=f"the epoch {epoch} checkpoint",
    )


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _assert_epochs_once(job: TrainingJob) -> None:
    history = list(EpochMetric.objects.filter(job=job).order_by("epoch"))
    assert [m.epoch for m in history] == list(range(1, job.epochs + 1))


@pytest.mark.same_on_any_database("the fault is a process's: the rows are written as elsewhere")
def test_a_hung_trainer_is_caught_killed_and_resumed_and_its_hang_is_not_billed(
    team, project, detect_version, priced, workers
):
    """Fault: SIGSTOP on the trainer process mid-run, left frozen. Before: the supervisor kept
    renewing its lease, the page said "Running" with no warning, and every frozen second was
    charged, for ever. Now: the page warns once the silence passes half of what the run's pace
    allows, the attempt ends as hung past it (its process group killed), the job resumes from
    its checkpoint, and billing stopped at the last progress and one heartbeat."""
    job = submit(team, project, detect_version, priced, epochs=10)
    workers.start(**STALL_ENV)
    # Frozen as soon as it has sent its epoch 2 checkpoint, however far its supervisor lags.
    first = trainer_frozen_once_sent(job, 2)
    frozen_at = timezone.now()
    supervisor_caught_up(job, first)
    warned = wait_for(
        lambda: "No progress from the trainer" in (w := job_watch(job_reload(job)))["text"] and w,
        timeout=120,
        what="the page's warning of a trainer gone quiet",
    )
    assert warned["late"] and "restarts the run from its epoch" in warned["text"]
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED, timeout=400)
    assert job.state == JobState.SUCCEEDED, job.error
    assert not _alive(first.pid)  # killed, not left frozen
    first.refresh_from_db()
    assert first.end_reason == AttemptEnd.LOST
    assert "No progress from the trainer for" in first.message
    assert "it was stopped; the run restarts from epoch" in first.message
    # Billed to its last progress (before the freeze) and one heartbeat, not to the kill.
    heartbeat = django_settings.TRAINING_HEARTBEAT_SECONDS
    frozen_for = (first.ended_at - first.started_at).total_seconds()
    assert first.billed_seconds <= (frozen_at - first.started_at).total_seconds() + heartbeat + 1
    assert abs(first.billed_seconds - frozen_for) < 1.0
    second = job.attempt_rows.get(number=2)
    assert second.end_reason == AttemptEnd.FINISHED and second.resumed_from_epoch
    assert first.ended_at <= second.started_at
    _assert_epochs_once(job)
    assert_billed_once(job)
    assert TrainedModel.objects.filter(job=job).exists()


def _inspector_of(worker) -> int:
    """The pid of the checkpoint inspector (`weights_worker serve`) a worker's supervisor runs."""
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().split(")")[-1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == worker.pid and b"training.weights_worker" in argv and b"serve" in argv:
            return int(entry.name)
    raise AssertionError("the supervisor runs no checkpoint inspector")


@pytest.mark.same_on_any_database("the fault is a process's: the rows are written as elsewhere")
def test_a_supervisor_held_up_by_an_inspection_does_not_take_its_trainer_for_hung(
    team, project, detect_version, priced, workers
):
    """Fault: a checkpoint's inspection takes longer than the run's pace allows the trainer to
    be silent (its inspector frozen here; on a loaded machine its first start, importing torch,
    took 20 s and more), while the trainer trains on. Before: back from the inspection, the
    supervisor measured the trainer's silence up to the last event it had read, took the
    trainer for hung and killed it (CI's failures of 2026-12-06). Now: progress sent meanwhile
    and not yet read is progress; the attempt goes on."""
    job = submit(team, project, detect_version, priced, epochs=300)  # stopped long before its end
    worker = workers.start(
        TRAINING_STALL_FLOOR_SECONDS="10",
        TRAINING_STALL_FACTOR="10",
        TRAINING_STALL_CEILING_SECONDS="30",
    )
    job = _running_with_checkpoint(job)
    inspector = _inspector_of(worker)
    os.kill(inspector, signal.SIGSTOP)  # the next checkpoint's inspection waits: 35 s > 30
    try:
        time.sleep(35)
    finally:
        os.kill(inspector, signal.SIGCONT)
    frozen_at = job_reload(job).checkpoint_epoch
    job = wait_for(
        lambda: ((j := job_reload(job)).checkpoint_epoch > frozen_at + 1 or not j.is_active) and j,
        timeout=120,
        what="checkpoints stored again after the inspection",
    )
    attempt = job.attempt_rows.get()  # one attempt: not ended as hung
    assert job.state == JobState.RUNNING and attempt.ended_at is None, attempt.message
    assert _alive(attempt.pid)
    from training.services.jobs import job_cancel
    from workspaces.selectors import workspace_access_for_user

    job_cancel(access=workspace_access_for_user(user=team.owner, slug=team.workspace.slug), job=job)
    wait_state(job, JobState.CANCELED, timeout=60)


def test_a_frozen_supervisor_thawed_after_its_attempt_was_reaped_writes_nothing(
    team, project, detect_version, priced, workers
):
    """Fault: SIGSTOP on the trainer and on the worker supervising it; the reaper ends attempt 1
    at its last heartbeat and another worker resumes the job; then SIGCONT. Before: the thawed
    supervisor charged attempt 1 again up to the thaw (overlapping attempt 2) and wrote its end
    time and message over the reaper's. Now: an attempt without its lease writes nothing."""
    job = submit(team, project, detect_version, priced, epochs=12)
    # The trainer is frozen first and its supervisor once it has caught up: never taken for
    # hung meanwhile, however long its inspections take on a loaded machine.
    old_worker = workers.start(**NEVER_HUNG)
    first = trainer_frozen_at_checkpoint(job, 2)
    freeze(old_worker.pid)
    try:
        wait_for(lambda: jobs_reap() > 0, timeout=30, every=0.5, what="the reaper")
        first.refresh_from_db()
        reaped = (first.ended_at, first.message, first.billed_seconds, first.end_reason)
        assert first.end_reason == AttemptEnd.LOST and "No heartbeat" in first.message
        epochs_at_reap = job_reload(job).epochs_done
        workers.start()
        wait_for(
            lambda: (
                (j := job_reload(job)).attempts == 2
                and j.state == JobState.RUNNING
                and j.epochs_done > epochs_at_reap
            ),
            timeout=240,
            what="attempt 2 training",
            describe=lambda: job_described(job),
        )
        spent_before = spent(job)
    finally:
        os.kill(old_worker.pid, signal.SIGCONT)
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED, timeout=400)
    assert job.state == JobState.SUCCEEDED, job.error
    first.refresh_from_db()
    assert (first.ended_at, first.message, first.billed_seconds, first.end_reason) == reaped
    second = job.attempt_rows.get(number=2)
    assert first.ended_at <= second.started_at  # never two at once, on the page or the bill
    assert spent(job) >= spent_before
    assert not EpochMetric.objects.filter(job=job, attempt=1, epoch__gt=epochs_at_reap).exists()
    _assert_epochs_once(job)
    assert_billed_once(job)


class SmallDisk:
    """A tmpfs of the test's own as the media folder: full when the test says so."""

    def __init__(self, root: Path, megabytes: int):
        if os.geteuid() != 0 or not shutil.which("mount"):
            pytest.skip("mounting a tmpfs needs root and mount(8)")
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(root)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        self.filler = root / "filler"

    def fill(self) -> None:
        """Every free byte taken by one file (written unbuffered: no flush fails at close)."""
        fd = os.open(self.filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for block in (1 << 20, 4096, 1):
                try:
                    while True:
                        os.write(fd, b"\0" * block)
                except OSError:
                    pass
        finally:
            os.close(fd)

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.root)], check=False)


@pytest.fixture
def small_disk(tmp_path, settings):
    """The media folder of this test (its dataset's images, its checkpoints) on a 192 MB tmpfs
    (a checkpoint is 26 MB); asked for before the dataset, so that its images are stored there."""
    disk = SmallDisk(tmp_path / "media", 192)
    settings.MEDIA_ROOT = disk.root
    storages = {**settings.STORAGES}
    storages["default"] = {
        **storages["default"],
        "OPTIONS": {**storages["default"].get("OPTIONS", {}), "location": str(disk.root)},
    }
    settings.STORAGES = storages
    yield disk
    disk.unmount()


@pytest.mark.same_on_any_database("the fault is the disk's: the rows are written as elsewhere")
def test_checkpoints_on_a_full_disk_are_said_stop_the_run_and_resume_when_space_is_back(
    small_disk, team, project, detect_version, priced, workers
):
    """Fault: the media disk fills while the run stores checkpoints. Before: each failed store
    was counted as a "dropped malformed message", nothing was said, and the run trained on with
    no checkpoint to resume from. Now: the page says which checkpoint was not stored and why;
    after three in a row the run stops with the reason, keeping the last stored one; with
    space back, Resume goes on from it and finishes every epoch once."""
    job = submit(team, project, detect_version, priced, epochs=10)
    workers.start(
        MEDIA_ROOT=str(small_disk.root), TRAINING_CHECKPOINT_STORE_FAILURES="3", **NEVER_HUNG
    )
    # The disk fills while the trainer is held after its epoch 2 checkpoint, once that is
    # stored: the epochs after it all meet the full disk, however far the supervisor lagged.
    first = trainer_frozen_at_checkpoint(job, 2)
    small_disk.fill()
    os.kill(first.pid, signal.SIGCONT)
    job = wait_state(job, JobState.STOPPED, JobState.SUCCEEDED, JobState.FAILED, timeout=300)
    assert job.state == JobState.STOPPED, job.error
    # Three failed stores in a row stop the run. A trainer that outran its supervisor (a loaded
    # machine) may end first: its model cannot be stored either, and it is stopped all the same,
    # saying so (before: "succeeded", with no model and "Stopped before the first epoch.").
    assert (
        "3 checkpoints in a row could not be stored (no space left on device)" in job.error
        or "Training finished, but its model could not be stored (no space left on device)"
        in job.error
    )
    assert not TrainedModel.objects.filter(job=job).exists()  # and no row without its weights
    kept = job.checkpoint_epoch
    assert f"Resume: it goes on from epoch {kept}" in job.error
    assert "not stored: no space left on device" in job.notice
    assert f"the last stored is epoch {kept}'s" in job.notice
    assert job.dropped_events == 0  # said as what it is, not as malformed events
    page = Client()
    page.force_login(team.owner)
    url = reverse("job_detail", args=[team.workspace.slug, job.pk])
    html = page.get(url).content.decode()
    assert "not stored: no space left on device" in html
    small_disk.free()
    from training.services.jobs import job_resume
    from workspaces.selectors import workspace_access_for_user

    access = workspace_access_for_user(user=team.owner, slug=team.workspace.slug)
    job_resume(access=access, job=job)
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED, timeout=400)
    assert job.state == JobState.SUCCEEDED, job.error
    assert job.notice == ""
    last = job.attempt_rows.order_by("number").last()
    assert last.resumed_from_epoch and last.resumed_from_epoch >= kept
    _assert_epochs_once(job)
    assert TrainedModel.objects.filter(job=job).exists()
    assert_billed_once(job)


@pytest.mark.same_on_any_database("the fault is the disk's: the rows are written as elsewhere")
def test_a_run_that_ends_on_a_full_disk_is_stopped_saying_its_model_was_not_stored(
    small_disk, team, project, detect_version, priced, workers
):
    """Fault: the media disk is full, and the run trains to its end (it stops on failed
    checkpoint stores only after many, here). Before: the job "succeeded" with no model and the
    message "Stopped before the first epoch.", a model row could be left without its weights,
    and nothing said to free space. Now: stopped, saying the model could not be stored and
    what Resume does; with space back, Resume trains and makes the model."""
    job = submit(team, project, detect_version, priced, epochs=2)
    small_disk.fill()  # its images are stored already; no checkpoint will be
    workers.start(MEDIA_ROOT=str(small_disk.root), TRAINING_CHECKPOINT_STORE_FAILURES="100")
    job = wait_state(job, JobState.STOPPED, JobState.SUCCEEDED, JobState.FAILED, timeout=300)
    assert job.state == JobState.STOPPED, job.error
    assert job.checkpoint_epoch is None and job.epochs_done == 2
    assert job.error == (
        "Training finished, but its model could not be stored (no space left on device). "
        "Free space, then Resume: it trains from the start."
    )
    assert "not stored: no space left on device" in job.notice
    assert not TrainedModel.objects.filter(job=job).exists()
    assert job.attempt_rows.get().end_reason == AttemptEnd.STOPPED
    small_disk.free()
    from training.services.jobs import job_resume
    from workspaces.selectors import workspace_access_for_user

    access = workspace_access_for_user(user=team.owner, slug=team.workspace.slug)
    job_resume(access=access, job=job)
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED, timeout=300)
    assert job.state == JobState.SUCCEEDED, job.error
    _assert_epochs_once(job)
    assert TrainedModel.objects.filter(job=job).exists()
    assert_billed_once(job)
