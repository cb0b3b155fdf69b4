"""Starting a sweep: refused at submit with the reason (an impossible space, a budget smaller
than the most expensive trial, a metric of another task, no room in the plan), nothing saved;
accepted, it is saved with its space as trials will use it."""

import pytest
from django.core.exceptions import PermissionDenied

from billing.ledger import credits_format
from core.errors import ServiceError
from sweeps.models import Direction, Sweep
from sweeps.services.budget import trial_estimate
from sweeps.services.space import costliest_params, space_clean
from sweeps.services.submit import sweep_submit
from tests.sweeps.conftest import base_params, submit
from tests.training.factories import job_row, small_version

SPACE = {
    "lr0": {"low": 1e-4, "high": 1e-1, "log": True},
    "imgsz": [64, 128],
    "epochs": {"low": 1, "high": 3},
}


@pytest.fixture
def version(team):
    return small_version(access=team.access("owner"))


@pytest.mark.django_db
def test_a_budget_below_the_costliest_trial_is_refused_with_its_estimate(
    team, project, version, priced
):
    costliest = costliest_params(base_params(), space_clean(SPACE))
    assert (costliest.imgsz, costliest.epochs) == (128, 3)
    cost = trial_estimate(gpu=priced, version=version, params=costliest).credits
    with pytest.raises(ServiceError) as refused:
        submit(team, project, version, priced, space=SPACE, budget=cost - 1)
    message = str(refused.value)
    assert f"is estimated at {credits_format(cost)} credits" in message
    assert "yolo11n at 128 px for 3 epochs" in message
    assert not Sweep.objects.exists()
    sweep = submit(team, project, version, priced, space=SPACE, budget=cost)
    assert sweep.budget == cost and sweep.space["imgsz"] == {"choices": [64, 128]}


@pytest.mark.django_db
def test_bad_input_is_refused_at_submit_and_nothing_is_saved(team, project, version, gpu_local):
    cases = [
        ({"space": {"lr0": {"low": 0.1, "high": 0.01}}}, "must be below its high"),
        ({"space": {"imgsz": [100]}}, "imgsz: 100 is not a multiple of 32"),
        ({"metric": "metrics/mAP50-95(M)"}, "not a metric a detect sweep can optimise"),
        ({"base": base_params(task="segment")}, "it cannot train a segment model"),
        (
            {"space": {"lr0": [0.01]}, "base": base_params(extra_args={"lr0": 0.1})},
            "lr0 is searched; leave it out of the fixed arguments",
        ),
        ({"space": {"batch": [2, 64]}}, "Batch 64 is larger than the 3 training images"),
        ({"n_trials": 0}, "A sweep runs 1 to 200 trials"),
    ]
    for overrides, reason in cases:
        with pytest.raises(ServiceError) as refused:
            submit(team, project, version, gpu_local, **overrides)
        assert reason in str(refused.value), overrides
    assert not Sweep.objects.exists()


@pytest.mark.django_db
def test_a_sweep_obeys_the_plans_jobs_at_a_time(team, project, version, gpu_local):
    limit = team.workspace.plan.max_concurrent_jobs
    for _ in range(limit):
        job_row(project=project, version=version, gpu=gpu_local)
    with pytest.raises(ServiceError, match=f"runs {limit} training jobs at a time"):
        submit(team, project, version, gpu_local)
    assert not Sweep.objects.exists()


@pytest.mark.django_db
def test_a_sweep_is_saved_with_its_direction_and_a_seed_of_its_own(
    team, project, version, gpu_local
):
    sweep = submit(team, project, version, gpu_local, metric="val/box_loss", parallel=9)
    assert sweep.direction == Direction.MINIMIZE
    assert sweep.seed == sweep.pk and sweep.parallel == 4  # never more at once than trials
    assert sweep.fixed["extra_args"] == {"plots": False} and sweep.fixed["imgsz"] == 64
    with pytest.raises(PermissionDenied, match="editor role"):
        sweep_submit(
            access=team.access("viewer"),
            project=project,
            version=version,
            gpu_type_id=gpu_local.pk,
            base=base_params(),
            space={"lr0": [0.01]},
            metric="metrics/mAP50-95(B)",
            n_trials=1,
            budget=0,
        )
