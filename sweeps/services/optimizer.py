"""The optimizer: Optuna's TPE sampler proposes each trial's point and its median pruner judges a
running trial from its epochs, over a study rebuilt in memory from the sweep's own rows every
time the sweep advances. No Optuna storage: the rows are the one store, on SQLite as on
PostgreSQL, and the same rows give the same study.

Plain data in, plain data out (no database): the advance (sweeps.services.advance) and the
bench (bench/sweep.py) go through the same functions."""

import logging
import warnings
from dataclasses import dataclass, field

from sweeps.models import TrialState
from sweeps.services.space import Dimension

logger = logging.getLogger(__name__)

# A new point is asked again (another seed) when it repeats one tried already, this many times
# at most: on a space of lists TPE may propose a point twice, which would waste a trial.
DUPLICATE_RETRIES = 12


@dataclass(frozen=True)
class Observed:
    """A trial as the study sees it."""

    number: int
    params: dict
    state: str  # TrialState
    value: float | None = None
    intermediate: dict[int, float] = field(default_factory=dict)


def tpe_startup_trials(n_trials: int) -> int:
    """Trials TPE samples at random before it models the good and the bad: a quarter of the
    sweep, from 2 to Optuna's own default of 10."""
    return max(2, min(10, n_trials // 4))


def _optuna():
    import optuna  # ~0.5 s: only where a sweep advances, never for a page

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def distributions(dimensions: list[Dimension]) -> dict:
    optuna = _optuna()
    d = optuna.distributions
    found = {}
    for dim in dimensions:
        if dim.choices:
            found[dim.name] = d.CategoricalDistribution(list(dim.choices))
        elif dim.is_int:
            found[dim.name] = d.IntDistribution(
                int(dim.low), int(dim.high), log=dim.log, step=dim.step or 1
            )
        else:
            found[dim.name] = d.FloatDistribution(float(dim.low), float(dim.high), log=dim.log)
    return found


def _frozen(optuna, spaces: dict, trial: Observed):
    """The trial as an Optuna FrozenTrial, or None when it no longer fits the space."""
    states = {
        TrialState.COMPLETE: optuna.trial.TrialState.COMPLETE,
        TrialState.PRUNED: optuna.trial.TrialState.PRUNED,
        # Cut short by a person or its cap: what it reached counts as a pruned trial's does.
        TrialState.STOPPED: optuna.trial.TrialState.PRUNED,
        TrialState.FAILED: optuna.trial.TrialState.FAIL,
        TrialState.RUNNING: optuna.trial.TrialState.RUNNING,
    }
    state = states[trial.state]
    if state == optuna.trial.TrialState.COMPLETE and trial.value is None:
        state = optuna.trial.TrialState.FAIL
    params = {k: v for k, v in trial.params.items() if k in spaces}
    if set(params) != set(spaces):
        return None
    try:
        return optuna.trial.create_trial(
            state=state,
            params=params,
            distributions=spaces,
            value=trial.value if state == optuna.trial.TrialState.COMPLETE else None,
            intermediate_values={int(k): float(v) for k, v in trial.intermediate.items()},
        )
    except ValueError:  # a value outside the space (it cannot be, unless rows were edited)
        logger.warning("trial %s left out of the study: %s", trial.number, trial.params)
        return None


def study_rebuild(
    *, dimensions: list[Dimension], observed: list[Observed], direction: str, sampler=None
):
    """An in-memory study holding every observed trial."""
    optuna = _optuna()
    spaces = distributions(dimensions)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Optuna's experimental-feature notes
        study = optuna.create_study(direction=direction, sampler=sampler)
        for trial in observed:
            frozen = _frozen(optuna, spaces, trial)
            if frozen is not None:
                study.add_trial(frozen)
    return study, spaces


def sampler_seed(seed: int, number: int, retry: int = 0) -> int:
    """The sampler's seed for trial `number` of a sweep seeded `seed`: the same sweep asks the
    same points; each trial gets a seed of its own (a sampler made anew with one seed would
    draw the same first point every time)."""
    return (seed * 1_000_003 + number * 7_919 + retry * 104_729) % 2**32


def _key(params: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


def propose(
    *,
    dimensions: list[Dimension],
    observed: list[Observed],
    direction: str,
    seed: int,
    number: int,
    startup_trials: int,
) -> dict:
    """The next point to try (trial `number`), as TPE samples it given every trial so far;
    running ones are in the study too (TPE's constant liar keeps it from piling onto them)."""
    optuna = _optuna()
    tried = {_key(t.params) for t in observed}
    point: dict = {}
    for retry in range(DUPLICATE_RETRIES):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sampler = optuna.samplers.TPESampler(
                seed=sampler_seed(seed, number, retry),
                n_startup_trials=startup_trials,
                constant_liar=True,
            )
            study, spaces = study_rebuild(
                dimensions=dimensions, observed=observed, direction=direction, sampler=sampler
            )
            point = study.ask(spaces).params
        if _key(point) not in tried:
            break
    return {d.name: point[d.name] for d in dimensions}


def prune_decision(
    *,
    dimensions: list[Dimension],
    observed: list[Observed],
    direction: str,
    running: Observed,
    startup_trials: int,
    warmup_epochs: int,
) -> bool:
    """Whether Optuna's median pruner stops `running` now: its best epoch so far is worse than
    the median of the complete trials at the same epoch, once `startup_trials` are complete and
    after its first `warmup_epochs` epochs."""
    optuna = _optuna()
    study, spaces = study_rebuild(
        dimensions=dimensions,
        observed=[t for t in observed if t.number != running.number],
        direction=direction,
    )
    frozen = _frozen(optuna, spaces, Observed(**{**running.__dict__, "state": "running"}))
    if frozen is None or frozen.last_step is None:
        return False
    pruner = optuna.pruners.MedianPruner(
        n_startup_trials=startup_trials, n_warmup_steps=warmup_epochs + 1
    )
    return bool(pruner.prune(study, frozen))
