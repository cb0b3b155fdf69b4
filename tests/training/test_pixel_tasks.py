"""Semantic segmentation and depth through training: the form and the arguments offer YOLO26's
-sem and -depth models (not YOLO11's, which Ultralytics does not have), the data checks refuse
a version without maps, a real job on a Celery worker trains each task on tiny drawn data
(tests/pixel_data.py) and stores its epochs' mIoU or δ1, and its model loads under the
restricted loader and heads its page with that metric."""

import html
import io
import re
import zipfile

import pytest
from django.core.files.storage import default_storage
from django.urls import reverse
from django.utils import timezone

from core.errors import ServiceError
from tests.pixel_data import IMGSZ, SEMANTIC_CLASSES, pixel_version_create, trained_weights_publish
from tests.training.helpers import wait_state
from training import remote, selectors
from training.models import AttemptEnd, EpochMetric, JobState, TrainedModel, TrainingAttempt
from training.services.arguments import (
    TrainParams,
    pretrained_weights_find,
    train_params_validate,
)
from training.services.jobs import job_submit
from training.streams import training_redis
from training.trainer_events import events_token
from training.views.job_page import metric_groups


def _params(task: str, **kw) -> TrainParams:
    base = dict(
        task=task,
        model_family="yolo26",
        model_size="n",
        weights="scratch",
        epochs=2,
        imgsz=IMGSZ,
        batch=4,
        patience=100,
        optimizer="auto",
        seed=0,
        extra_args={"plots": False},
    )
    return TrainParams(**{**base, **kw})


def _submit(team, project, version, gpu, **kw):
    return job_submit(
        access=team.access("editor"),
        project=project,
        version=version,
        gpu_type_id=gpu.pk,
        params=_params(version.dataset.task, **kw),
    )


def _url(route: str, **kwargs) -> str:
    return reverse(route, kwargs={"ws_slug": "acme", **kwargs})


def _text(response) -> str:
    return html.unescape(response.content.decode())


# --- which models ------------------------------------------------------------------------------


@pytest.mark.parametrize("task", ["semantic", "depth"])
def test_yolo26_trains_each_pixel_task_and_yolo11_is_refused_in_words(task, settings, tmp_path):
    checked = train_params_validate(_params(task), train_images=6)
    assert checked.task == task
    with pytest.raises(ServiceError, match=f"YOLO11 has no {task} model in this Ultralytics"):
        train_params_validate(_params(task, model_family="yolo11"), train_images=6)

    settings.TRAINING_WEIGHTS_DIR = str(tmp_path)
    settings.TRAINING_ALLOW_DOWNLOADS = False
    suffix = "-sem" if task == "semantic" else "-depth"
    missing = pretrained_weights_find("yolo26", "s", task)
    assert missing.name == f"yolo26s{suffix}.pt" and not missing.available
    (tmp_path / f"yolo26s{suffix}.pt").write_bytes(b"weights")
    assert pretrained_weights_find("yolo26", "s", task).present
    # Downloads on, still no YOLO11 weights of a model Ultralytics cannot build.
    settings.TRAINING_ALLOW_DOWNLOADS = True
    none = pretrained_weights_find("yolo11", "n", task)
    assert not none.available
    assert none.note == f"this Ultralytics has no yolo11n{suffix} model: pick another model family"
    assert pretrained_weights_find("yolo26", "n", task).downloadable


def test_the_page_names_pixel_metrics_headline_first():
    values = {"metrics/pixel_acc": 0.9, "metrics/mIoU": 0.4, "val/sem_loss": 1.0}
    shown = metric_groups(values)
    assert [m["label"] for m in shown["quality"]] == ["mIoU", "Pixel accuracy"]
    depth = metric_groups({"metrics/rmse": 2.5, "metrics/abs_rel": 0.3, "metrics/delta1": 0.6})
    assert [(m["label"], m["what"]) for m in depth["quality"]] == [
        ("δ1", "within 1.25×"),
        ("AbsRel", "lower is better"),
        ("RMSE", "metres, lower is better"),
    ]


# --- the data checks before a start -------------------------------------------------------------


def _form(version, gpu, **overrides) -> dict:
    return {
        "dataset_version": version.pk,
        "task": "",
        "model_family": "yolo26",
        "model_size": "n",
        "weights": "scratch",
        "epochs": 2,
        "imgsz": IMGSZ,
        "batch": "auto",
        "patience": 100,
        "optimizer": "auto",
        "seed": 0,
        "gpu_type": gpu.pk,
        "extra_args": "",
        "start": "1",
        **overrides,
    }


@pytest.mark.django_db
def test_a_semantic_version_without_masks_is_refused_and_unmasked_images_are_a_warning(
    client, team, project, gpu_local
):
    access = team.access("editor")
    bare = pixel_version_create(access=access, task="semantic", train=0, val=0, unmasked=3)
    client.force_login(team.editor)
    refused = client.post(
        _url("job_create", pk=project.pk), _form(bare, gpu_local, train_anyway="1")
    )
    assert refused.status_code == 400
    assert "cannot be trained: No image of this version has a mask" in _text(refused)

    some = pixel_version_create(access=access, task="depth", train=2, val=1, unmasked=2)
    page = _text(client.get(_url("job_create", pk=project.pk), {"version": some.pk}))
    notes = re.search(r'data-testid="checks-notes">(.*?)</div>', page, re.S).group(1)
    assert "2 images of 5 have no depth map: training leaves them out." in notes  # a warning
    started = client.post(_url("job_create", pk=project.pk), _form(some, gpu_local))
    assert started.status_code == 302
    job = some.jobs.get()
    assert (job.task, job.model_name) == ("depth", "yolo26n-depth")


