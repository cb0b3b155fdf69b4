"""Training fixtures: real images from ../shared/datasets, real Celery workers on this suite's
training queue, and a helper to wait for a job's state."""

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import settings

from datasets.services.datasets import dataset_create
from datasets.services.ingest import dataset_import_path
from datasets.services.versions import version_create
from tests.servers import subprocess_database_url
from training.models import GpuType, TrainingJob
from training.services.catalog import gpu_catalog_seed
from workspaces.models import Project
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


@pytest.fixture
def gpu_local(db) -> GpuType:
    gpu_catalog_seed()
    return GpuType.objects.get(slug="local")


@pytest.fixture
def project(team) -> Project:
    return Project.objects.create(workspace=team.workspace, name="Detector", created_by=team.owner)


@pytest.fixture
def detect_version(team, tmp_path):
    folder = single_class_copy(SHARED / "coco8", tmp_path / "coco8-one")
    return version_of(
        user=team.owner, workspace=team.workspace, folder=folder, task="detect", name="coco8"
    )


class Workers:
    """Celery workers on this suite's training queue, each its own process group."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []
        self.env = {
            **os.environ,
            "DATABASE_URL": subprocess_database_url(),
            "DJANGO_SETTINGS_MODULE": "config.test_settings",
        }

    def start(self) -> subprocess.Popen:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "config",
                "worker",
                "-Q",
                settings.TRAINING_QUEUE,
                "--pool",
                "solo",
                "--loglevel",
                "WARNING",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
            ],
            cwd=ROOT,
            env=self.env,
            start_new_session=True,
        )
        self.procs.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen) -> None:
        """kill -9 the worker process alone (its trainer must die with it)."""
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=30)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture
def workers(transactional_db):
    w = Workers()
    yield w
    w.stop_all()


def wait_for(predicate, *, timeout: float = 180, every: float = 0.3, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


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
