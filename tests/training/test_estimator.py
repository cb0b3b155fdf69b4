"""The estimator: FLOPs measured by Ultralytics in a subprocess, time, cost and memory per
machine, the marks, calibration from finished jobs, the form's panel and the API."""

import html
import re
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.training.factories import job_row, small_version
from training import estimator
from training.estimator import (
    EstimateConfig,
    calibration_for,
    config_of_job,
    estimate,
    estimates_for,
    flops_measure,
    model_cost,
)
from training.models import GpuType, JobState
from training.services.catalog import gpu_catalog_seed
from training.services.version_cache import version_cache_forget
from workspaces.services.keys import api_key_create

pytestmark = pytest.mark.django_db


def _config(**overrides) -> EstimateConfig:
    values = {
        "task": "detect",
        "model_family": "yolo11",
        "model_size": "n",
        "imgsz": 640,
        "epochs": 100,
        "batch": 16,
        "train_images": 10_000,
        "val_images": 1_000,
    }
    return EstimateConfig(**{**values, **overrides})


@pytest.fixture
def catalog(skypilot_ready):
    gpu_catalog_seed()
    return {gpu.slug: gpu for gpu in GpuType.objects.all()}


# --- FLOPs -------------------------------------------------------------------------------------


def test_flops_of_yolo11n_match_ultralytics_published_figure():
    cost = flops_measure("yolo11n.yaml", 640)
    assert cost.gflops == pytest.approx(6.5, rel=0.10)  # docs.ultralytics.com/models/yolo11
    assert cost.params == pytest.approx(2.6e6, rel=0.05)


@pytest.mark.same_on_any_database(
    "the model's FLOPs are what is tested; the cache row is written as in the other estimator tests"
)
def test_flops_scale_with_the_square_of_the_image_size():
    at_640 = flops_measure("yolo11s.yaml", 640)
    for imgsz in (320, 1280):
        measured = flops_measure("yolo11s.yaml", imgsz).gflops
        assert at_640.forward_gflops(imgsz) == pytest.approx(measured, rel=0.06)


def test_a_cached_model_cost_runs_no_subprocess():
    key = estimator._flops_key("yolo11n-pose.yaml", 640)
    cache.delete(key)
    version_cache_forget(key)
    estimator._flops_memory.pop(key, None)
    before = estimator.flops_measurements
    first = model_cost("yolo11", "n", "pose")
    assert estimator.flops_measurements == before + 1
    estimator._flops_memory.clear()  # another process: only the shared cache has it
    assert model_cost("yolo11", "n", "pose") == first
    assert model_cost("yolo11", "n", "pose") == first
    # Redis emptied (restarted, flushed): this machine's disk still has the figure.
    cache.delete(key)
    estimator._flops_memory.clear()
    assert model_cost("yolo11", "n", "pose") == first
    assert cache.get(key) is not None  # and the shared cache has it again
    assert estimator.flops_measurements == before + 1


def test_ultralytics_configuration_outlives_an_emptied_cache(monkeypatch):
    """The probe (a subprocess of seconds) runs once per Ultralytics on a machine: after the
    shared cache is emptied, its answer comes from this machine's disk."""
    from training.services import arguments

    arguments.ultralytics_config.cache_clear()
    cache.clear()
    arguments.ultralytics_config()  # the probe, or the disk's copy of an earlier one
    arguments.ultralytics_config.cache_clear()
    cache.clear()
    runs = []
    monkeypatch.setattr(arguments, "ultralytics_probe_run", lambda: runs.append(1) or {})
    assert arguments.ultralytics_config().version  # read from the disk
    assert runs == []


# --- one machine -------------------------------------------------------------------------------


def test_memory_fit_depends_on_batch_and_card(catalog):
    big = _config(model_size="x", imgsz=1280, batch=32)
    small_card = estimate(big, catalog["rtx-2000-ada"])
    assert not small_card.fits_in_memory
    assert small_card.vram_needed_gb > 16
    assert "more than its 16 GB" in small_card.explanation
    assert estimate(big, catalog["b200"]).fits_in_memory
    assert estimate(_config(batch=16), catalog["rtx-2000-ada"]).fits_in_memory
    auto = estimate(_config(model_size="x", imgsz=1280, batch=-1), catalog["rtx-2000-ada"])
    assert auto.fits_in_memory and "“auto”" in auto.explanation and "so it fits" in auto.explanation


