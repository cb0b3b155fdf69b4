"""What training tests share: real images from ../shared/datasets made trainable, a job
submitted the way the form does it, waiting for a job's state, and the live feed's events."""

import json
import shutil
import time
from pathlib import Path

from datasets.services.datasets import dataset_create
from datasets.services.ingest import dataset_import_path
from datasets.services.versions import version_create
from training.models import TrainingJob
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
