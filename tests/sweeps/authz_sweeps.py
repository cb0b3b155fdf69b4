"""Authorisation-matrix rows for sweeps (tests/test_authz_matrix.py).

@sweep runs (it can be stopped), @stopped_sweep can be resumed; starting one needs the train
permission (editors), seeing them the read permission. A sweep on the free local machine needs
no estimate, so submitting it measures nothing."""

from sweeps.models import Sweep, SweepState
from tests.authz import ApiRow, Row, _ws
from tests.training.factories import local_gpu, small_version
from workspaces.models import Project

FORM = {
    "dataset_version": "@sweep_version",
    "gpu_type": "@sweep_gpu",
    "model_family": "yolo11",
    "model_size": "n",
    "weights": "scratch",
    "n_trials": 2,
    "parallel": 1,
    "budget": "1",
    "prune_startup_trials": 2,
    "prune_warmup_epochs": 1,
    "epochs": 1,
    "imgsz": 64,
    "batch": "auto",
    "patience": 100,
    "optimizer": "auto",
    "train_seed": 0,
    "lr0_low": "0.001",
    "lr0_high": "0.01",
}

ROUTES = [
    Row("sweep_list", "get", "viewer", 200, _ws(pk="@project")),
    Row("sweep_create", "get", "editor", 200, _ws(pk="@project")),
    Row("sweep_create", "post", "editor", 302, _ws(pk="@project"), FORM),
    Row("sweep_detail", "get", "viewer", 200, _ws(pk="@sweep")),
    Row("sweep_stop", "post", "editor", 302, _ws(pk="@sweep")),
    Row("sweep_resume", "post", "editor", 302, _ws(pk="@stopped_sweep")),
    # No trial has a result yet: back to the page with the reason.
    Row("sweep_promote", "post", "editor", 302, _ws(pk="@sweep")),
    # Likewise: nothing to save yet, back to the page with the reason.
    Row("sweep_recipe", "post", "editor", 302, _ws(pk="@sweep"), {"name": "Best"}),
]

SWEEP = {"sweep_id": "@sweep"}
API = [
    ApiRow("/api/v1/workspaces/{slug}/sweeps", "get", "viewer", "read", 200),
    ApiRow(
        "/api/v1/sweeps",
        "post",
        "editor",
        "train",
        201,
        {
            "project_id": "@project",
            "dataset_version_id": "@sweep_version",
            "gpu_type_id": "@sweep_gpu",
            "model_family": "yolo11",
            "weights": "scratch",
            "epochs": 1,
            "imgsz": 64,
            "space": {"lr0": {"low": 0.001, "high": 0.01, "log": True}},
            "n_trials": 2,
            "budget": 1_000_000,
        },
    ),
    ApiRow("/api/v1/sweeps/{sweep_id}", "get", "viewer", "read", 200, ids=SWEEP),
    ApiRow("/api/v1/sweeps/{sweep_id}/stop", "post", "editor", "train", 200, ids=SWEEP),
    ApiRow(
        "/api/v1/sweeps/{sweep_id}/resume",
        "post",
        "editor",
        "train",
        200,
        ids={"sweep_id": "@stopped_sweep"},
    ),
]


def sweeps_ctx(values: dict) -> dict:
    team = values["team"]
    project = Project.objects.get(pk=values["project"])
    version = small_version(access=team.access("owner"), name="Sweepable")
    gpu = local_gpu()
    fields = {
        "workspace": team.workspace,
        "project": project,
        "dataset_version": version,
        "gpu_type": gpu,
        "created_by": team.owner,
        "task": "detect",
        "model_family": "yolo11",
        "model_size": "n",
        "fixed": {"epochs": 1, "imgsz": 64, "batch": -1, "extra_args": {}},
        "space": {"lr0": {"low": 0.001, "high": 0.01, "log": True}},
        "metric": "metrics/mAP50-95(B)",
        "direction": "maximize",
        "n_trials": 2,
        "budget": 1_000_000,
    }
    running = Sweep.objects.create(name="Running", **fields)
    stopped = Sweep.objects.create(name="Stopped", state=SweepState.STOPPED, **fields)
    return {
        "sweep_version": version.pk,
        "sweep_gpu": gpu.pk,
        "sweep": running.pk,
        "stopped_sweep": stopped.pk,
    }


CTX = [sweeps_ctx]
