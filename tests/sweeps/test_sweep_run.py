"""A real sweep: four trials trained by two training workers on coco8 (imgsz 64, 2 or 4
epochs), their arguments chosen by the optimizer, one pruned from its live epochs, every credit
within the budget, and the best trial's model promoted.

Pruning made certain, whatever the machine's load: the sweep optimises the validation box
loss, and `box` (that loss's gain) is searched among 0.25, 0.5 and 50, so a trial with 50 reports
a loss about a hundred times another's at the same epoch. With seed 483 the sampler's first two
(random) trials are (box 0.5, 2 epochs) and (box 0.25, 4 epochs). The second worker starts only
once the sweep has asked for its third trial, so the first worker trains trial 1 alone and the
third trial is asked in one state only: trial 1 complete, trial 2 open. TPE then proposes box 50
(with trials 1 and 2 both complete it proposes box 0.25, as a CI run under load once did when
both workers started together). Trial 3 runs beside trial 2 after trial 1 is complete, so its
first epoch is compared with trial 1's, and it is pruned; trial 2, whose loss is half trial 1's,
never is. The choices are asserted, so a change of Optuna's sampling shows as such, not as a
flaky prune."""

import time

import pytest

from sweeps.models import SweepState, TrialState
from sweeps.services.advance import sweep_advance
from sweeps.services.submit import sweep_promote_best
from tests.sweeps.conftest import base_params, submit
from training.metering import spent
from training.models import JobState, TrainedModel

SEED = 483
# No warm-up and a constant learning rate: each epoch's loss is the model's as trained so far,
# whatever the trial's number of epochs.
FIXED = {"plots": False, "warmup_epochs": 0, "lrf": 1.0}
BUDGET = 480_000  # 0.48 credits: 8 minutes of the priced machine for 4 trials


def _advance_until(sweep, done, seconds=240):
    """Advance the sweep as beat's sweeps.advance does until `done(sweep, trials)`."""
    deadline = time.monotonic() + seconds
    while True:
        sweep = sweep_advance(sweep.pk)
        trials = list(sweep.trials.select_related("job").order_by("number"))
        if done(sweep, trials) or time.monotonic() > deadline:
            return sweep, trials
        time.sleep(0.3)


@pytest.mark.same_on_any_database(
    "its rows are written by the advance and the supervisor as in tests/sweeps/test_advance.py "
    "and tests/training, which run on both"
)
@pytest.mark.django_db(transaction=True)
def test_a_real_sweep_chooses_prunes_keeps_to_its_budget_and_promotes(
    team, project, detect_version, priced, workers
):
    sweep = submit(
        team,
        project,
        detect_version,
        priced,
        base=base_params(batch=4, imgsz=64, extra_args=FIXED),
        space={
            "box": [0.25, 0.5, 50.0],
            "epochs": [2, 4],
            "lr0": {"low": 1e-3, "high": 1e-2, "log": True},
        },
        metric="val/box_loss",
        n_trials=4,
        parallel=2,
        budget=BUDGET,
        seed=SEED,
        prune_startup_trials=1,
        prune_warmup_epochs=0,
    )
    workers.start()
    sweep, trials = _advance_until(sweep, lambda sweep, trials: len(trials) >= 3)
    assert [t.state for t in trials[:2]] == [TrialState.COMPLETE, TrialState.RUNNING]
    workers.start()
    sweep, trials = _advance_until(
        sweep,
        lambda sweep, trials: (
            sweep.state == SweepState.FINISHED and not any(t.is_open for t in trials)
        ),
    )
    states = [
        (t.number, t.state, t.params, t.job.state, t.intermediate, t.job.started_at, t.ended_at)
        for t in trials
    ]
    assert sweep.state == SweepState.FINISHED, (sweep.notice, states)
    assert sweep.notice == "All 4 trials ended.", states

    first, second, third = trials[:3]
    assert [(t.params["box"], t.params["epochs"]) for t in trials[:3]] == [
        (0.5, 2), (0.25, 4), (50.0, 2),
    ], states  # fmt: skip
    assert first.state == second.state == TrialState.COMPLETE, states
    assert third.state == TrialState.PRUNED and third.pruned_at_epoch >= 1, states
    assert third.intermediate["1"] > 10 * first.intermediate["1"], states
    assert third.job.state in (JobState.STOPPED, JobState.SUCCEEDED)
    for trial in trials:
        assert trial.params["box"] in (0.25, 0.5, 50.0) and trial.params["epochs"] in (2, 4)
        assert 1e-3 <= trial.params["lr0"] <= 1e-2
        assert trial.job.extra_args["lr0"] == trial.params["lr0"]
    assert len({t.params["lr0"] for t in trials}) == 4  # each trial a point of its own

    costs = [spent(t.job) for t in trials]
    assert all(cost > 0 for cost in costs)
    assert sum(costs) <= BUDGET
    assert [t.cost for t in trials] == costs

    model = sweep_promote_best(access=team.access("editor"), sweep=sweep)
    best = min((t for t in trials if t.state == TrialState.COMPLETE), key=lambda t: t.value)
    assert model.job_id == best.job_id and TrainedModel.objects.get(pk=model.pk).is_current
