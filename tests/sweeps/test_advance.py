"""Advancing a sweep (the step beat runs): trials are started as ordinary jobs with the
sampler's arguments, ended jobs give their trial its result, a running trial clearly worse
than the complete ones is pruned (its job stopped as a person stops it), and no trial is ever
started that what is left of the budget cannot hold. The jobs' lives are written here as the
supervisor writes them (states through training's state machine, epochs, metered seconds)."""

import math
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from billing.ledger import credits_format
from sweeps.models import SweepState, TrialState
from sweeps.services.advance import sweep_advance
from sweeps.services.budget import sweep_credits, trial_committed, trial_estimate
from sweeps.services.submit import sweep_promote_best, sweep_resume, sweep_stop
from tests.sweeps.conftest import PER_SECOND, base_params, submit
from tests.training.factories import small_version
from training.metering import meter, spent
from training.models import EpochMetric, JobState, TrainedModel, TrainingAttempt
from training.services.jobs import job_locked, job_transition

METRIC = "metrics/mAP50-95(B)"


@pytest.fixture
def version(team):
    return small_version(access=team.access("owner"))


def job_runs(job, *values):
    """Its trainer started and reported these epochs."""
    with transaction.atomic():
        locked = job_locked(job.pk)
        for state in (JobState.PROVISIONING, JobState.PREPARING, JobState.RUNNING):
            if locked.state not in (JobState.RUNNING, JobState.STOPPING):
                job_transition(locked, state)
    for epoch, value in enumerate(values, start=1):
        EpochMetric.objects.update_or_create(
            job=job, epoch=epoch, defaults={"attempt": 1, "values": {METRIC: value}}
        )


def job_ends(job, state=JobState.SUCCEEDED, final=None):
    with transaction.atomic():
        job_transition(job_locked(job.pk), state, final_metrics=final or {})


def job_spends(job, seconds: int):
    """Metered as its heartbeats meter it: `seconds` of its machine."""
    attempt = TrainingAttempt.objects.create(job=job, number=1, worker="w")
    start = timezone.now() - timedelta(seconds=seconds)
    TrainingAttempt.objects.filter(pk=attempt.pk).update(started_at=start)
    return meter(attempt.pk, start + timedelta(seconds=seconds))


def trials_of(sweep):
    return list(sweep.trials.select_related("job").order_by("number"))


@pytest.mark.django_db
def test_trials_are_jobs_results_are_recorded_and_a_clearly_worse_trial_is_pruned(
    team, project, version, gpu_local
):
    space = {"lr0": {"low": 1e-4, "high": 1e-1, "log": True}, "imgsz": [64, 96]}
    sweep = submit(
        team, project, version, gpu_local, space=space, prune_startup_trials=1,
        prune_warmup_epochs=0, parallel=2,
    )  # fmt: skip
    sweep_advance(sweep.pk)
    sweep_advance(sweep.pk)  # idempotent: nothing more to do
    first, second = trials_of(sweep)
    for trial in (first, second):
        job = trial.job
        assert job.state == JobState.QUEUED and job.project == project
        assert job.name == f"{sweep.title} · trial {trial.number}"
        assert job.imgsz == trial.params["imgsz"] in (64, 96)
        assert job.extra_args == {"plots": False, "lr0": trial.params["lr0"]}
        assert 1e-4 <= trial.params["lr0"] <= 1e-1
    assert first.params != second.params

    job_runs(first.job, 0.30, 0.50)
    job_ends(first.job, final={METRIC: 0.55})
    job_runs(second.job, 0.01)  # far below the complete trial's 0.30 after its first epoch
    sweep_advance(sweep.pk)
    first, second, third = trials_of(sweep)
    assert (first.state, first.value, first.intermediate) == (
        TrialState.COMPLETE, 0.55, {"1": 0.30, "2": 0.50},
    )  # fmt: skip
    assert (second.state, second.pruned_at_epoch, second.value) == (TrialState.PRUNED, 1, 0.01)
    assert second.job.state == JobState.STOPPING  # stopped as a person would
    assert third.state == TrialState.RUNNING  # the pruned one still holds its place until it ends

    job_runs(second.job, 0.01, 0.02)  # it finished its epoch while stopping
    job_ends(second.job, state=JobState.STOPPED)
    job_runs(third.job, 0.40)
    sweep_advance(sweep.pk)
    second, third, fourth = trials_of(sweep)[1:]
    assert second.state == TrialState.PRUNED and second.ended_at is not None
    assert second.intermediate == {"1": 0.01}  # what it was pruned for
    assert third.state == TrialState.RUNNING  # 0.40 ≥ the median (0.30): it goes on
    for trial, value in ((third, 0.6), (fourth, 0.2)):
        job_runs(trial.job, value)
        job_ends(trial.job, final={METRIC: value})
    sweep_advance(sweep.pk)
    sweep.refresh_from_db()
    assert sweep.state == SweepState.FINISHED and sweep.notice == "All 4 trials ended."
    assert len(trials_of(sweep)) == 4

    third = trials_of(sweep)[2]
    model = TrainedModel.objects.create(
        workspace=team.workspace, project=project, job=third.job, name="trial 3",
        task="detect", architecture="yolo11n", imgsz=64, weights_key="k",
    )  # fmt: skip
    assert sweep_promote_best(access=team.access("editor"), sweep=sweep) == model
    model.refresh_from_db()
    assert model.is_current


