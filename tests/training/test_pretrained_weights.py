"""Pretrained weights are offered only where this server can have them: in
TRAINING_WEIGHTS_DIR, or downloaded while the job prepares when TRAINING_ALLOW_DOWNLOADS is on.
The form, the submit and the supervisor ask the same function
(training.services.arguments.pretrained_weights_find), so a job never fails for a missing file
after it started, and a download that fails (the worker offline) ends the job at once, at its
preparation, with a reason and no Resume."""

import html
import json
import re
import shutil
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from core.errors import ServiceError
from tests.training.helpers import job_reload
from tests.training.weights_source import weights_source_down, weights_source_up  # noqa: F401
from training.models import AttemptEnd, FailureKind, JobState, LogChunk, TrainingJob
from training.process.supervisor import run_job
from training.services.arguments import TrainParams, pretrained_weights_find
from training.services.jobs import job_resume, job_submit

pytestmark = pytest.mark.django_db


def _url(route: str, **kwargs) -> str:
    return reverse(route, kwargs={"ws_slug": "acme", **kwargs})


def _form(version, gpu, **overrides) -> dict:
    return {
        "dataset_version": version.pk,
        "task": "",
        "model_family": "yolo11",
        "model_size": "n",
        "weights": "pretrained",
        "epochs": 1,
        "imgsz": 64,
        "batch": "2",
        "patience": 100,
        "optimizer": "auto",
        "seed": 0,
        "gpu_type": gpu.pk,
        "extra_args": "plots: false",
        "start": "1",
        **overrides,
    }


def _radio(page: str, value: str) -> str:
    match = re.search(rf'<input type="radio" name="weights" value="{value}"[^>]*>', page)
    assert match, f"no {value} choice on the page"
    return match.group(0)


def _note(page: str) -> str:
    match = re.search(r'<small [^>]*data-testid="pretrained-note"[^>]*>(.*?)</small>', page, re.S)
    assert match, "no pretrained note on the page"
    return html.unescape(match.group(1))


def _choices(page: str) -> dict:
    match = re.search(
        r'<script id="pretrained-choices" type="application/json">(.*?)</script>', page, re.S
    )
    assert match, "no pretrained choices on the page"
    return json.loads(match.group(1))


@pytest.fixture(scope="module")
def published_weights(tmp_path_factory) -> Path:
    """yolo11n.pt and yolo26n.pt as Ultralytics saves a model (built from its YAML here, as
    nothing is downloaded in this suite), in a folder of their own."""
    from ultralytics import YOLO

    folder = tmp_path_factory.mktemp("published-weights")
    for name in ("yolo11n", "yolo26n"):
        YOLO(f"{name}.yaml").save(folder / f"{name}.pt")
    return folder


@pytest.fixture
def weights_dir(settings, tmp_path) -> Path:
    """An empty TRAINING_WEIGHTS_DIR, downloads off (as config.test_settings has them)."""
    folder = tmp_path / "weights"
    settings.TRAINING_WEIGHTS_DIR = folder
    settings.TRAINING_ALLOW_DOWNLOADS = False
    return folder


# --- the form ------------------------------------------------------------------------------------


def test_absent_weights_with_downloads_off_are_shown_disabled_and_scratch_is_picked(
    client, team, project, detect_version, gpu_local, settings
):
    # Inside the project the folder is named as an operator wrote it (var/...).
    settings.TRAINING_WEIGHTS_DIR = Path(settings.BASE_DIR) / "var" / "no-weights-here"
    settings.TRAINING_ALLOW_DOWNLOADS = False
    client.force_login(team.editor)
    page = client.get(_url("job_create", pk=project.pk)).content.decode()

    assert "disabled" in _radio(page, "pretrained") and "checked" not in _radio(page, "pretrained")
    assert "checked" in _radio(page, "scratch")
    assert _note(page) == (
        "Pretrained: yolo26n.pt is not in var/no-weights-here/ and downloads are off "
        "(TRAINING_ALLOW_DOWNLOADS): train from scratch, or ask whoever runs this server to put "
        "yolo26n.pt there."
    )
    # What the page's script switches to when another model is picked: the same answer.
    choices = _choices(page)
    assert choices["weights"]["yolo11 s segment"]["available"] is False
    assert (
        "yolo11s-seg.pt is not in var/no-weights-here/"
        in choices["weights"]["yolo11 s segment"]["note"]
    )
    assert choices["version_tasks"] == {str(detect_version.pk): "detect"}


