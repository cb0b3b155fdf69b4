"""Paying for machine time: holds at submit, captures of the seconds used, the rest released;
out of credits or over budget stops the job and keeps its checkpoints; platform failures are
refunded. Real ledger, real worker, real training."""

from datetime import timedelta

import pytest
from django.utils import timezone

from billing.ledger import account_for, job_open_hold
from billing.models import EntryKind, LedgerEntry
from core.errors import ServiceError
from tests.training.helpers import job_reload, submit, wait_state
from training.metering import meter, spent
from training.models import AttemptEnd, JobState, TrainingAttempt, TrainingJob
from training.reaper import jobs_reap

# $3.60 an hour: 1,000 micro-credits a second, 0.9 credits for the 15 minutes a job holds.
PRICE = "3.600"
PER_SECOND = 1000


@pytest.fixture
def priced(gpu_local):
    gpu_local.hourly_price = PRICE
    gpu_local.save()
    gpu_local.refresh_from_db()  # a Decimal, as everywhere else
    return gpu_local


def available(team) -> int:
    return account_for(team.workspace).available


@pytest.mark.django_db
def test_submit_holds_fifteen_minutes_and_refuses_without_credits(
    team, project, detect_version, priced
):
    before = available(team)
    job = submit(team, project, detect_version, priced)
    assert job_open_hold(job) == 15 * 60 * PER_SECOND
    assert available(team) == before - 15 * 60 * PER_SECOND
    account = account_for(team.workspace)
    account.balance = account.held + 100  # almost nothing left
    account.save()
    with pytest.raises(ServiceError, match="credits"):
        submit(team, project, detect_version, priced)
    assert TrainingJob.objects.count() == 1


@pytest.mark.django_db
def test_the_plan_limits_jobs_at_a_time(team, project, detect_version, gpu_local):
    limit = team.workspace.plan.max_concurrent_jobs
    for _ in range(limit):
        submit(team, project, detect_version, gpu_local)
    with pytest.raises(ServiceError, match=f"runs {limit} training jobs at a time"):
        submit(team, project, detect_version, gpu_local)


@pytest.mark.django_db
def test_repeated_and_missed_heartbeats_charge_the_right_seconds(
    team, project, detect_version, priced
):
    job = submit(team, project, detect_version, priced)
    start = timezone.now() - timedelta(seconds=100)
    attempt = TrainingAttempt.objects.create(job=job, number=1, worker="w")
    TrainingAttempt.objects.filter(pk=attempt.pk).update(started_at=start)
    meter(attempt.pk, start + timedelta(seconds=10))
    meter(attempt.pk, start + timedelta(seconds=10))  # the same beat twice
    assert spent(job) == 10 * PER_SECOND
    meter(attempt.pk, start + timedelta(seconds=40))  # two beats missed: caught up
    assert spent(job) == 40 * PER_SECOND
    meter(attempt.pk, start + timedelta(seconds=30))  # late and out of order: nothing
    assert spent(job) == 40 * PER_SECOND
    captures = LedgerEntry.objects.filter(job_id=job.pk, kind=EntryKind.CAPTURE).count()
    assert captures == 2


@pytest.mark.django_db
def test_a_cloud_attempt_is_charged_from_the_moment_its_instance_is_rented(
    team, project, detect_version, priced
):
    """Waiting in the provider's queue costs nothing; from provisioning on, the instance is
    billed to the operator, so the job is charged from then, not from its first batch."""
    job = submit(team, project, detect_version, priced)
    start = timezone.now() - timedelta(seconds=300)
    attempt = TrainingAttempt.objects.create(job=job, number=1, worker="w")
    phases = [{"phase": "queued", "label": "Queued at the provider", "at": start.isoformat()}]
    TrainingAttempt.objects.filter(pk=attempt.pk).update(started_at=start, provider_phases=phases)
    meter(attempt.pk, start + timedelta(seconds=30))
    assert spent(job) == 0  # still queued
    phases.append(
        {
            "phase": "provisioning",
            "label": "Provisioning",
            "at": (start + timedelta(seconds=60)).isoformat(),
        }
    )
    phases.append(
        {"phase": "running", "label": "Running", "at": (start + timedelta(seconds=90)).isoformat()}
    )
    TrainingAttempt.objects.filter(pk=attempt.pk).update(provider_phases=phases)
    meter(attempt.pk, start + timedelta(seconds=160))
    assert spent(job) == 100 * PER_SECOND


@pytest.mark.django_db(transaction=True)
def test_a_real_job_is_charged_its_machine_time_and_releases_the_rest(
    team, project, detect_version, priced, workers
):
    before = account_for(team.workspace).balance
    job = submit(team, project, detect_version, priced, epochs=3)
    workers.start()
    job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED)
    assert job.state == JobState.SUCCEEDED, job.error
    attempt = job.attempt_rows.get()
    lifetime = (attempt.ended_at - attempt.started_at).total_seconds()
    assert abs(attempt.billed_seconds - lifetime) <= 1.0  # within one heartbeat (1 s here)
    assert spent(job) == pytest.approx(lifetime * PER_SECOND, abs=1.0 * PER_SECOND)
    account = account_for(team.workspace)
    assert account.held == 0 and job_open_hold(job) == 0
    assert account.balance == before - spent(job)


