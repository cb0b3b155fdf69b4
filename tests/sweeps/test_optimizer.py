"""The optimizer over a study rebuilt from rows: TPE proposes points within the space, the same
rows give the same point, and the median pruner stops a trial clearly worse than the complete
ones at the same epoch. No database: plain rows in, as the advance reads them."""

from sweeps.services.optimizer import Observed, propose, prune_decision, study_rebuild
from sweeps.services.space import space_clean, space_dimensions

SPACE = space_clean(
    {
        "lr0": {"low": 1e-4, "high": 1e-1, "log": True},
        "imgsz": [64, 128],
        "optimizer": ["SGD", "AdamW"],
        "epochs": {"low": 1, "high": 3},
    }
)
DIMS = space_dimensions(SPACE)


def _ask(observed, number, seed=7):
    return propose(
        dimensions=DIMS,
        observed=observed,
        direction="maximize",
        seed=seed,
        number=number,
        startup_trials=2,
    )


def test_the_sampler_proposes_within_the_space_and_the_same_rows_give_the_same_point():
    observed = []
    for number in range(1, 9):
        point = _ask(observed, number)
        assert 1e-4 <= point["lr0"] <= 1e-1
        assert point["imgsz"] in (64, 128) and point["optimizer"] in ("SGD", "AdamW")
        assert isinstance(point["epochs"], int) and 1 <= point["epochs"] <= 3
        assert _ask(observed, number) == point  # reproducible from the rows alone
        value = 1 - abs(point["lr0"] - 0.01) * 10  # a toy metric, best at lr0 0.01
        observed.append(Observed(number=number, params=point, state="complete", value=value))
    assert len({o.params["lr0"] for o in observed}) == 8  # never the same point twice
    assert _ask(observed, 9, seed=8) != _ask(observed, 9, seed=7)


def test_the_study_is_rebuilt_from_every_kind_of_row():
    observed = [
        Observed(1, {"lr0": 0.01, "imgsz": 64, "optimizer": "SGD", "epochs": 2}, "complete", 0.5),
        Observed(2, {"lr0": 0.02, "imgsz": 64, "optimizer": "SGD", "epochs": 2}, "pruned", 0.1),
        Observed(3, {"lr0": 0.03, "imgsz": 64, "optimizer": "SGD", "epochs": 2}, "stopped", 0.2),
        Observed(4, {"lr0": 0.04, "imgsz": 64, "optimizer": "SGD", "epochs": 2}, "failed"),
        Observed(5, {"lr0": 0.05, "imgsz": 64, "optimizer": "SGD", "epochs": 2}, "running"),
        Observed(6, {"lr0": 0.05, "imgsz": 64, "optimizer": "SGD", "epochs": 2}, "complete"),
        Observed(7, {"lr0": 9.0, "imgsz": 64, "optimizer": "SGD", "epochs": 2}, "complete", 0.9),
    ]
    study, _ = study_rebuild(dimensions=DIMS, observed=observed, direction="maximize")
    states = [t.state.name for t in study.trials]
    # No value: failed. Outside the space (rows edited by hand): left out.
    assert states == ["COMPLETE", "PRUNED", "PRUNED", "FAIL", "RUNNING", "FAIL"]
    assert study.best_value == 0.5


def _trial(number, state, *values, value=None):
    params = {"lr0": 0.01, "imgsz": 64, "optimizer": "SGD", "epochs": 3}
    intermediate = {epoch: v for epoch, v in enumerate(values, start=1)}
    return Observed(number, params, state, value, intermediate)


def _prunes(observed, running, startup=1, warmup=0, direction="maximize"):
    return prune_decision(
        dimensions=DIMS,
        observed=observed,
        direction=direction,
        running=running,
        startup_trials=startup,
        warmup_epochs=warmup,
    )


def test_the_pruner_stops_a_trial_clearly_worse_than_the_complete_ones():
    done = [
        _trial(1, "complete", 0.30, 0.50, 0.60, value=0.6),
        _trial(2, "complete", 0.35, 0.55, 0.65, value=0.65),
    ]
    worse, as_good = _trial(3, "running", 0.05), _trial(4, "running", 0.40)
    assert _prunes(done, worse)
    assert not _prunes(done, as_good)
    assert not _prunes(done, worse, startup=3)  # not before three trials are complete
    assert not _prunes(done, worse, warmup=1)  # its first epoch always runs
    assert _prunes(done, _trial(3, "running", 0.05, 0.06), warmup=1)
    losses = [_trial(1, "complete", 1.0, 0.8, value=0.8), _trial(2, "complete", 1.1, 0.9)]
    assert _prunes(losses, _trial(3, "running", 3.0), direction="minimize")
    assert not _prunes(losses, _trial(3, "running", 0.7), direction="minimize")