def test_asking_for_absent_weights_is_refused_on_the_form_and_no_job_is_made(
    client, team, project, detect_version, gpu_local, weights_dir
):
    client.force_login(team.editor)
    response = client.post(_url("job_create", pk=project.pk), _form(detect_version, gpu_local))

    assert response.status_code == 400
    page = response.content.decode()
    error = re.search(r'data-testid="weights-field".*?<p class="error">(.*?)</p>', page, re.S)
    assert html.unescape(error.group(1)) == (
        f"No pretrained weights: yolo11n.pt is not in {weights_dir}/ and downloads are off. "
        "Pick “From scratch”, or ask whoever runs this server to put the file there."
    )
    assert "disabled" in _radio(page, "pretrained")
    assert TrainingJob.objects.count() == 0


def test_weights_in_the_folder_are_offered_picked_and_accepted(
    client, team, project, detect_version, gpu_local, weights_dir, published_weights
):
    shutil.copytree(published_weights, weights_dir)
    client.force_login(team.editor)
    page = client.get(_url("job_create", pk=project.pk)).content.decode()

    assert "disabled" not in _radio(page, "pretrained") and "checked" in _radio(page, "pretrained")
    assert _note(page) == f"Pretrained: yolo26n.pt, from {weights_dir}/."
    assert _choices(page)["weights"]["yolo11 n detect"]["available"] is True
    assert _choices(page)["weights"]["yolo11 s detect"]["available"] is False  # not there

    response = client.post(_url("job_create", pk=project.pk), _form(detect_version, gpu_local))
    assert response.status_code == 302, html.unescape(response.content.decode())[:3000]
    job = TrainingJob.objects.get()
    assert job.weights == "pretrained" and job.model_name == "yolo11n"


def test_with_downloads_on_and_the_source_reached_the_form_picks_the_download(
    client,
    team,
    project,
    detect_version,
    gpu_local,
    weights_dir,
    weights_source_up,  # noqa: F811
):
    client.force_login(team.editor)
    page = client.get(_url("job_create", pk=project.pk)).content.decode()

    assert "disabled" not in _radio(page, "pretrained") and "checked" in _radio(page, "pretrained")
    note = html.unescape(_note(page))
    assert re.fullmatch(
        r"Pretrained: yolo26n\.pt is downloaded from 127\.0\.0\.1 when the job starts "
        r"\(the server reached 127\.0\.0\.1 at \d\d:\d\d\)\.",
        note,
    ), note
    assert _choices(page)["weights"]["yolo11 n detect"]["ready"] is True
    # Checked once: the next page reads the answer from the cache.
    client.get(_url("job_create", pk=project.pk))
    assert weights_source_up.heads == 1


def test_with_downloads_on_and_the_source_unreachable_the_form_picks_scratch_and_says_why(
    client,
    team,
    project,
    detect_version,
    gpu_local,
    weights_dir,
    weights_source_down,  # noqa: F811
):
    client.force_login(team.editor)
    page = client.get(_url("job_create", pk=project.pk)).content.decode()

    # Still offered (a person who knows the worker is online may pick it), not the default.
    assert "disabled" not in _radio(page, "pretrained") and "checked" not in _radio(
        page, "pretrained"
    )
    assert "checked" in _radio(page, "scratch")
    note = html.unescape(_note(page))
    assert re.fullmatch(
        r"Pretrained: yolo26n\.pt would be downloaded from 127\.0\.0\.1 when the job starts, "
        r"but the server could not reach 127\.0\.0\.1 at \d\d:\d\d \(connection refused\), "
        rf"so “From scratch” is the default: it needs nothing\. Put yolo26n\.pt in "
        rf"{re.escape(str(weights_dir))}/ to start from it\.",
        note,
    ), note
    assert _choices(page)["weights"]["yolo11 n detect"] == {
        "available": True,
        "ready": False,
        "note": _choices(page)["weights"]["yolo11 n detect"]["note"],
    }


