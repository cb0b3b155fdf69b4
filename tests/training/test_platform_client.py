"""Stock `yolo train` on "a person's own machine" (a subprocess, not under pytest or CI) reports
its run to Kestrel served live (tests/servers.py): the run is an external job with every
epoch's metrics, console lines and the final weights as a model, a second run of the same name
becomes run1-2, Stop in Kestrel ends a run at the next epoch, and resume=True continues the same
job. The protocol's edges are test_platform_webhooks.py's."""

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from tests.platform_client import client_env
from tests.servers import app_server
from training.models import EpochMetric, InspectState, JobKind, JobState, LogChunk, TrainingJob
from training.services.inspection import model_inspect_run
from workspaces.models import Project
from workspaces.services.keys import api_key_create

COCO8_YAML = Path("/work/shared/datasets/coco8/coco8.yaml")
if not COCO8_YAML.exists():  # the checkout's sibling, as the other training tests read it
    COCO8_YAML = Path(__file__).resolve().parents[3] / "shared/datasets/coco8/coco8.yaml"

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _client_env(home: Path, url: str, key: str) -> dict:
    """A person's machine (tests.platform_client), its runs and weights in `home`."""
    env = client_env(home / "config", ULTRALYTICS_PLATFORM_URL=url, ULTRALYTICS_API_KEY=key)
    return env


def _train_command(*args: str) -> list[str]:
    yolo = Path(sys.executable).parent / "yolo"
    return [
        str(yolo),
        "train",
        "model=yolo11n.yaml",
        f"data={COCO8_YAML}",
        "imgsz=64",
        "batch=4",
        "device=cpu",
        "amp=False",
        "workers=0",
        "project=acme/birds",
        *args,
    ]


def yolo_train(home: Path, url: str, key: str, *args: str, timeout: int = 600):
    home.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(  # noqa: S603 - the installed client
        _train_command(*args),
        cwd=home,
        env=_client_env(home, url, key),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


@pytest.fixture
def birds(team):
    return Project.objects.create(workspace=team.workspace, name="Birds", created_by=team.owner)


@pytest.fixture
def key(team):
    return api_key_create(access=team.access("admin"), name="laptop", scopes=["train"])[1]


def test_a_stock_run_is_an_external_job_with_its_model(tmp_path, team, birds, key):
    with app_server() as url:
        code, output = yolo_train(tmp_path / "one", url, key, "name=run1", "epochs=2")
        assert code == 0, output[-4000:]
        assert "Platform: Training will not be tracked" not in output, output[-4000:]
        job = TrainingJob.objects.get(project=birds, name="run1")
        assert "View model at" in output and f"/jobs/{job.pk}/" in output
        code, output = yolo_train(tmp_path / "two", url, key, "name=run1", "epochs=1")
        assert code == 0, output[-4000:]
    assert job.kind == JobKind.EXTERNAL and job.state == JobState.SUCCEEDED, job.error
    assert job.epochs_done == 2 and job.task == "detect"
    epochs = EpochMetric.objects.filter(job=job).order_by("epoch")
    assert [m.epoch for m in epochs] == [1, 2]
    assert all("metrics/mAP50(B)" in m.values and "val/box_loss" in m.values for m in epochs)
    assert "metrics/mAP50(B)" in job.final_metrics  # the final validation of best.pt
    lines = "\n".join(LogChunk.objects.filter(job=job).values_list("text", flat=True))
    assert "epochs completed" in lines
    assert "confusion_matrix" in job.results
    assert job.system_samples.exists()
    model = job.model
    assert model.inspect_state == InspectState.PENDING and model.weights_size > 0
    model_inspect_run(model_id=model.pk)  # what the inspection worker does
    model.refresh_from_db()
    assert model.inspect_state == InspectState.OK, model.inspect_error
    assert model.task == "detect" and len(model.class_names) == 80
    second = TrainingJob.objects.get(project=birds, name="run1-2")
    assert second.state == JobState.SUCCEEDED and second.epochs_done == 1
    assert f"/jobs/{second.pk}/" in output  # the client's link is the job it became


class Run:
    """`yolo ...` in the background, its output collected."""

    def __init__(self, command: list[str], home: Path, env: dict):
        self.proc = subprocess.Popen(  # noqa: S603 - the installed client
            command, cwd=home, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.proc.stdout))
        self.reader.start()

    def output(self) -> str:
        return "".join(self.lines)

    def wait(self, timeout: float) -> int:
        code = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return code


