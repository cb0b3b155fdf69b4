"""The training API: submit, read, stop, cancel, resume, metrics, models and their weights."""

import pytest
from django.test import Client

from tests.training.factories import WEIGHTS, finished_job, job_row
from training.models import JobState, TrainingJob
from workspaces.services.keys import api_key_create

pytestmark = pytest.mark.django_db

JOBS = "/api/v1/training/jobs"


def _key_client(team, *scopes: str, role: str = "owner") -> Client:
    _, raw = api_key_create(access=team.access(role), name="ci", scopes=list(scopes))
    return Client(headers={"Authorization": f"Bearer {raw}"})


def _body(project, version, gpu, **overrides) -> dict:
    return {
        "project_id": project.pk,
        "dataset_version_id": version.pk,
        "gpu_type_id": gpu.pk,
        "model_family": "yolo11",
        "model_size": "n",
        "weights": "scratch",
        "epochs": 5,
        "imgsz": 64,
        "batch": 2,
        **overrides,
    }


def test_round_trip_submit_read_stop(team, project, detect_version, gpu_local):
    api = _key_client(team, "read", "train")
    body = _body(project, detect_version, gpu_local, name="api run", extra_args={"lr0": 0.02})
    response = api.post(JOBS, body, content_type="application/json")
    assert response.status_code == 201, response.content
    created = response.json()
    job = TrainingJob.objects.get(pk=created["id"])
    assert created["state"] == job.state == JobState.QUEUED
    assert created["title"] == "api run" and created["model"] == "yolo11n"
    assert created["epochs"] == 5 and created["epoch"] == 0 and created["batch"] == 2
    assert created["extra_args"] == {"lr0": 0.02} and created["task"] == "detect"
    assert created["device"] == gpu_local.description and created["attempts"] == []
    assert job.created_by == team.owner

    read = api.get(f"{JOBS}/{job.pk}").json()
    assert read == created

    stopped = api.post(f"{JOBS}/{job.pk}/stop")
    assert stopped.status_code == 200
    assert stopped.json()["state"] == JobState.CANCELED and stopped.json()["is_final"]
    again = api.post(f"{JOBS}/{job.pk}/cancel")
    assert again.status_code == 400
    assert "has already ended" in again.json()["detail"]


def test_quick_test_and_yaml_extra_args(team, project, detect_version, gpu_local):
    api = _key_client(team, "read", "train")
    body = _body(project, detect_version, gpu_local, quick_test=True, extra_args="mosaic: 0.5")
    created = api.post(JOBS, body, content_type="application/json").json()
    assert created["is_quick_test"] and created["epochs"] == 2
    assert created["extra_args"] == {"mosaic": 0.5}


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"epochs": 0}, "Epochs must be at least 1."),
        ({"imgsz": 100}, "Image size must be a multiple of 32"),
        ({"batch": 64}, "Batch 64 is larger than the 4 training images"),
        ({"extra_args": {"lr00": 0.1}}, "Unknown argument 'lr00'"),
        ({"extra_args": "lr0: [1"}, "not valid YAML"),
        ({"model_family": "yolo99"}, "Pick a model family"),
        ({"gpu_type_id": None}, "Pick a machine from the list."),
    ],
)
def test_a_job_that_cannot_train_is_a_400_with_the_reason(
    team, project, detect_version, gpu_local, overrides, reason
):
    api = _key_client(team, "train")
    body = _body(project, detect_version, gpu_local, **overrides)
    response = api.post(JOBS, body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert reason in response.json()["detail"]
    assert TrainingJob.objects.count() == 0


def test_scopes_roles_and_workspaces(team, stranger, project, detect_version, gpu_local):
    body = _body(project, detect_version, gpu_local)
    read_only = _key_client(team, "read")
    response = read_only.post(JOBS, body, content_type="application/json")
    assert response.status_code == 403 and "scope" in response.json()["detail"]
    job = job_row(project=project, version=detect_version, gpu=gpu_local)
    assert read_only.get(f"{JOBS}/{job.pk}").status_code == 200
    assert read_only.post(f"{JOBS}/{job.pk}/stop").status_code == 403
    assert _key_client(team, "train").get(f"{JOBS}/{job.pk}").status_code == 403

    viewer = Client()
    viewer.force_login(team.viewer)
    assert viewer.post(JOBS, body, content_type="application/json").status_code == 403
    assert viewer.post(f"{JOBS}/{job.pk}/cancel").status_code == 403
    assert viewer.get(f"{JOBS}/{job.pk}").status_code == 200

    outsider = Client()
    outsider.force_login(stranger)
    assert outsider.post(JOBS, body, content_type="application/json").status_code == 404
    assert outsider.get(f"{JOBS}/{job.pk}").status_code == 404
    assert outsider.post(f"{JOBS}/{job.pk}/cancel").status_code == 404
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    assert TrainingJob.objects.count() == 1


def test_a_version_of_another_workspace_is_not_found(
    team, stranger, project, detect_version, gpu_local
):
    from workspaces.models import Project

    theirs = Project.objects.create(workspace=stranger.memberships.get().workspace, name="Theirs")
    outsider = Client()
    outsider.force_login(stranger)
    body = _body(theirs, detect_version, gpu_local)
    response = outsider.post(JOBS, body, content_type="application/json")
    assert response.status_code == 404
    assert TrainingJob.objects.count() == 0


def test_resume_a_stopped_job(team, project, detect_version, gpu_local):
    job = job_row(
        project=project,
        version=detect_version,
        gpu=gpu_local,
        state=JobState.STOPPED,
        epochs_done=1,
        checkpoint_epoch=1,
    )
    api = _key_client(team, "train", "read")
    response = api.post(f"{JOBS}/{job.pk}/resume")
    assert response.status_code == 200 and response.json()["state"] == JobState.QUEUED
    assert api.post(f"{JOBS}/{job.pk}/resume").status_code == 400


def test_metrics_model_and_weights(team, project, detect_version, gpu_local):
    job = finished_job(project=project, version=detect_version, gpu=gpu_local)
    api = _key_client(team, "read")
    read = api.get(f"{JOBS}/{job.pk}").json()
    assert read["state"] == "succeeded" and read["epoch"] == 3
    assert read["latest_metrics"]["metrics/mAP50(B)"] == pytest.approx(0.6)
    assert read["artifacts"] == ["last.pt", "results.png"]
    assert read["attempts"][0]["worker"] == "worker-a:123"
    assert read["attempts"][0]["end_reason"] == "finished"
    assert read["trained_model_id"] == job.model.pk

    metrics = api.get(f"{JOBS}/{job.pk}/metrics").json()
    assert [m["epoch"] for m in metrics] == [1, 2, 3]
    assert [m["values"]["metrics/mAP50(B)"] for m in metrics] == pytest.approx([0.4, 0.5, 0.6])

    model = api.get(f"/api/v1/models/{job.model.pk}").json()
    assert model["job_id"] == job.pk and model["architecture"] == "yolo11n"
    assert model["class_names"] == ["bird"] and model["dataset_version_id"] == detect_version.pk
    weights = api.get(f"/api/v1/models/{job.model.pk}/weights")
    assert weights.status_code == 200
    assert weights["Content-Type"] == "application/octet-stream"
    assert weights["Content-Disposition"].startswith("attachment;")
    assert b"".join(weights.streaming_content) == WEIGHTS

    assert api.get(f"{JOBS}/999999").status_code == 404
    assert api.get("/api/v1/models/999999").status_code == 404