def test_nano_at_640_waits_on_data_and_x_at_1280_on_compute(catalog):
    h100 = catalog["h100-80gb"]
    nano = estimate(_config(), h100)
    assert nano.bottleneck == "data loading"
    assert nano.explanation.startswith(
        "A nano model at 640 px is limited by data loading: a faster GPU saves little."
    )
    x = estimate(_config(model_size="x", imgsz=1280), h100)
    assert x.bottleneck == "compute"
    assert "limited by the GPU's compute" in x.explanation
    assert x.seconds > 3 * nano.seconds
    # A short job is mostly the machine starting.
    short = estimate(_config(epochs=1, train_images=50, val_images=10), h100)
    assert short.bottleneck == "start-up"
    # Data-bound: a card 20× slower takes about as long; compute-bound: far longer.
    slow = catalog["rtx-2000-ada"]
    assert estimate(_config(), slow).seconds == pytest.approx(nano.seconds, rel=0.1)
    assert estimate(_config(model_size="x", imgsz=1280, batch=-1), slow).seconds > 5 * x.seconds


def test_cost_is_time_times_price_in_microcredits(catalog):
    gpu = catalog["l40s"]
    e = estimate(_config(), gpu)
    assert e.credits == int(round(e.seconds) * gpu.hourly_price / 3600 * 1_000_000)
    assert e.seconds_low < e.seconds < e.seconds_high
    assert estimate(_config(), catalog["local"]).credits == 0


def test_marks_cheapest_fastest_and_best_value_among_usable_machines(catalog, team):
    config = _config(model_size="x", imgsz=1280, batch=32)
    rows = estimates_for(config, team.workspace)
    assert [r.gpu.slug for r in rows] == [c.slug for c in GpuType.objects.filter(is_active=True)]
    usable = [r for r in rows if r.available and r.estimate.fits_in_memory]
    assert len(usable) < len(rows)  # the small cards cannot hold batch 32 of x at 1280
    marked = {
        mark: [r.gpu.slug for r in rows if getattr(r, mark)]
        for mark in ("cheapest", "fastest", "best_value")
    }
    assert marked["cheapest"] == ["local"]  # free
    fastest = min(usable, key=lambda r: r.estimate.seconds)
    assert marked["fastest"] == [fastest.gpu.slug]
    paid = [r for r in usable if r.estimate.credits]
    best = min(paid, key=lambda r: r.estimate.seconds * r.estimate.credits)
    assert marked["best_value"] == [best.gpu.slug]
    for r in rows:
        if not r.estimate.fits_in_memory:
            assert not (r.cheapest or r.fastest or r.best_value)


def test_machines_the_plan_lacks_keep_their_reason_and_get_no_mark(catalog, stranger):
    from workspaces.models import Workspace

    workspace = Workspace.objects.filter(memberships__user=stranger).first()
    rows = {r.gpu.slug: r for r in estimates_for(_config(), workspace)}
    h200 = rows["h200"]
    if h200.available:
        pytest.skip("the stranger's plan includes the H200")
    assert "plan" in h200.reason and h200.estimate.seconds > 0
    assert not (h200.cheapest or h200.fastest or h200.best_value)


# --- calibration -------------------------------------------------------------------------------


def _finished_on(gpu, *, project, version, user, ratio: float, size="n", imgsz=320):
    """A finished job whose training took `ratio` × the uncalibrated prediction."""
    job = job_row(
        project=project,
        version=version,
        gpu=gpu,
        user=user,
        model_size=size,
        imgsz=imgsz,
        epochs=10,
        epochs_done=10,
        batch=-1,
        state=JobState.SUCCEEDED,
    )
    config = config_of_job(job)
    cost = model_cost(config.model_family, config.model_size, config.task)
    predicted = estimator._training_seconds(config, gpu, cost, estimator.Calibration())
    end = timezone.now()
    job.first_batch_at = end - timedelta(seconds=predicted * ratio)
    job.started_at = job.first_batch_at - timedelta(seconds=40)
    job.finished_at = end
    job.save(update_fields=["first_batch_at", "started_at", "finished_at"])
    return job


