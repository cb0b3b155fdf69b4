"""What training tests share: real images from ../shared/datasets made trainable, a job
submitted the way the form does it, waiting for a job's state, a trainer frozen at a checkpoint
of its own, and the live feed's events."""

import json
import os
import shutil
import signal
import time
from pathlib import Path

from datasets.services.datasets import dataset_create
from datasets.services.ingest import dataset_import_path
from datasets.services.versions import version_create
from training.models import TrainingAttempt, TrainingJob
from training.services.arguments import TrainParams
from training.services.jobs import job_submit
from training.streams import stream_key, training_redis
from workspaces.selectors import workspace_access_for_user

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "datasets"


def single_class_copy(source: Path, target: Path, name: str = "object") -> Path:
    """A YOLO folder of `source`'s images with every label turned into class 0: each class
    then has labels in both train and val, as a trainable version must."""
    for split in ("train", "val"):
        (target / "images" / split).mkdir(parents=True)
        (target / "labels" / split).mkdir(parents=True)
        for image in sorted((source / "images" / split).iterdir()):
            shutil.copyfile(image, target / "images" / split / image.name)
            label = source / "labels" / split / f"{image.stem}.txt"
            if label.exists():
                lines = [ln.split(" ", 1)[1] for ln in label.read_text().splitlines() if ln]
                text = "".join(f"0 {ln}\n" for ln in lines)
                (target / "labels" / split / f"{image.stem}.txt").write_text(text)
    (target / "data.yaml").write_text(f"train: images/train\nval: images/val\nnames: [{name}]\n")
    return target


def version_of(*, user, workspace, folder: Path, task: str, name: str):
    access = workspace_access_for_user(user=user, slug=workspace.slug)
    dataset = dataset_create(access=access, name=name, task=task)
    imp = dataset_import_path(access=access, dataset=dataset, path=folder)
    assert imp.status == "succeeded", imp.error
    return version_create(access=access, dataset=dataset, note="for training")


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


def wait_for(
    predicate,
    *,
    timeout: float = 180,
    every: float = 0.3,
    what: str = "condition",
    describe=None,
):
    """The predicate's first true value; on timeout, an error naming `what` and, where given,
    `describe()` (the state the wait ended in)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    found = f": {describe()}" if describe else ""
    raise AssertionError(f"timed out after {timeout} s waiting for {what}{found}")


def job_reload(job: TrainingJob) -> TrainingJob:
    return TrainingJob.objects.get(pk=job.pk)


# A trainer frozen on purpose before its supervisor is done with it: the supervisor's worker
# started with these must not end it as hung meanwhile.
NEVER_HUNG = {"TRAINING_STALL_FLOOR_SECONDS": "900", "TRAINING_STALL_CEILING_SECONDS": "900"}


def job_described(job: TrainingJob) -> str:
    """A job's state and attempts, for a wait that timed out."""
    job = job_reload(job)
    attempts = [
        (a.number, a.worker, a.ended_at, a.end_reason, a.message) for a in job.attempt_rows.all()
    ]
    return (
        f"state {job.state}, {job.epochs_done} epochs, checkpoint {job.checkpoint_epoch},"
        f" lease {job.lease_owner!r}, error {job.error!r}, attempts {attempts}"
    )


def trainer_sent(client, job: TrainingJob, kind: str) -> int:
    """The epoch of the last `kind` event ("epoch", "checkpoint") the trainer has sent to its
    stream, however far the supervisor lags (0 before its first)."""
    for _, fields in client.xrevrange(stream_key(job.pk), count=500):
        if fields.get(b"t") == kind.encode():
            return int(json.loads(fields[b"d"])["epoch"])
    return 0


def trainer_frozen_at_checkpoint(job: TrainingJob, epoch: int = 1) -> TrainingAttempt:
    """SIGSTOP on attempt 1's trainer once it has sent its epoch `epoch` checkpoint; returns
    the attempt once the supervisor has stored every checkpoint the trainer sent (its worker
    started with NEVER_HUNG). A fault made then lands mid-run however far the supervisor lags
    (it inspects each checkpoint before storing it, and stores a backlog at once): waiting for
    the stored checkpoint alone, the trainer had ended all 30 epochs before the second was
    stored (CI, 2026-12-07). The caller thaws or kills the trainer."""
    attempt = trainer_frozen_once_sent(job, epoch)
    supervisor_caught_up(job, attempt)
    return attempt


def trainer_frozen_once_sent(job: TrainingJob, epoch: int = 1) -> TrainingAttempt:
    """SIGSTOP on attempt 1's trainer once it has sent its epoch `epoch` checkpoint to its
    stream, whatever the supervisor has stored; the attempt."""
    client = training_redis()
    wait_for(
        lambda: trainer_sent(client, job, "checkpoint") >= epoch,
        timeout=240,
        what=f"the trainer's epoch {epoch} checkpoint",
        describe=lambda: job_described(job),
    )
    attempt = job.attempt_rows.get(number=1)
    os.kill(attempt.pid, signal.SIGSTOP)
    return attempt


def supervisor_caught_up(job: TrainingJob, attempt: TrainingAttempt) -> None:
    """Waits until the supervisor has stored every checkpoint the frozen trainer of `attempt`
    sent; thaws the trainer if it never does (not left frozen for the workers' teardown)."""
    time.sleep(0.2)  # what it had sent before it stopped is in the stream
    sent = trainer_sent(training_redis(), job, "checkpoint")
    try:
        wait_for(
            lambda: (job_reload(job).checkpoint_epoch or 0) >= sent,
            timeout=240,
            what=f"the supervisor to store checkpoint {sent}",
            describe=lambda: job_described(job),
        )
    except BaseException:
        try:
            os.kill(attempt.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass  # ended meanwhile
        raise


def wait_state(job: TrainingJob, *states: str, timeout: float = 240) -> TrainingJob:
    def check():
        fresh = job_reload(job)
        return fresh if fresh.state in states else None

    try:
        return wait_for(check, timeout=timeout, what=f"job {job.pk} to be {states}")
    except AssertionError:
        fresh = job_reload(job)
        logs = "\n".join(c.text for c in fresh.log_chunks.all())[-3000:]
        raise AssertionError(
            f"job {job.pk} is {fresh.state} ({fresh.error}) not {states}; log tail:\n{logs}"
        ) from None


def parse(text: str) -> list[dict]:
    events = []
    for block in text.strip().split("\n\n"):
        event = {}
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field in ("id", "event"):
                event[field] = value
            elif field == "data":
                event["data"] = json.loads(value)
        if event:
            events.append(event)
    return events


def emit(job, kind, data, seq, attempt=1):
    fields = {"j": str(job.pk), "a": str(attempt), "s": str(seq), "t": kind, "d": json.dumps(data)}
    return training_redis().xadd(stream_key(job.pk), fields).decode()