@pytest.mark.django_db
def test_a_remote_trainer_gets_the_masks_with_the_images(client, team, project, gpu_local):
    """The --remote trainer (SkyPilot's, the command provider's) downloads the version as
    the local provider writes it: masks/ beside images/, named alike."""
    version = pixel_version_create(access=team.access("editor"), task="semantic", train=2, val=1)
    job = _submit(team, project, version, gpu_local, batch=2)
    job.state, job.attempts = JobState.RUNNING, 1
    job.save(update_fields=["state", "attempts"])
    TrainingAttempt.objects.create(job=job, number=1, worker="w:1:a")
    spec = {"job_id": job.pk, "attempt": 1, "task": "semantic", "model": "yolo26n-sem.yaml"}
    spec |= {"train_args": {"epochs": 2, "data": "/srv/x/data.yaml"}}
    spec |= {"system_sample_seconds": 5, "spool_drain_seconds": 40}
    stored = remote.remote_spec_store(spec, base_url="https://k.example.com", subset=None)
    try:
        assert stored["dataset_entry"] == "data.yaml" and stored["task"] == "semantic"
        auth = {"HTTP_AUTHORIZATION": f"Bearer {events_token(job.pk, 1)}"}
        response = client.get(f"/api/v1/trainer/jobs/{job.pk}/dataset", **auth)
        assert response.status_code == 200
        archive = zipfile.ZipFile(io.BytesIO(b"".join(response.streaming_content)))
        names = set(archive.namelist())
        images = sorted(n for n in names if n.startswith("images/"))
        assert len(images) == 3
        for name in images:
            assert name.replace("images/", "masks/", 1) in names
        assert "masks_dir: masks" in archive.read("data.yaml").decode()
    finally:
        training_redis().delete(remote.spec_key(job.pk, 1))


# --- real jobs ---------------------------------------------------------------------------------


def _trains(team, project, gpu, workers, client, *, task: str, metric: str, label: str):
    version = pixel_version_create(access=team.access("editor"), task=task)
    job = _submit(team, project, version, gpu)
    workers.start()
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED)
    assert job.state == JobState.SUCCEEDED, job.error
    epochs = list(EpochMetric.objects.filter(job=job).order_by("epoch"))
    assert [m.epoch for m in epochs] == [1, 2]
    for row in epochs:
        assert 0.0 <= row.values[metric] <= 1.0, row.values
    assert metric in job.final_metrics and job.dropped_events == 0
    assert job.attempt_rows.get().end_reason == AttemptEnd.FINISHED
    best = max(row.values[metric] for row in epochs)
    listed = selectors.job_list(workspace=team.workspace).get(pk=job.pk)
    assert listed.best_metric == pytest.approx(best)  # the jobs table's column

    model = TrainedModel.objects.get(job=job)
    assert (model.task, model.architecture, model.imgsz) == (task, job.model_name, IMGSZ)
    with default_storage.open(model.weights_key, "rb") as f:
        weights = trained_weights_publish(task, f)  # the serving tests' model, this run
    _loads_restricted(weights, task)

    client.force_login(team.viewer)
    page = _text(client.get(_url("model_detail", pk=model.pk)))
    metrics = re.search(r'data-testid="model-metrics">(.*?)</section>', page, re.S).group(1)
    first = re.search(r'<th scope="row">(.*?)(?: <small|</th>)', metrics).group(1)
    assert first == label  # the headline
    job_page = _text(client.get(_url("job_detail", pk=job.pk)))
    assert f">{label}" in job_page
    return job, model


def _loads_restricted(weights, task: str) -> None:
    """As the model server and the exporter open it: the pre-check, then torch's restricted
    unpickler (this process's loads all go through it once set)."""
    from annotation.assist.predict import _ultralytics_env
    from training.weights_check import weights_check

    _ultralytics_env()
    weights_check(weights)
    import torch
    from ultralytics import YOLO

    checkpoint = torch.load(weights, weights_only=False)  # restricted all the same
    assert checkpoint["optimizer"] is None  # the stripped best.pt
    assert YOLO(str(weights)).task == task


@pytest.mark.django_db(transaction=True)
def test_a_semantic_job_trains_on_a_worker_and_reports_miou(
    team, project, gpu_local, workers, client
):
    job, model = _trains(
        team, project, gpu_local, workers, client, task="semantic", metric="metrics/mIoU",
        label="mIoU",
    )  # fmt: skip
    assert model.class_names == list(SEMANTIC_CLASSES)
    assert "metrics/pixel_acc" in job.latest_metrics
    # The results tab's per-class table is IoU per class, not a detector's columns.
    rows = job.results["per_class"]
    assert [row["class"] for row in rows] == list(SEMANTIC_CLASSES)
    assert all(0 <= row["IoU"] <= 1 and row["pixels"] >= 0 for row in rows)
    page = _text(client.get(_url("job_detail", pk=job.pk)))
    assert 'class="num">IoU</th>' in page and 'class="num">Pixels</th>' in page
    matrix = job.results.get("confusion_matrix")
    assert matrix is None or len(matrix["names"]) == len(matrix["matrix"])


@pytest.mark.same_on_any_database(
    "a depth job's rows are a semantic job's (run on both): this checks depth training and δ1"
)
@pytest.mark.django_db(transaction=True)
def test_a_depth_job_trains_on_a_worker_and_reports_delta1(
    team, project, gpu_local, workers, client
):
    job, model = _trains(
        team, project, gpu_local, workers, client, task="depth", metric="metrics/delta1",
        label="δ1",
    )  # fmt: skip
    assert "metrics/abs_rel" in job.latest_metrics and job.latest_metrics["metrics/abs_rel"] >= 0
    assert model.class_names == ["depth"]
    assert timezone.now() >= job.finished_at
