"""Authorisation-matrix rows for training pages and the training API (tests/test_authz_matrix.py).

@job is queued (it can be stopped or canceled), @stopped_job can be resumed, @finished_job has
metrics, files and @model; @compare_jobs are two runs of @project to compare.
"""

from tests.authz import Row, _ws
from tests.training.factories import finished_job, job_row, local_gpu, small_version
from training.models import JobState
from workspaces.models import Project

FORM = {
    "dataset_version": "@train_version",
    "gpu_type": "@gpu",
    "model_family": "yolo11",
    "model_size": "n",
    "weights": "scratch",
    "epochs": 1,
    "imgsz": 64,
    "batch": "auto",
    "patience": 100,
    "optimizer": "auto",
    "seed": 0,
}

ROUTES = [
    Row("job_create", "get", "editor", 200, _ws(pk="@project")),
    Row("job_create", "post", "editor", 302, _ws(pk="@project"), FORM),
    Row("job_estimate", "get", "editor", 200, _ws(pk="@project"), FORM),
    Row("job_list", "get", "viewer", 200, _ws()),
    Row("job_detail", "get", "viewer", 200, _ws(pk="@job")),
    Row("job_detail", "get", "viewer", 200, _ws(pk="@finished_job")),
    # The live feed of a finished job: its snapshot, then the end (the stream closes by itself).
    Row("job_events", "get", "viewer", 200, _ws(pk="@finished_job")),
    Row("job_stop", "post", "editor", 302, _ws(pk="@job")),
    Row("job_cancel", "get", "editor", 200, _ws(pk="@job")),
    Row("job_cancel", "post", "editor", 302, _ws(pk="@job")),
    Row("job_resume", "post", "editor", 302, _ws(pk="@stopped_job")),
    Row("job_artifact", "get", "viewer", 200, _ws(pk="@finished_job", name="last.pt")),
    Row("job_artifact", "get", "viewer", 404, _ws(pk="@finished_job", name="secret.pt")),
    Row("job_log", "get", "viewer", 200, _ws(pk="@finished_job")),
    Row("project_compare", "get", "viewer", 200, _ws(pk="@project"), {"jobs": "@compare_jobs"}),
    Row("project_compare", "get", "viewer", 400, _ws(pk="@project"), {"jobs": "@job"}),
    Row("model_detail", "get", "viewer", 200, _ws(pk="@model")),
    Row("model_weights", "get", "viewer", 200, _ws(pk="@model")),
    Row("model_promote", "post", "editor", 302, _ws(pk="@model")),
    # No file: back to the project page with the reason.
    Row("model_upload", "post", "editor", 302, _ws(pk="@project")),
]


def training_ctx(values: dict) -> dict:
    team = values["team"]
    access = team.access("owner")
    project = Project.objects.get(pk=values["project"])
    version = small_version(access=access)
    gpu = local_gpu()
    queued = job_row(project=project, version=version, gpu=gpu, user=team.owner)
    stopped = job_row(
        project=project,
        version=version,
        gpu=gpu,
        user=team.owner,
        state=JobState.STOPPED,
        epochs_done=1,
        checkpoint_epoch=1,
    )
    done = finished_job(project=project, version=version, gpu=gpu, user=team.owner)
    return {
        "train_version": version.pk,
        "gpu": gpu.pk,
        "job": queued.pk,
        "stopped_job": stopped.pk,
        "finished_job": done.pk,
        "model": done.model.pk,
        "compare_jobs": [queued.pk, done.pk],
    }


CTX = [training_ctx]


def __getattr__(name: str):
    # The matrix imports this module while defining ROUTES, before ApiRow exists.
    if name != "API":
        raise AttributeError(name)
    from tests.authz import ApiRow

    job = {"job_id": "@job"}
    return [
        ApiRow(
            "/api/v1/training/jobs",
            "post",
            "editor",
            "train",
            201,
            {
                "project_id": "@project",
                "dataset_version_id": "@train_version",
                "gpu_type_id": "@gpu",
                "model_family": "yolo11",
                "weights": "scratch",
                "epochs": 1,
                "imgsz": 64,
            },
        ),
        ApiRow(
            "/api/v1/training/estimate",
            "post",
            "editor",
            "train",
            200,
            {
                "project_id": "@project",
                "dataset_version_id": "@train_version",
                "model_family": "yolo11",
                "imgsz": 64,
                "epochs": 1,
            },
        ),
        ApiRow("/api/v1/training/jobs/{job_id}", "get", "viewer", "read", 200, ids=job),
        ApiRow("/api/v1/training/jobs/{job_id}/stop", "post", "editor", "train", 200, ids=job),
        ApiRow("/api/v1/training/jobs/{job_id}/cancel", "post", "editor", "train", 200, ids=job),
        ApiRow(
            "/api/v1/training/jobs/{job_id}/resume",
            "post",
            "editor",
            "train",
            200,
            ids={"job_id": "@stopped_job"},
        ),
        ApiRow(
            "/api/v1/training/jobs/{job_id}/metrics",
            "get",
            "viewer",
            "read",
            200,
            ids={"job_id": "@finished_job"},
        ),
        ApiRow(
            "/api/v1/models/{model_id}", "get", "viewer", "read", 200, ids={"model_id": "@model"}
        ),
        ApiRow(
            "/api/v1/models/{model_id}/promote",
            "post",
            "editor",
            "train",
            200,
            ids={"model_id": "@model"},
        ),
        ApiRow(
            "/api/v1/models/{model_id}/weights",
            "get",
            "viewer",
            "read",
            200,
            ids={"model_id": "@model"},
        ),
    ]