def test_finished_jobs_calibrate_the_next_estimate_and_narrow_its_range(catalog, team, project):
    gpu = catalog["rtx-4090"]
    version = small_version(access=team.access("owner"))
    config = _config(imgsz=320, batch=-1, epochs=10, train_images=3, val_images=1)
    before = estimate(config, gpu)
    assert before.calibration_jobs == 0
    assert before.seconds_high / before.seconds == pytest.approx(1.5, abs=0.01)
    assert "A first guess" in before.explanation and "±50%" in before.explanation
    for ratio in (1.9, 2.0, 2.1, 2.0, 2.0):
        _finished_on(gpu, project=project, version=version, user=team.owner, ratio=ratio)
    # A failed job and a quick test do not count.
    job_row(project=project, version=version, gpu=gpu, state=JobState.FAILED)
    assert calibration_for(gpu).jobs == 5
    after = estimate(config, gpu)
    assert after.calibration_jobs == 5
    assert calibration_for(gpu).factor == pytest.approx(2.0, rel=0.02)
    training_before = before.seconds - estimator.CLOUD_STARTUP_SECONDS
    assert after.seconds - 40 == pytest.approx(2 * training_before, rel=0.05)
    assert after.seconds_high / after.seconds == pytest.approx(1.15, abs=0.01)
    assert "Corrected by 5 finished jobs" in after.explanation
    assert "first guess" not in after.explanation
    # Another machine keeps its own (empty) calibration.
    assert estimate(config, catalog["l40s"]).calibration_jobs == 0


def test_a_cloud_types_start_up_is_learned_with_its_provisioning_and_set_up(catalog, team, project):
    """A SkyPilot type's start-up comes from its past jobs (the median of started → first
    batch), and the explanation says what it is made of, from the provider's phases the
    supervisor kept on each job's first attempt; before any job, it says it is a guess."""
    from training.models import TrainingAttempt

    gpu = catalog["h100-80gb"]
    config = _config(imgsz=320, batch=-1, epochs=10, train_images=3, val_images=1)
    first = estimate(config, gpu).explanation
    assert "Getting a machine ready counts 1 min 30 s" in first and "a first guess" in first
    version = small_version(access=team.access("owner"))
    for rent, setup in ((100, 50), (120, 60), (140, 70)):
        job = _finished_on(gpu, project=project, version=version, user=team.owner, ratio=1.0)
        # Queued 5 s, rented, set up, then 10 s building the model before the first batch.
        job.started_at = t0 = job.first_batch_at - timedelta(seconds=5 + rent + setup + 10)
        job.save(update_fields=["started_at"])
        at = lambda s, t0=t0: (t0 + timedelta(seconds=s)).isoformat()  # noqa: E731
        phases = [
            {"phase": "queued", "label": "Queued at the provider", "at": at(0)},
            {"phase": "provisioning", "label": "Provisioning", "at": at(5)},
            {"phase": "setting_up", "label": "Setting up", "at": at(5 + rent)},
            {"phase": "running", "label": "Running", "at": at(5 + rent + setup)},
        ]
        TrainingAttempt.objects.create(job=job, number=1, worker="w", provider_phases=phases)
    cal = calibration_for(gpu)
    assert (cal.provisioning_seconds, cal.setup_seconds, cal.startups) == (120, 60, 3)
    after = estimate(config, gpu)
    assert (
        "Getting a machine ready counts 3 min 15 s (2 min 00 s renting the machine and 1 min 00 s "
        "setting it up), the median of 3 past jobs on this type" in after.explanation
    )


# --- the form's panel --------------------------------------------------------------------------


def _url(route: str, **kwargs) -> str:
    return reverse(route, kwargs={"ws_slug": "acme", **kwargs})


def test_the_form_page_answers_at_once_and_loads_the_estimates_of_its_initial_values(
    client, team, project, catalog
):
    version = small_version(access=team.access("owner"))
    client.force_login(team.editor)
    page = html.unescape(client.get(_url("job_create", pk=project.pk)).content.decode())
    # Estimating every machine takes seconds: the page does not wait for it.
    assert 'data-testid="estimates-pending">Estimating…' in page
    assert 'data-testid="estimate-local"' not in page
    assert 'hx-get="/w/acme/projects/' in page
    assert 'hx-trigger="load, change from:#train-form' in page
    assert 'hx-sync="this:queue last"' in page and 'hx-swap="innerHTML"' in page
    # The panel of what the form holds (the same as the link without JavaScript).
    link = re.search(r'<noscript><p><a href="([^"]+)"', page).group(1)
    assert f"dataset_version={version.pk}" in link
    panel = client.get(link, headers={"HX-Request": "true"}).content.decode()
    assert 'data-testid="estimate-h200"' in panel and 'data-testid="estimate-local"' in panel
    # The recipe for a small dataset from scratch (training/recipes.py), its batch held to 3.
    assert "3 training and 1 validation images, 30 epochs at 128 px, batch 3" in panel
    assert 'data-testid="badge-fastest"' in panel


