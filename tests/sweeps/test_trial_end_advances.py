"""A trial's job that ends advances its sweep at once (training's job_ended signal, sweeps'
receiver, the sweeps.advance task on a real worker): the next trial starts without waiting for
beat's next tick. Beat does not run here and the test never advances the sweep itself, so only
the signal can start trial 2."""

import time

import pytest
from django.conf import settings

from tests.sweeps.conftest import submit
from tests.sweeps.test_advance import METRIC, job_ends, job_runs, trials_of
from tests.training.conftest import gpu_local, project, workers  # noqa: F401 (fixtures)
from tests.training.factories import small_version
from training.models import JobState


def _trials_when(sweep, count: int, seconds: float = 60) -> list:
    deadline = time.monotonic() + seconds
    while (trials := trials_of(sweep)) and len(trials) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    return trials_of(sweep)


@pytest.mark.django_db(transaction=True)
def test_a_trial_that_ends_starts_the_next_at_once(team, project, gpu_local, workers):  # noqa: F811
    workers.start(settings.CELERY_TASK_DEFAULT_QUEUE)  # where sweeps.advance goes
    version = small_version(access=team.access("owner"))
    sweep = submit(team, project, version, gpu_local, n_trials=3, parallel=1)
    deadline = time.monotonic() + 60
    while not trials_of(sweep) and time.monotonic() < deadline:  # the submit's own advance
        time.sleep(0.2)
    (first,) = trials_of(sweep)

    job_runs(first.job, 0.2)
    time.sleep(1)
    assert len(trials_of(sweep)) == 1  # one at a time: a running trial starts nothing

    job_ends(first.job, final={METRIC: 0.3})
    trials = _trials_when(sweep, 2)
    assert [t.number for t in trials] == [1, 2], "the ended trial did not advance its sweep"
    assert trials[0].value == 0.3 and trials[1].job.state == JobState.QUEUED

    job_ends(trials[1].job, JobState.CANCELED)  # however it ends
    assert [t.number for t in _trials_when(sweep, 3)] == [1, 2, 3]