def _stop_after(run: Run, project, name: str, browser: Client, done_from: int) -> int:
    """Once the job has an epoch past `done_from`, press Stop on its page; the epochs done then."""
    deadline = time.monotonic() + 400
    job = None
    while time.monotonic() < deadline and run.proc.poll() is None:
        job = TrainingJob.objects.filter(project=project, name=name).first()
        if job and job.state == JobState.RUNNING and job.epochs_done > done_from:
            break
        time.sleep(0.3)
    assert job is not None and job.epochs_done > done_from, run.output()[-4000:]
    stop = reverse("job_stop", kwargs={"ws_slug": "acme", "pk": job.pk})
    assert browser.post(stop).status_code == 302
    return TrainingJob.objects.get(pk=job.pk).epochs_done


@pytest.mark.same_on_any_database(
    "the stock client's stop is what is tested; its rows are written as in "
    "test_a_stock_run_is_an_external_job_with_its_model, which runs on both"
)
def test_stop_in_kestrel_ends_the_run_at_the_next_epoch(tmp_path, team, birds, key):
    home = tmp_path / "lab"
    home.mkdir()
    browser = Client()
    browser.force_login(team.editor)
    epochs = 40
    with app_server() as url:
        run = Run(
            _train_command("name=long", f"epochs={epochs}"), home, _client_env(home, url, key)
        )
        stopped_at = _stop_after(run, birds, "long", browser, done_from=0)
        assert run.wait(timeout=400) == 0, run.output()[-4000:]
    assert "Training cancelled from Platform" in run.output(), run.output()[-4000:]
    job = TrainingJob.objects.get(project=birds, name="long")
    assert job.state == JobState.STOPPED, job.error
    # The epoch under way when Stop was pressed, and the one whose answer told it.
    assert stopped_at <= job.epochs_done <= stopped_at + 2 < epochs
    assert job.attempt_rows.get().end_reason == "stopped"
    assert job.model is not None  # a stopped run keeps its best weights, as Kestrel's do


@pytest.mark.same_on_any_database(
    "the stock client's resume is what is tested; its rows are written as in "
    "test_a_stock_run_is_an_external_job_with_its_model, which runs on both"
)
def test_resume_continues_the_same_job(tmp_path, team, birds, key):
    """A run whose process died (Ultralytics resumes only an interrupted run: a stopped one's
    last.pt is marked finished) goes on with resume=True as the same job, a second attempt."""
    home = tmp_path / "lab"
    home.mkdir()
    with app_server() as url:
        env = _client_env(home, url, key)
        run = Run(_train_command("name=crashy", "epochs=4"), home, env)
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline and run.proc.poll() is None:
            job = TrainingJob.objects.filter(project=birds, name="crashy").first()
            if job and job.epochs_done >= 2:
                break
            time.sleep(0.2)
        run.proc.kill()  # the machine went down
        run.wait(timeout=60)
        job = TrainingJob.objects.get(project=birds, name="crashy")
        assert job.state == JobState.RUNNING and 2 <= job.epochs_done < 4, run.output()[-4000:]
        last = next(home.rglob("crashy/weights/last.pt"))
        yolo = str(Path(sys.executable).parent / "yolo")
        # model= and data= again: the CLI's defaults (yolo26n.pt, coco8.yaml) would replace the
        # checkpoint's.
        command = [yolo, "train", f"resume={last}", f"model={last}", f"data={COCO8_YAML}"]
        resumed = Run(command, home, env)
        assert resumed.wait(timeout=400) == 0, resumed.output()[-4000:]
    job.refresh_from_db()
    assert TrainingJob.objects.filter(project=birds).count() == 1, resumed.output()[-4000:]
    assert job.state == JobState.SUCCEEDED and job.epochs_done == 4, job.error
    assert job.attempts == 2
    assert [a.end_reason for a in job.attempt_rows.all()] == ["lost", "finished"]
    assert sorted(EpochMetric.objects.filter(job=job).values_list("epoch", flat=True)) == [
        1,
        2,
        3,
        4,
    ]
    assert job.model is not None
