"""The sweep pages: the form (a valid sweep starts, an impossible space says why, a stranger's
version is not found), a project's sweeps (a fixed number of queries), the sweep's live page
with its trials, credits and best trial, and its buttons."""

import pytest

from sweeps.models import Sweep, SweepState
from sweeps.services.advance import sweep_advance
from tests.sweeps.conftest import submit
from tests.sweeps.test_advance import METRIC, job_ends, job_runs, trials_of
from tests.training.factories import small_version
from training.models import TrainedModel


@pytest.fixture
def version(team):
    return small_version(access=team.access("owner"))


def _form(version, gpu, **overrides) -> dict:
    return {
        "dataset_version": version.pk,
        "model_family": "yolo11",
        "model_size": "n",
        "weights": "scratch",
        "gpu_type": gpu.pk,
        "metric": "",
        "n_trials": 4,
        "parallel": 2,
        "budget": "5",
        "prune": "on",
        "prune_startup_trials": 2,
        "prune_warmup_epochs": 1,
        "epochs": 2,
        "imgsz": 64,
        "batch": "2",
        "patience": 100,
        "optimizer": "auto",
        "train_seed": 0,
        "lr0_low": "0.0001",
        "lr0_high": "0.1",
        "lr0_log": "on",
        "imgsz_list": "64, 96",
        "optimizers": ["SGD", "AdamW"],
        "more_space": "mixup: {low: 0, high: 0.3}",
        **overrides,
    }


@pytest.mark.django_db
def test_the_form_starts_a_sweep_and_says_why_it_refuses_one(
    client, team, project, version, gpu_local, stranger
):
    client.force_login(team.editor)
    url = f"/w/acme/projects/{project.pk}/sweeps/new/"
    page = client.get(url)
    assert page.status_code == 200 and b'data-testid="range-lr0"' in page.content
    refused = client.post(url, _form(version, gpu_local, lr0_low="0.5"))
    assert refused.status_code == 400
    reason = "lr0: the range&#x27;s low (0.5) must be below its high (0.1)"
    assert reason in refused.content.decode()
    assert not Sweep.objects.exists()
    theirs = small_version(access=stranger_access(stranger), name="Theirs")
    assert client.post(url, _form(theirs, gpu_local)).status_code == 404
    response = client.post(url, _form(version, gpu_local))
    sweep = Sweep.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/w/acme/sweeps/{sweep.pk}/"
    assert sweep.metric == METRIC and sweep.budget == 5_000_000
    assert sweep.space == {
        "lr0": {"low": 0.0001, "high": 0.1, "log": True},
        "imgsz": {"choices": [64, 96]},
        "optimizer": {"choices": ["SGD", "AdamW"]},
        "mixup": {"low": 0.0, "high": 0.3, "log": False},
    }


def stranger_access(stranger):
    from workspaces.selectors import workspace_access_for_user

    return workspace_access_for_user(user=stranger, slug="elsewhere")


@pytest.mark.django_db
def test_a_projects_sweeps_are_listed_in_a_fixed_number_of_queries(
    client, team, project, version, gpu_local, django_assert_num_queries
):
    client.force_login(team.viewer)
    url = f"/w/acme/projects/{project.pk}/sweeps/"
    submit(team, project, version, gpu_local, name="First")
    client.get(url)
    # user, membership, project, count, the header's workspaces, the page of sweeps (the
    # session comes from the cache)
    with django_assert_num_queries(6):
        page = client.get(url)
    submit(team, project, version, gpu_local, name="Second")
    with django_assert_num_queries(6):
        page = client.get(url)
    assert page.content.decode().count('data-testid="sweep-row"') == 2


@pytest.mark.django_db
def test_the_sweep_page_shows_trials_credits_and_promotes_the_best(
    client, team, project, version, gpu_local
):
    sweep = submit(team, project, version, gpu_local, parallel=2, name="Night")
    sweep_advance(sweep.pk)
    first, second = trials_of(sweep)
    job_runs(first.job, 0.2)
    job_ends(first.job, final={METRIC: 0.25})
    job_runs(second.job, 0.1)
    sweep_advance(sweep.pk)
    TrainedModel.objects.create(
        workspace=team.workspace, project=project, job=first.job, name="best one",
        task="detect", architecture="yolo11n", imgsz=64, weights_key="k",
    )  # fmt: skip
    client.force_login(team.editor)
    url = f"/w/acme/sweeps/{sweep.pk}/"
    page = client.get(url).content.decode()
    assert page.count('data-testid="trial-row"') == 3
    assert 'data-trial="1" data-state="complete" class="best"' in page
    assert f'href="/w/acme/training/jobs/{first.job_id}/"' in page
    assert 'id="sweep-data"' in page and "free: the trials cost no credits" in page
    assert 'hx-trigger="every 3s"' in page  # live while it runs
    live = client.get(url, headers={"HX-Request": "true", "HX-Target": "sweep-live"})
    assert live.content.decode().strip().startswith('<div id="sweep-live"')
    assert client.post(f"{url}promote/").status_code == 302
    assert TrainedModel.objects.get(name="best one").is_current
    assert 'data-testid="best-current"' in client.get(url).content.decode()
    assert client.post(f"{url}stop/").status_code == 302
    sweep.refresh_from_db()
    assert sweep.state == SweepState.STOPPED
    assert client.post(f"{url}resume/").status_code == 302
    sweep.refresh_from_db()
    assert sweep.state == SweepState.RUNNING