def test_the_panel_alone_follows_the_form(client, team, project, catalog):
    version = small_version(access=team.access("owner"))
    client.force_login(team.editor)
    response = client.get(
        _url("job_estimate", pk=project.pk),
        {
            "dataset_version": version.pk,
            "model_family": "yolo11",
            "model_size": "x",
            "imgsz": 1280,
            "epochs": 5,
            "batch": "32",
        },
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    page = response.content.decode()
    # The inside of the form's box, which stays (hx-swap innerHTML).
    assert "<html" not in page and page.lstrip().startswith("<h3>Estimates</h3>")
    assert "5 epochs at 1280 px, batch 32" in page
    assert 'data-testid="no-fit"' in page  # the 16 GB card
    assert "estimate-rtx-2000-ada" in page


def test_the_panel_says_what_is_missing_without_a_version(client, team, project, catalog):
    client.force_login(team.editor)
    page = client.get(_url("job_estimate", pk=project.pk)).content.decode()
    assert "Pick a dataset version to see estimates." in page


def test_the_panel_tells_what_unlocks_a_machine(client, team, project, catalog, settings):
    settings.TRAINING_PROVIDERS = ["local"]
    version = small_version(access=team.access("owner"))
    client.force_login(team.editor)
    page = client.get(
        _url("job_estimate", pk=project.pk), {"dataset_version": version.pk}
    ).content.decode()
    assert "Its provider, SkyPilot, is not configured on this server." in page


# --- API ---------------------------------------------------------------------------------------


def test_the_api_returns_one_row_per_machine(team, project, catalog):
    version = small_version(access=team.access("owner"))
    _, raw = api_key_create(access=team.access("owner"), name="ci", scopes=["train"])
    api = Client(headers={"Authorization": f"Bearer {raw}"})
    body = {
        "project_id": project.pk,
        "dataset_version_id": version.pk,
        "model_family": "yolo11",
        "model_size": "n",
        "imgsz": 640,
        "epochs": 50,
        "batch": 16,
    }
    response = api.post("/api/v1/training/estimate", body, content_type="application/json")
    assert response.status_code == 200, response.content
    rows = response.json()
    assert [r["gpu_type"] for r in rows][:2] == ["local", "rtx-2000-ada"]
    assert sum(r["fastest"] for r in rows) == 1 and sum(r["cheapest"] for r in rows) == 1
    assert all(r["seconds_low"] <= r["seconds"] <= r["seconds_high"] for r in rows)
    by_images = api.post(
        "/api/v1/training/estimate",
        {**body, "dataset_version_id": None, "train_images": 30_000, "val_images": 5_000},
        content_type="application/json",
    ).json()
    assert by_images[1]["seconds"] > rows[1]["seconds"]
    bad = api.post(
        "/api/v1/training/estimate",
        {**body, "dataset_version_id": None},
        content_type="application/json",
    )
    assert bad.status_code == 400
    assert "train_images" in bad.content.decode()


# --- the job page's re-estimate ----------------------------------------------------------------


def test_the_job_page_re_estimates_from_its_measured_epochs(catalog, team, project, client):
    from training.models import EpochMetric, TrainingAttempt

    gpu = catalog["rtx-4090"]  # $0.69 an hour
    version = small_version(access=team.access("owner"))
    now = timezone.now()
    job = job_row(
        project=project,
        version=version,
        gpu=gpu,
        epochs=10,
        state=JobState.RUNNING,
        estimated_seconds=600,
        started_at=now - timedelta(seconds=130),
    )
    client.force_login(team.viewer)
    page = client.get(_url("job_detail", pk=job.pk)).content.decode()
    assert "10 min 00 s" in page and "at the start" in page
    assert 'data-testid="estimate-after"' not in page  # no epoch measured yet

    TrainingAttempt.objects.create(job=job, number=1, worker="w")
    TrainingAttempt.objects.filter(job=job).update(started_at=now - timedelta(seconds=130))
    # Two epochs of 50 s each; the last ended 10 s ago.
    for epoch in (1, 2):
        EpochMetric.objects.create(job=job, epoch=epoch, attempt=1, values={}, seconds=50.0)
    EpochMetric.objects.filter(job=job).update(recorded_at=now - timedelta(seconds=10))
    after = estimator.reestimate(job, now=now)
    assert after.after_epoch == 2 and after.epoch_seconds == 50
    assert after.seconds_used == 130
    final_validation = after.seconds_left - (8 * 50 - 10)
    assert 0 <= final_validation < 5
    assert after.seconds_total == 130 + after.seconds_left
    assert after.credits_total == estimator.microcredits(after.seconds_total, gpu)
    assert after.at_start_credits == estimator.microcredits(600, gpu)

    page = client.get(_url("job_detail", pk=job.pk)).content.decode()
    assert "after epoch 2" in page
    assert "8 min 4" in page  # 130 s used + 390 s left + a final validation of a few seconds

    # Once finished, the figure is what it used.
    TrainingAttempt.objects.filter(job=job).update(ended_at=now)
    job.state = JobState.SUCCEEDED
    job.save(update_fields=["state"])
    done = estimator.reestimate(job, now=now + timedelta(hours=1))
    assert done.seconds_left == 0 and done.seconds_total == 130


def test_the_job_page_never_waits_on_a_measurement(catalog, team, project, client):
    """Opening a running job's page on a server whose cache is cold starts no FLOPs
    measurement (a subprocess of seconds: the page took 7 s, and 15+ on a busy machine); the
    final validation is left out of the re-estimate until the figure is there."""
    from training.models import EpochMetric, TrainingAttempt

    now = timezone.now()
    job = job_row(
        project=project,
        version=small_version(access=team.access("owner")),
        gpu=catalog["local"],
        epochs=10,
        state=JobState.RUNNING,
        started_at=now - timedelta(seconds=60),
    )
    TrainingAttempt.objects.create(job=job, number=1, worker="w")
    EpochMetric.objects.create(job=job, epoch=1, attempt=1, values={}, seconds=50.0)
    cache.clear()
    estimator._flops_memory.clear()
    before = estimator.flops_measurements
    client.force_login(team.viewer)
    page = client.get(_url("job_detail", pk=job.pk)).content.decode()
    assert 'data-testid="estimate-after"' in page
    assert estimator.flops_measurements == before


def test_submitting_a_job_keeps_its_estimate(catalog, team, project):
    from training.services.arguments import TrainParams
    from training.services.jobs import job_submit

    gpu = catalog["local"]
    version = small_version(access=team.access("owner"))
    params = TrainParams(
        task="detect", model_family="yolo11", model_size="n", epochs=2, imgsz=64, batch=2
    )
    cache.clear()
    estimator._flops_memory.clear()
    version_cache_forget(estimator._flops_key("yolo11n.yaml", 640))  # never measured here
    # A free machine's job is not kept waiting for a FLOPs measurement...
    job = job_submit(
        access=team.access("editor"),
        project=project,
        version=version,
        gpu_type_id=gpu.pk,
        params=params,
    )
    assert job.estimated_seconds is None
    # ...and keeps its estimate once the figure is known (the form measured it).
    model_cost("yolo11", "n", "detect")
    job = job_submit(
        access=team.access("editor"),
        project=project,
        version=version,
        gpu_type_id=gpu.pk,
        params=params,
    )
    assert job.estimated_seconds == estimate(config_of_job(job), gpu).seconds


def test_the_credits_held_for_a_job_are_the_estimate_shown_for_it(catalog, team, project):
    """The form shows a machine's estimate; submitting holds exactly that many micro-credits
    (a job estimated past the 15-minute minimum, without a budget cap), not one more or less."""
    from billing.ledger import job_open_hold
    from training.services.arguments import TrainParams
    from training.services.jobs import job_submit

    gpu = catalog["local"]
    version = small_version(access=team.access("owner"))
    params = TrainParams(
        task="detect", model_family="yolo11", model_size="n", epochs=3000, imgsz=640, batch=2
    )
    model_cost("yolo11", "n", "detect")  # measured, as the form does before a submit
    planned = job_row(project=project, version=version, gpu=gpu, epochs=3000, imgsz=640, batch=2)
    seconds = estimate(config_of_job(planned), gpu).seconds
    assert seconds > 15 * 60
    # A price at which the exact cost falls more than half-way between two micro-credits
    # (seconds × tenths of a cent an hour: 1e6 / 3600 / 1000 = 5/18 micro-credit).
    mills = next(m for m in range(1000, 10_000) if (seconds * m * 5) % 18 / 18 > 0.5)
    gpu.hourly_price = f"{mills / 1000:.3f}"
    gpu.save(update_fields=["hourly_price"])
    gpu.refresh_from_db()
    job = job_submit(
        access=team.access("editor"),
        project=project,
        version=version,
        gpu_type_id=gpu.pk,
        params=params,
    )
    shown = estimate(config_of_job(job), gpu)
    assert shown.seconds == seconds == job.estimated_seconds
    assert job_open_hold(job) == shown.credits > 0
