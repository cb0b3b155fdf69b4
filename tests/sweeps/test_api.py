"""The sweep API (issue 27): a key with the train scope starts a sweep, reads its trials, best
and credits spent against the budget, stops and resumes it; a key without the scope is
refused; another workspace's sweep is not found, in the same words as an unknown one. (Every
operation × every caller: tests/sweeps/authz_sweeps.py.)"""

import pytest
from django.test import Client

from sweeps.models import Sweep, SweepState
from sweeps.services.advance import sweep_advance
from tests.sweeps.test_advance import METRIC, job_ends, job_runs, trials_of
from tests.sweeps.test_views import stranger_access
from tests.training.factories import small_version
from workspaces.services.keys import api_key_create

pytestmark = pytest.mark.django_db


def _key_client(access, scopes) -> Client:
    _, raw = api_key_create(access=access, name="ci", scopes=scopes)
    return Client(headers={"Authorization": f"Bearer {raw}"})


def test_a_key_starts_reads_stops_and_resumes_a_sweep(team, project, gpu_local, stranger):
    version = small_version(access=team.access("owner"))
    api = _key_client(team.access("owner"), ["read", "train"])
    body = {
        "project_id": project.pk,
        "dataset_version_id": version.pk,
        "gpu_type_id": gpu_local.pk,
        "name": "Night",
        "model_family": "yolo11",
        "weights": "scratch",
        "epochs": 2,
        "imgsz": 64,
        "batch": 2,
        "extra_args": "plots: false",
        "space": {"lr0": {"low": 0.0001, "high": 0.1, "log": True}, "imgsz": [64, 96]},
        "n_trials": 3,
        "budget": 2_000_000,
    }
    read_only = _key_client(team.access("owner"), ["read"])
    denied = read_only.post("/api/v1/sweeps", body, content_type="application/json")
    assert denied.status_code == 403 and "scope" in denied.json()["detail"]
    bad = api.post(
        "/api/v1/sweeps",
        {**body, "space": {"lr0": {"low": 0.5, "high": 0.1}}},
        content_type="application/json",
    )
    assert bad.status_code == 400 and "must be below its high" in bad.json()["detail"]
    assert not Sweep.objects.exists()

    created = api.post("/api/v1/sweeps", body, content_type="application/json")
    assert created.status_code == 201, created.content
    data = created.json()
    sweep = Sweep.objects.get()
    assert data["id"] == sweep.pk and data["metric"] == METRIC and data["state"] == "running"
    assert data["fixed"]["extra_args"] == {"plots": False} and data["trials"] == []
    assert data["credits"] == {"budget": 2_000_000, "spent": 0, "held": 0, "remaining": 2_000_000}

    sweep_advance(sweep.pk)
    first, second = trials_of(sweep)
    job_runs(first.job, 0.2)
    job_ends(first.job, final={METRIC: 0.4})
    sweep_advance(sweep.pk)
    got = api.get(f"/api/v1/sweeps/{sweep.pk}").json()
    assert [t["number"] for t in got["trials"]] == [1, 2, 3]
    assert got["trials"][0]["state"] == "complete" and got["trials"][0]["value"] == 0.4
    assert got["trials"][1]["job_id"] == second.job_id
    assert (got["best_trial"], got["best_value"]) == (1, 0.4)
    listed = api.get("/api/v1/workspaces/acme/sweeps").json()
    assert [(s["id"], s["trials_started"]) for s in listed["items"]] == [(sweep.pk, 3)]

    stopped = api.post(f"/api/v1/sweeps/{sweep.pk}/stop")
    assert stopped.status_code == 200 and stopped.json()["state"] == SweepState.STOPPED
    again = api.post(f"/api/v1/sweeps/{sweep.pk}/stop")
    assert again.status_code == 400 and "stopped already" in again.json()["detail"]
    resumed = api.post(f"/api/v1/sweeps/{sweep.pk}/resume")
    assert resumed.status_code == 200 and resumed.json()["state"] == SweepState.RUNNING

    # Another workspace's key: their sweep and an unknown id are answered alike.
    theirs = _key_client(stranger_access(stranger), ["read", "train"])
    answers = [theirs.get(f"/api/v1/sweeps/{pk}") for pk in (sweep.pk, sweep.pk + 1000)]
    assert [a.status_code for a in answers] == [404, 404]
    assert answers[0].json() == answers[1].json() == {"detail": "No such sweep."}
    assert theirs.post(f"/api/v1/sweeps/{sweep.pk}/stop").status_code == 404