def test_weights_in_ultralytics_own_folder_are_offered_and_trained_from(
    client, team, project, detect_version, gpu_local, weights_dir, tmp_path, monkeypatch
):
    """A checkpoint the server's own Ultralytics downloaded before (its settings' weights_dir)
    is offered first, and what the job would start from."""
    cached = tmp_path / "ultralytics-weights"
    cached.mkdir()
    (cached / "yolo26n.pt").write_bytes(b"the form only asks whether it is there")
    config = tmp_path / "yolo-config"
    (config / "Ultralytics").mkdir(parents=True)
    (config / "Ultralytics" / "settings.json").write_text(json.dumps({"weights_dir": str(cached)}))
    monkeypatch.setenv("YOLO_CONFIG_DIR", str(config))
    client.force_login(team.editor)
    page = client.get(_url("job_create", pk=project.pk)).content.decode()

    assert "checked" in _radio(page, "pretrained")
    assert _note(page) == f"Pretrained: yolo26n.pt, from {cached}/."
    found = pretrained_weights_find("yolo26", "n", "detect")
    assert found.present and found.path == cached / "yolo26n.pt"  # the supervisor's model


# --- the run -------------------------------------------------------------------------------------


def _submit(team, project, version, gpu) -> TrainingJob:
    params = TrainParams(
        task="detect",
        model_family="yolo11",
        model_size="n",
        weights="pretrained",
        epochs=1,
        imgsz=64,
        batch=2,
        extra_args={"plots": False},
    )
    return job_submit(
        access=team.access("editor"),
        project=project,
        version=version,
        gpu_type_id=gpu.pk,
        params=params,
    )


@pytest.mark.django_db(transaction=True)
def test_a_job_trains_from_the_weights_in_the_folder(
    team, project, detect_version, gpu_local, weights_dir, published_weights
):
    shutil.copytree(published_weights, weights_dir)
    job = _submit(team, project, detect_version, gpu_local)
    run_job(job.pk)

    job = job_reload(job)
    assert job.state == JobState.SUCCEEDED, job.error
    log = "\n".join(LogChunk.objects.filter(job=job).values_list("text", flat=True))
    # Ultralytics loaded the file and moved its layers into the model it trains.
    assert re.search(r"Transferred \d+/\d+ items from pretrained weights", log), log[-3000:]


@pytest.mark.django_db(transaction=True)
def test_an_offline_download_fails_the_job_at_preparation_without_resume(
    team, project, detect_version, gpu_local, weights_dir, settings, monkeypatch
):
    settings.TRAINING_ALLOW_DOWNLOADS = True
    # The edge of the world: this worker cannot reach the internet (a proxy nobody listens
    # on, and Ultralytics told it is offline), whatever the machine running the suite can.
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("YOLO_OFFLINE", "1")
    job = _submit(team, project, detect_version, gpu_local)  # the form cannot know: accepted
    run_job(job.pk)

    job = job_reload(job)
    assert job.state == JobState.FAILED and job.failure_kind == FailureKind.DOWNLOAD
    assert job.error.startswith(
        "Could not download the pretrained weights yolo11n.pt: Download failure for "
        "https://github.com/ultralytics/assets/releases/download/"
    ), job.error
    assert job.error.endswith(
        f"Put yolo11n.pt in {weights_dir}/, or train from scratch (the form offers a download "
        "only once the server has reached the source)."
    )
    assert ".." not in job.error, job.error  # Ultralytics' reason ends with its own full stop
    attempt = job.attempt_rows.get()
    assert attempt.end_reason == AttemptEnd.FAILED and attempt.pid is None  # no trainer ran
    assert not (weights_dir / "yolo11n.pt").exists()
    assert not LogChunk.objects.filter(job=job).exists()
    with pytest.raises(ServiceError) as refused:
        job_resume(access=team.access("editor"), job=job)
    assert str(refused.value) == (
        f"{job.title} cannot be resumed: its pretrained weights could not be downloaded, and "
        "that would fail again; start a new job once the file is on the server, or train from "
        "scratch."
    )
    assert job_reload(job).state == JobState.FAILED


def test_pretrained_fetch_refuses_a_name_ultralytics_does_not_publish(tmp_path):
    """The download process asks Ultralytics which names it publishes."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "training.pretrained_fetch", "yolo11q.pt", str(tmp_path)],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "kestrel-fetch: Ultralytics publishes no yolo11q.pt" in done.stdout