@pytest.mark.django_db
def test_no_trial_starts_that_what_is_left_of_the_budget_cannot_hold(
    client, team, project, version, priced
):
    estimate = trial_estimate(gpu=priced, version=version, params=base_params())
    budget = estimate.credits + estimate.credits // 2  # one trial, and half of another
    sweep = submit(team, project, version, priced, space={"lr0": [0.01, 0.02]}, budget=budget)
    sweep_advance(sweep.pk)
    [first] = trials_of(sweep)
    assert first.estimate == estimate.credits
    assert estimate.credits <= first.budget_cap == first.job.budget_cap <= budget
    sweep.refresh_from_db()
    assert sweep.state == SweepState.RUNNING
    assert sweep.notice.startswith("Waiting for running trials to end")

    job_runs(first.job, 0.3)
    seconds = math.ceil((estimate.credits // 2 + 1) / PER_SECOND)  # more than half a trial
    job_spends(first.job, seconds)
    job_ends(first.job, final={METRIC: 0.3})
    sweep_advance(sweep.pk)
    sweep.refresh_from_db()
    assert len(trials_of(sweep)) == 1  # the rest could not hold trial 2
    assert sweep.state == SweepState.FINISHED
    assert "cannot hold trial 2" in sweep.notice and "it is estimated at" in sweep.notice
    assert spent(first.job) == seconds * PER_SECOND <= budget
    assert trial_committed(trials_of(sweep)[0]) == spent(first.job)
    credits = sweep_credits(sweep, trials_of(sweep))
    assert (credits.spent, credits.held, credits.remaining) == (
        spent(first.job), 0, budget - spent(first.job),
    )  # fmt: skip
    client.force_login(team.viewer)
    page = client.get(f"/w/acme/sweeps/{sweep.pk}/").content.decode()
    assert f'<strong data-testid="sweep-spent">{credits_format(credits.spent)}</strong>' in page


@pytest.mark.django_db
def test_a_trials_job_is_never_charged_past_its_cap(team, project, version, priced):
    sweep = submit(team, project, version, priced, budget=10**9)
    sweep_advance(sweep.pk)
    job = trials_of(sweep)[0].job
    type(job).objects.filter(pk=job.pk).update(budget_cap=5 * PER_SECOND)
    job_runs(job)
    reason = job_spends(job, 100)  # a hundred seconds of a five-second cap
    assert spent(job) == 5 * PER_SECOND
    assert "budget cap" in reason


@pytest.mark.django_db
def test_stop_stops_the_running_trials_and_resume_asks_again(team, project, version, gpu_local):
    sweep = submit(team, project, version, gpu_local, parallel=2)
    sweep_advance(sweep.pk)
    for trial in trials_of(sweep):
        job_runs(trial.job, 0.1)
    sweep = sweep_stop(access=team.access("editor"), sweep=sweep)
    assert sweep.state == SweepState.STOPPED
    assert {t.job.state for t in trials_of(sweep)} == {JobState.STOPPING}
    for trial in trials_of(sweep):
        job_ends(trial.job, state=JobState.STOPPED)
    sweep_advance(sweep.pk)
    assert [t.state for t in trials_of(sweep)] == [TrialState.STOPPED, TrialState.STOPPED]
    sweep_resume(access=team.access("editor"), sweep=sweep)
    sweep_advance(sweep.pk)
    assert [t.number for t in trials_of(sweep) if t.state == TrialState.RUNNING] == [3, 4]
