"""The beat task that keeps cloud machines from outliving their jobs, on real attempt rows,
with SkyPilot answered at sky_sdk's edge (no cloud is reachable here)."""

import importlib.util
import time
from decimal import Decimal

import pytest

from tests.training.helpers import submit
from training import tasks
from training.models import GpuType, TrainingAttempt
from training.providers import sky_sdk

pytestmark = pytest.mark.django_db


def managed(job_id, status="RUNNING", *, name=None, age=3600.0, terminal=False):
    return sky_sdk.ManagedJob(
        job_id=job_id,
        name=name or f"kestrel-job-{job_id}-1",
        status=status,
        failure_reason="",
        submitted_at=time.time() - age,
        terminal=terminal,
        failed=False,
    )


@pytest.fixture
def sky(monkeypatch, settings):
    settings.TRAINING_PROVIDERS = ["local", "skypilot"]
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: object() if n == "sky" else found(n, *a)
    )
    state = {"listed": [], "cancelled": []}

    def jobs(*, job_ids=None, skip_finished=False):
        listed = state["listed"]
        if job_ids is not None:
            return [j for j in listed if j.job_id in set(job_ids)]
        return [j for j in listed if not (skip_finished and j.terminal)]

    monkeypatch.setattr(sky_sdk, "jobs", jobs)
    monkeypatch.setattr(sky_sdk, "cancel", lambda ids: state["cancelled"].extend(ids))
    return state


def test_orphans_are_cancelled_and_live_attempts_jobs_kept(
    sky, team, project, detect_version, gpu_local
):
    gpu = GpuType.objects.create(
        slug="h100", name="H100", vram_gb=80, hourly_price=Decimal("3"), provider="skypilot"
    )
    job = submit(team, project, detect_version, gpu_local)
    job.gpu_type = gpu
    job.save(update_fields=["gpu_type"])
    TrainingAttempt.objects.create(job=job, number=1, worker="w", provider_ref="11")
    ended = TrainingAttempt.objects.create(job=job, number=2, worker="w", provider_ref="13")
    ended.ended_at = ended.started_at
    ended.save(update_fields=["ended_at"])
    sky["listed"] = [
        managed(11),  # the live attempt's: kept
        managed(12),  # Kestrel's, no live attempt: cancelled
        managed(13),  # an ended attempt's, still renting: cancelled
        managed(14, age=30),  # launched a moment ago: not yet on its row
        managed(15, name="someone-elses-job"),  # the operator's own: never touched
        managed(16, "SUCCEEDED", terminal=True),
    ]
    assert tasks.skypilot_reconcile() == {"cancelled": [12, 13], "gone": []}
    assert sky["cancelled"] == [12, 13]
    sky["listed"], sky["cancelled"] = [], []
    assert tasks.skypilot_reconcile() == {"cancelled": [], "gone": [11]}


def test_without_skypilot_the_beat_does_nothing(settings, monkeypatch):
    settings.TRAINING_PROVIDERS = ["local"]
    monkeypatch.setattr(sky_sdk, "jobs", lambda **kw: pytest.fail("SkyPilot was asked"))
    assert tasks.skypilot_reconcile() == {}
