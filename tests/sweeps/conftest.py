"""Sweep fixtures: training's (a real coco8 detect version, the local machine, real workers),
a priced local machine as tests/training/test_metering.py prices it, and a sweep submitted the
way the form does it."""

import pytest

from sweeps.services.submit import sweep_submit
from tests.training.conftest import detect_version, gpu_local, project, workers  # noqa: F401
from training.services.arguments import TrainParams

# $3.60 an hour: 1,000 micro-credits a second.
PRICE = "3.600"
PER_SECOND = 1000


@pytest.fixture
def priced(gpu_local):  # noqa: F811
    gpu_local.hourly_price = PRICE
    gpu_local.save()
    gpu_local.refresh_from_db()
    return gpu_local


def base_params(**overrides) -> TrainParams:
    values = {
        "task": "detect",
        "model_family": "yolo11",
        "model_size": "n",
        "weights": "scratch",
        "epochs": 2,
        "imgsz": 64,
        "batch": 2,
        "patience": 100,
        "optimizer": "auto",
        "seed": 0,
        "extra_args": {"plots": False},
        **overrides,
    }
    return TrainParams(**values)


def submit(team, project, version, gpu, *, space=None, budget=10**9, **overrides):  # noqa: F811
    return sweep_submit(
        access=team.access("editor"),
        project=project,
        version=version,
        gpu_type_id=gpu.pk,
        base=overrides.pop("base", base_params()),
        space=space if space is not None else {"lr0": {"low": 1e-4, "high": 1e-1, "log": True}},
        metric=overrides.pop("metric", "metrics/mAP50-95(B)"),
        n_trials=overrides.pop("n_trials", 4),
        budget=budget,
        **overrides,
    )