@pytest.mark.django_db(transaction=True)
def test_a_budget_cap_stops_the_job_and_keeps_its_checkpoints(
    team, project, detect_version, priced, workers
):
    job = submit(team, project, detect_version, priced, epochs=60)
    TrainingJob.objects.filter(pk=job.pk).update(budget_cap=4 * PER_SECOND)  # four seconds
    workers.start()
    job = wait_state(job, JobState.STOPPED, JobState.SUCCEEDED, JobState.FAILED, timeout=120)
    assert job.state == JobState.STOPPED and "budget cap" in job.error
    assert job.checkpoint_epoch and job.epochs_done < 60
    assert job_open_hold(job) == 0


@pytest.mark.django_db
def test_a_run_lost_three_times_is_refunded(team, project, detect_version, priced):
    job = submit(team, project, detect_version, priced)
    long_ago = timezone.now() - timedelta(minutes=5)
    attempt = TrainingAttempt.objects.create(job=job, number=3, worker="gone:1:x")
    TrainingAttempt.objects.filter(pk=attempt.pk).update(
        started_at=long_ago - timedelta(seconds=60)
    )
    TrainingJob.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING, heartbeat_at=long_ago, lost_attempts=2, attempts=3,
        lease_owner="gone:1:x", lease_until=long_ago,
    )  # fmt: skip
    assert jobs_reap() == 1
    job = job_reload(job)
    assert job.state == JobState.FAILED
    assert job.attempt_rows.get().end_reason == AttemptEnd.LOST
    assert job.attempt_rows.get().billed_seconds == pytest.approx(60, abs=0.01)
    assert spent(job) == 0  # charged 60 s up to its last heartbeat, then given back
    refund = LedgerEntry.objects.get(job_id=job.pk, kind=EntryKind.REFUND)
    assert refund.amount == 60 * PER_SECOND and "Kestrel's side" in refund.reason
    assert job_open_hold(job) == 0


@pytest.mark.django_db
def test_a_long_job_holds_its_estimate(team, project, detect_version, priced):
    from training.estimator import config_of_job, estimate

    job = submit(team, project, detect_version, priced, epochs=3000)
    expected = estimate(config_of_job(job), priced).seconds
    assert expected > 15 * 60
    assert job_open_hold(job) == pytest.approx(expected * PER_SECOND, rel=0.001)


@pytest.mark.django_db
def test_the_job_page_shows_the_credits_used_and_still_held(
    client, team, project, detect_version, priced
):
    job = submit(team, project, detect_version, priced)
    start = timezone.now() - timedelta(seconds=100)
    attempt = TrainingAttempt.objects.create(job=job, number=1, worker="w")
    TrainingAttempt.objects.filter(pk=attempt.pk).update(started_at=start)
    meter(attempt.pk, start + timedelta(seconds=90))  # 0.09 credits
    client.force_login(team.viewer)
    page = client.get(f"/w/acme/training/jobs/{job.pk}/").content.decode()
    assert '<span data-testid="job-cost-spent">0.09</span>' in page
    # 15 minutes held, 90 s of it spent: 0.81, to the cent like the page's other figures.
    assert '<span data-testid="job-cost-held-figure">0.81</span> more held' in page


@pytest.mark.django_db
def test_the_live_state_carries_the_credits_and_says_none_are_held_after_a_stop(
    team, project, detect_version, priced
):
    """Issue 16: after Stop the header said "0.885326 more held for the estimate" until a reload.
    The live state (the stream's state and end events) carries the credits, rounded."""
    from asgiref.sync import async_to_sync

    from training.live import job_state
    from training.selectors import job_state_dict
    from training.services.jobs import job_stop, job_transition

    job = submit(team, project, detect_version, priced)
    start = timezone.now() - timedelta(seconds=100)
    attempt = TrainingAttempt.objects.create(job=job, number=1, worker="w")
    TrainingAttempt.objects.filter(pk=attempt.pk).update(started_at=start)
    meter(attempt.pk, start + timedelta(seconds=14.674))  # 14,674 micro-credits spent
    TrainingJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING)
    job = job_reload(job)
    running = job_state_dict(job)["cost"]
    assert running["spent"] == spent(job) and running["held"] == job_open_hold(job) > 0
    assert running["spent_text"] == "0.01" and running["held_text"] == "0.89"  # not 0.885326
    assert async_to_sync(job_state)(job.pk)["cost"] == running  # as the event stream reads it

    job_stop(access=team.access("editor"), job=job)
    job_transition(job_reload(job), JobState.STOPPED)  # what the supervisor does after the batch
    stopped = async_to_sync(job_state)(job.pk)
    assert stopped["state"] == JobState.STOPPED
    assert stopped["cost"]["held"] == 0 and stopped["cost"]["spent_text"] == "0.01"
    assert job_state_dict(job_reload(job))["cost"] == stopped["cost"]


@pytest.mark.django_db
def test_a_free_machine_has_no_credits_in_the_live_state(team, project, detect_version, gpu_local):
    from training.selectors import job_state_dict

    assert job_state_dict(submit(team, project, detect_version, gpu_local))["cost"] is None


@pytest.mark.django_db
def test_a_free_machine_shows_no_credits(client, team, project, detect_version, gpu_local):
    job = submit(team, project, detect_version, gpu_local)
    client.force_login(team.viewer)
    page = client.get(f"/w/acme/training/jobs/{job.pk}/").content.decode()
    assert 'data-testid="job-cost"' not in page
