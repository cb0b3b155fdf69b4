"""The SkyPilot provider: the task it builds for a GPU type, SkyPilot's managed-job statuses as
Kestrel's phases, SkyPilot's errors as ProviderErrors, the deadline on `sky.get`, and the
reconciliation that leaves no cloud machine without its job.

No cloud and no SkyPilot API server is reachable here: SkyPilot is answered at the edge of
training.providers.sky_sdk (its `sky_module()` for the adapter's own tests, its functions for the
provider's). Where `sky` is importable (pip install -e '.[cloud]'), the task is also parsed
by SkyPilot's own parser and a call is sent to the missing API server for real.
"""

import contextlib
import enum
import importlib.util
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.training.helpers import job_reload, submit, wait_for, wait_state
from training.models import EpochMetric, GpuType, JobState, TrainedModel
from training.providers import ProviderError, provider_for, sky_sdk
from training.providers.skypilot import (
    JOB_NAME_PREFIX,
    ProviderPhase,
    SkyPilotProvider,
    phase_for,
    resources_for,
    task_config,
)
from training.providers.skypilot_reconcile import reconcile_plan, skypilot_reconcile

SKY_INSTALLED = importlib.util.find_spec("sky") is not None
needs_sky = pytest.mark.skipif(
    not SKY_INSTALLED, reason="SkyPilot is not installed here (pip install -e '.[cloud]')"
)
TOKEN = "7.4f3c9e-secret-token"
JOB_URL = "https://kestrel.example.com/api/v1/trainer/jobs/7"
H100 = {
    "accelerators": "H100",
    "count": 2,
    "use_spot": True,
    "disk_size": 200,
    "infra": ["aws/us-east-1", "gcp"],
    "max_restarts_on_errors": 2,
}
# SkyPilot 0.14.1's ManagedJobStatus, read from sky/jobs/state.py (terminal: its
# terminal_statuses()); test_every_status_of_the_installed_skypilot_maps asks the library.
STATUSES = {
    "PENDING": False, "SUBMITTED": False, "STARTING": False, "RUNNING": False,
    "WINDING_DOWN": False, "RECOVERING": False, "CANCELLING": False, "SUCCEEDED": True,
    "CANCELLED": True, "FAILED": True, "FAILED_SETUP": True, "FAILED_PRECHECKS": True,
    "FAILED_NO_RESOURCE": True, "FAILED_CONTROLLER": True,
}  # fmt: skip


@pytest.fixture(autouse=True)
def _no_local_api_server(monkeypatch, tmp_path):
    """SkyPilot must never start an API server or write to the real ~/.sky."""
    monkeypatch.setenv("SKYPILOT_DISABLE_LOCAL_API_SERVER", "1")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SKYPILOT_API_SERVER_ENDPOINT", raising=False)
    (tmp_path / "home").mkdir()


@pytest.fixture
def skypilot_settings(settings):
    settings.TRAINING_PROVIDERS = ["local", "skypilot"]
    settings.TRAINING_EVENTS_URL = "https://kestrel.example.com/"
    settings.TRAINING_SKYPILOT_TYPES = {"h100-80gb": H100}
    return settings


def managed(job_id, status, *, name=None, reason="", submitted_at=0.0):
    return sky_sdk.ManagedJob(
        job_id=job_id,
        name=name or f"{JOB_NAME_PREFIX}{job_id}-attempt-1",
        status=status,
        failure_reason=reason,
        submitted_at=submitted_at,
        terminal=STATUSES[status],
        failed=status.startswith("FAILED"),
    )


# --- the task ---------------------------------------------------------------------------------


def test_the_task_of_a_gpu_type_field_by_field():
    config = task_config(options=H100, job_url=JOB_URL, token=TOKEN, name="kestrel-job-7-attempt-1")

    assert config["name"] == "kestrel-job-7-attempt-1"
    assert config["resources"] == {
        "accelerators": "H100:2",
        "use_spot": True,
        "disk_size": 200,
        "job_recovery": {"strategy": "EAGER_NEXT_REGION", "max_restarts_on_errors": 2},
        "any_of": [{"infra": "aws/us-east-1"}, {"infra": "gcp"}],
    }
    # The token and URL are secrets, read by the trainer from its environment.
    assert config["secrets"] == {"KESTREL_JOB_URL": JOB_URL, "KESTREL_TRAINER_TOKEN": TOKEN}
    assert not {"KESTREL_JOB_URL", "KESTREL_TRAINER_TOKEN"} & set(config["envs"])
    assert TOKEN not in json.dumps({k: v for k, v in config.items() if k != "secrets"})
    assert config["run"].strip() == (
        'cd ~/kestrel && python3 -m training.process.runner --remote "$KESTREL_JOB_URL"'
    )
    assert config["api_server_access"] is False
    # Set-up installs what the trainer imports at this server's own versions.
    from importlib.metadata import version

    for distribution in ("ultralytics", "torch", "torchvision", "pydantic", "psutil"):
        pinned = f"{distribution}=={version(distribution).split('+')[0]}"
        assert pinned in config["setup"], pinned
    assert config["setup"].startswith("set -e")
    # The trainer's code goes with it; nothing else of the server.
    [(remote, local)] = config["file_mounts"].items()
    assert remote == "~/kestrel/training" and local.endswith("/training")


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"accelerators": "L4"}, {"accelerators": "L4:1", "use_spot": False}),
        ({"accelerators": "A100-80GB", "infra": "k8s/my-ctx"}, {"infra": "k8s/my-ctx"}),
        (
            {"accelerators": "H100", "clouds": ["aws", "gcp"], "regions": ["us-east-1"]},
            {"any_of": [{"infra": "aws/us-east-1"}, {"infra": "gcp/us-east-1"}]},
        ),
        ({"accelerators": "H100", "clouds": ["nebius"]}, {"infra": "nebius"}),
        ({"accelerators": "H100", "regions": ["eu-west-1"]}, {"infra": "*/eu-west-1"}),
    ],
)
def test_resources_of_the_options(options, expected):
    resources = resources_for(options)

    assert expected.items() <= resources.items()
    assert "cloud" not in resources and "region" not in resources  # infra replaces them


@pytest.mark.django_db
def test_a_gpu_type_without_options_or_with_unknown_ones_is_refused(skypilot_settings):
    provider = SkyPilotProvider()
    with pytest.raises(ProviderError, match="rtx-4090 has no SkyPilot accelerator"):
        provider.provision(job_id=1, gpu_slug="rtx-4090")
    skypilot_settings.TRAINING_SKYPILOT_TYPES = {"h100-80gb": {**H100, "spot": True}}
    with pytest.raises(ProviderError, match="do(es)? not know: spot"):
        provider.provision(job_id=1, gpu_slug="h100-80gb")


@pytest.mark.django_db
def test_without_an_events_url_nothing_is_launched(skypilot_settings):
    skypilot_settings.TRAINING_EVENTS_URL = ""
    with pytest.raises(ProviderError, match="TRAINING_EVENTS_URL"):
        SkyPilotProvider().provision(job_id=1, gpu_slug="h100-80gb")


@needs_sky
def test_skypilots_own_parser_loads_the_task():
    config = task_config(options=H100, job_url=JOB_URL, token=TOKEN, name="kestrel-job-7-attempt-1")
    before = json.dumps(config)

    sky_sdk.task_check(config)

    assert json.dumps(config) == before  # the parser empties what it gets: it got a copy
    import sky

    task = sky.Task.from_yaml_config(json.loads(before))
    assert task.api_server_access is False
    assert set(task.secrets) == {"KESTREL_JOB_URL", "KESTREL_TRAINER_TOKEN"}
    assert TOKEN not in repr(task.secrets)  # SkyPilot redacts them
    assert {r.use_spot for r in task.resources} == {True}
    assert {r.cloud.canonical_name() for r in task.resources} == {"aws", "gcp"}
    with pytest.raises(ProviderError, match="SkyPilot refused the task: .*spot"):
        sky_sdk.task_check({**config, "resources": {**config["resources"], "spot": True}})


# --- statuses ---------------------------------------------------------------------------------

PHASES = {
    "PENDING": ProviderPhase.QUEUED,
    "SUBMITTED": ProviderPhase.QUEUED,
    "STARTING": ProviderPhase.PROVISIONING,
    "RUNNING": ProviderPhase.RUNNING,
    "WINDING_DOWN": ProviderPhase.RUNNING,
    "RECOVERING": ProviderPhase.RECOVERING,
    "CANCELLING": ProviderPhase.CANCELLING,
    "SUCCEEDED": ProviderPhase.SUCCEEDED,
    "CANCELLED": ProviderPhase.CANCELLED,
}
FAILURES = {
    "FAILED": "The trainer failed on the cloud machine: exit 1",
    "FAILED_SETUP": "Setting up the cloud machine failed: exit 1",
    "FAILED_PRECHECKS": "SkyPilot refused the job before renting a machine: exit 1",
    "FAILED_NO_RESOURCE": "No cloud SkyPilot may use had this GPU free: exit 1",
    "FAILED_CONTROLLER": "SkyPilot's jobs controller failed: exit 1",
}


@pytest.mark.parametrize("status", sorted(PHASES))
def test_each_status_has_its_phase(status):
    report = phase_for(status, trainer_reported=True)

    assert report.phase == PHASES[status]
    assert report.status == status and report.reason == ""


def test_running_is_setting_up_until_the_trainer_reports():
    assert phase_for("RUNNING", trainer_reported=False).phase == ProviderPhase.SETTING_UP
    assert phase_for("RECOVERING", trainer_reported=False).phase == ProviderPhase.RECOVERING


@pytest.mark.parametrize("status", sorted(FAILURES))
def test_each_failure_carries_its_reason(status):
    report = phase_for(status, "exit 1", trainer_reported=True)

    assert report.phase == ProviderPhase.FAILED
    assert report.reason == FAILURES[status]
    assert phase_for(status, trainer_reported=True).reason.endswith(".")


def test_a_status_kestrel_does_not_know_is_said():
    with pytest.raises(ProviderError, match="status Kestrel does not know: EXPLODED"):
        phase_for("EXPLODED", trainer_reported=True)


@needs_sky
def test_every_status_of_the_installed_skypilot_maps():
    import sky

    for status in sky.jobs.ManagedJobStatus:
        report = phase_for(status.value, "why", trainer_reported=True)
        final = {ProviderPhase.SUCCEEDED, ProviderPhase.FAILED, ProviderPhase.CANCELLED}
        assert (report.phase in final) == status.is_terminal(), status
        assert STATUSES[status.value] == status.is_terminal(), status


# --- the provider at sky_sdk's edge -----------------------------------------------------------


class FakeSdk:
    """What SkyPilot's API server would answer, at sky_sdk's functions."""

    def __init__(self, monkeypatch):
        self.launched, self.cancelled, self.queries = [], [], 0
        self.jobs_by_id: dict[int, sky_sdk.ManagedJob] = {}
        monkeypatch.setattr(sky_sdk, "launch", self.launch)
        monkeypatch.setattr(sky_sdk, "jobs", self.jobs)
        monkeypatch.setattr(sky_sdk, "cancel", self.cancel)

    def launch(self, config, name):
        self.launched.append((config, name))
        self.jobs_by_id[41] = managed(41, "PENDING", name=name)
        return 41

    def jobs(self, *, job_ids=None, skip_finished=False):
        self.queries += 1
        found = [j for j in self.jobs_by_id.values() if job_ids is None or j.job_id in job_ids]
        return [j for j in found if not (skip_finished and j.terminal)]

    def cancel(self, job_ids):
        self.cancelled.extend(job_ids)
        for job_id in job_ids:
            if job_id in self.jobs_by_id:
                self.jobs_by_id[job_id] = managed(job_id, "CANCELLED")


@pytest.fixture
def fake_sdk(monkeypatch):
    return FakeSdk(monkeypatch)


@pytest.fixture
def launched(db, skypilot_settings, fake_sdk, tmp_path, monkeypatch):
    GpuType.objects.create(
        slug="h100-80gb", name="H100 80GB", vram_gb=80, hourly_price=2.5, provider="skypilot"
    )
    monkeypatch.setattr(sky_sdk, "installed", lambda: True)
    provider = provider_for("skypilot")
    machine = provider.provision(job_id=7, gpu_slug="h100-80gb")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"job_id": 7, "attempt": 2, "events_token": TOKEN}))
    handle = provider.start(machine, spec_path=str(spec), log_path=str(tmp_path / "trainer.log"))
    return SimpleNamespace(provider=provider, machine=machine, handle=handle, log=tmp_path)


def test_start_launches_a_managed_job_with_the_attempts_secrets(launched, fake_sdk):
    [(config, name)] = fake_sdk.launched

    assert isinstance(launched.provider, SkyPilotProvider)
    assert launched.machine.name == "H100 80GB via SkyPilot (H100 × 2)"
    assert launched.machine.device == "0,1"
    assert launched.machine.details["remote"] is True  # its uploads are taken into workdir
    assert Path(launched.machine.workdir).is_dir()
    assert name == config["name"] == "kestrel-job-7-attempt-2"
    assert config["secrets"] == {"KESTREL_JOB_URL": JOB_URL, "KESTREL_TRAINER_TOKEN": TOKEN}
    assert config["resources"]["accelerators"] == "H100:2"
    assert launched.handle.ref == "41" and launched.handle.pid is None
    assert "SkyPilot managed job 41" in (launched.log / "trainer.log").read_text()


def test_exit_code_follows_the_managed_job(launched, fake_sdk, monkeypatch):
    provider, handle = launched.provider, launched.handle
    monkeypatch.setattr("training.providers.skypilot.STATUS_CACHE_SECONDS", 0)
    for status in ("PENDING", "STARTING", "RUNNING", "RECOVERING", "CANCELLING"):
        fake_sdk.jobs_by_id[41] = managed(41, status)
        assert provider.exit_code(handle) is None, status
    for status, code in [("SUCCEEDED", 0), ("FAILED_NO_RESOURCE", 1), ("CANCELLED", -15)]:
        provider._seen.clear()
        fake_sdk.jobs_by_id[41] = managed(41, status, reason="no H100 in us-east-1")
        assert provider.exit_code(handle) == code, status
    provider._seen.clear()
    fake_sdk.jobs_by_id[41] = managed(41, "FAILED_NO_RESOURCE", reason="no H100 in us-east-1")
    report = provider.phase(handle, trainer_reported=False)
    assert report.phase == ProviderPhase.FAILED
    assert report.reason == "No cloud SkyPilot may use had this GPU free: no H100 in us-east-1"
    provider._seen.clear()
    del fake_sdk.jobs_by_id[41]
    assert provider.exit_code(handle) == -1  # SkyPilot forgot it: lost, as a vanished process


def test_the_supervisors_polling_asks_skypilot_every_few_seconds(launched, fake_sdk):
    fake_sdk.jobs_by_id[41] = managed(41, "RUNNING")
    before = fake_sdk.queries
    for _ in range(20):
        launched.provider.exit_code(launched.handle)

    assert fake_sdk.queries - before == 1
    fake_sdk.jobs_by_id[41] = managed(41, "SUCCEEDED")
    launched.provider._seen.clear()
    assert launched.provider.exit_code(launched.handle) == 0
    fake_sdk.jobs_by_id[41] = managed(41, "RUNNING")  # cannot happen: a final status stays
    assert launched.provider.exit_code(launched.handle) == 0


def test_terminate_and_release_cancel_the_job(launched, fake_sdk):
    fake_sdk.jobs_by_id[41] = managed(41, "RUNNING")
    launched.provider.release(launched.machine)
    assert fake_sdk.cancelled == [41]

    launched.provider.release(launched.machine)  # already cancelled: nothing more to do
    assert fake_sdk.cancelled == [41]
    launched.provider.terminate(launched.handle, force=False)
    assert fake_sdk.cancelled == [41, 41]


def test_skypilot_not_installed_is_said(skypilot_settings, monkeypatch):
    monkeypatch.setattr(sky_sdk, "installed", lambda: False)

    with pytest.raises(ProviderError) as refused:
        provider_for("skypilot")

    assert str(refused.value) == (
        "SkyPilot is not installed on this server: pip install -e '.[cloud]'"
    )
    skypilot_settings.TRAINING_PROVIDERS = ["local"]
    with pytest.raises(ProviderError, match="SkyPilot provider is not configured"):
        provider_for("skypilot")


def test_installed_says_whether_sky_is_importable():
    assert sky_sdk.installed() is SKY_INSTALLED


# --- the adapter: SkyPilot's errors and its unbounded sky.get ---------------------------------


class Status(enum.Enum):
    """Stands in for ManagedJobStatus where SkyPilot is not installed."""

    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"
    FAILED_SETUP = "FAILED_SETUP"

    def is_terminal(self):
        return self is Status.FAILED_SETUP

    def is_failed(self):
        return self is Status.FAILED_SETUP


def record(job_id, status, reason=None):
    if SKY_INSTALLED:
        import sky
        from sky.schemas.api.responses import ManagedJobRecord

        status = sky.jobs.ManagedJobStatus(status.value)
        return ManagedJobRecord(
            job_id=job_id, job_name=f"kestrel-job-{job_id}-attempt-1", status=status,
            failure_reason=reason, submitted_at=1000.0,
        )  # fmt: skip
    return SimpleNamespace(
        job_id=job_id, job_name=f"kestrel-job-{job_id}-attempt-1", status=status,
        failure_reason=reason, submitted_at=1000.0,
    )  # fmt: skip


class FakeSky:
    """SkyPilot's SDK as sky_sdk sees it: each call returns a request id, `get` resolves it."""

    def __init__(self):
        self.calls = []
        self.answers = {}
        self.release = threading.Event()
        self.release.set()
        self.Task = SimpleNamespace(from_yaml_config=self._task)
        self.jobs = SimpleNamespace(launch=self._launch, queue_v2=self._queue, cancel=self._cancel)

    def _task(self, config):
        self.calls.append(("task", dict(config)))
        config.clear()  # as SkyPilot's own does
        return "task"

    def _launch(self, task, name):
        self.calls.append(("launch", name))
        return "req-launch"

    def _queue(self, **kwargs):
        self.calls.append(("queue_v2", kwargs))
        return "req-queue"

    def _cancel(self, job_ids):
        self.calls.append(("cancel", job_ids))
        return "req-cancel"

    def get(self, request_id):
        self.release.wait()
        answer = self.answers[request_id]
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture
def fake_sky(monkeypatch):
    sky = FakeSky()
    monkeypatch.setattr(sky_sdk, "sky_module", lambda: sky)
    return sky


def test_launch_passes_a_copy_and_returns_the_job_id(fake_sky):
    config = task_config(options=H100, job_url=JOB_URL, token=TOKEN, name="kestrel-job-7-attempt-1")
    fake_sky.answers["req-launch"] = ([12], object())

    assert sky_sdk.launch(config, "kestrel-job-7-attempt-1") == 12
    assert config["secrets"]["KESTREL_TRAINER_TOKEN"] == TOKEN  # not emptied by the parser
    assert ("launch", "kestrel-job-7-attempt-1") in fake_sky.calls
    fake_sky.answers["req-launch"] = (13, object())  # SkyPilot's server may answer an int
    assert sky_sdk.launch(config, "kestrel-job-7-attempt-1") == 13
    fake_sky.answers["req-launch"] = ([], None)
    with pytest.raises(ProviderError, match="SkyPilot launched nothing"):
        sky_sdk.launch(config, "kestrel-job-7-attempt-1")


def test_status_asks_queue_v2_for_the_failure_reason(fake_sky):
    fake_sky.answers["req-queue"] = (
        [record(3, Status.RECOVERING), record(4, Status.FAILED_SETUP, "\x1b[31mno torch\x1b[0m")],
        2, {}, 2,
    )  # fmt: skip

    assert sky_sdk.status([4, 3]) == {3: ("RECOVERING", ""), 4: ("FAILED_SETUP", "no torch")}
    [(_, query)] = [c for c in fake_sky.calls if c[0] == "queue_v2"]
    assert query["job_ids"] == [3, 4] and query["all_users"] is True
    assert "failure_reason" in query["fields"] and "status" in query["fields"]
    assert sky_sdk.status([]) == {}  # nothing asked for: SkyPilot is not asked


@pytest.mark.parametrize(
    ("call", "request_id"),
    [
        (lambda: sky_sdk.launch({"name": "x"}, "x"), "req-launch"),
        (lambda: sky_sdk.status([3]), "req-queue"),
        (lambda: sky_sdk.cancel([3]), "req-cancel"),
    ],
)
def test_skypilots_errors_become_provider_errors_with_its_text(fake_sky, call, request_id):
    fake_sky.answers[request_id] = RuntimeError("\x1b[1mJobs controller is not up.\x1b[0m")

    with pytest.raises(ProviderError, match=r"SkyPilot could not .*: Jobs controller is not up\.$"):
        call()


def test_a_refused_task_is_not_launched(fake_sky, monkeypatch):
    def refuse(config):
        raise ValueError("Invalid task YAML: 'spot' was unexpected")

    monkeypatch.setattr(fake_sky.Task, "from_yaml_config", refuse)
    with pytest.raises(ProviderError, match="SkyPilot refused the task: Invalid task YAML"):
        sky_sdk.launch({"name": "x"}, "x")
    assert not [c for c in fake_sky.calls if c[0] == "launch"]


def test_sky_get_that_never_answers_gives_up_at_the_deadline(fake_sky, monkeypatch):
    monkeypatch.setattr(sky_sdk, "QUERY_SECONDS", 0.5)
    fake_sky.release.clear()  # sky.get blocks, as on an API server that never answers
    fake_sky.answers["req-queue"] = ([], 0, {}, 0)

    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"did not answer within 0 s .*\(request req-queue\)"):
        sky_sdk.status([3])
    assert time.monotonic() - started < 5
    fake_sky.release.set()


@needs_sky
def test_the_real_sdk_without_an_api_server_says_so():
    with pytest.raises(ProviderError, match="No SkyPilot API server endpoint is configured"):
        sky_sdk.status([1])


# --- reconciliation ---------------------------------------------------------------------------


def test_reconciliation_cancels_orphans_and_reports_gone_attempts(fake_sdk):
    now = time.time()
    fake_sdk.jobs_by_id = {
        1: managed(1, "RUNNING", submitted_at=now - 3600),  # live attempt
        2: managed(2, "RECOVERING", submitted_at=now - 3600),  # no attempt: orphan
        3: managed(3, "PENDING", submitted_at=now - 30),  # just launched: not yet an orphan
        4: managed(4, "RUNNING", name="someone-elses-job", submitted_at=now - 3600),
        5: managed(5, "FAILED_SETUP", submitted_at=now - 3600),  # live attempt, already ended
        6: managed(6, "SUCCEEDED", submitted_at=now - 3600),  # done, no attempt: leave it
    }

    result = skypilot_reconcile([1, 5, 9])

    assert fake_sdk.cancelled == [2]
    assert result.cancelled == [2]
    assert result.gone == [9]  # SkyPilot has no job 9: that attempt is lost
    assert result.ended == {5: "FAILED_SETUP"}


def test_reconciliation_with_nothing_to_do_cancels_nothing(fake_sdk):
    fake_sdk.jobs_by_id = {1: managed(1, "RUNNING")}

    assert skypilot_reconcile([1]).cancelled == []
    assert fake_sdk.cancelled == []


def test_the_launch_grace_is_measured_from_submission():
    jobs = [managed(8, "STARTING", submitted_at=1000.0)]

    assert reconcile_plan(jobs, [], now=1000.0 + 899, grace_seconds=900).cancelled == []
    assert reconcile_plan(jobs, [], now=1000.0 + 901, grace_seconds=900).cancelled == [8]
    # Not yet taken by SkyPilot's controller (it sets the time), so renting nothing: it waits.
    waiting = [managed(8, "PENDING", submitted_at=None)]
    assert reconcile_plan(waiting, [], now=5000.0).cancelled == []


def test_a_cancel_that_fails_is_a_provider_error(fake_sdk, monkeypatch):
    fake_sdk.jobs_by_id = {2: managed(2, "RUNNING")}

    def refuse(job_ids):
        raise ProviderError("SkyPilot could not cancel job 2: Jobs controller is not up.")

    monkeypatch.setattr(sky_sdk, "cancel", refuse)
    with pytest.raises(ProviderError, match="Jobs controller is not up"):
        skypilot_reconcile([])


# --- end to end: the real remote trainer, launched through the provider -----------------------

FAKE_SKY = Path(__file__).resolve().parents[1] / "fake_sky"


@contextlib.contextmanager
def skypilot_lab(workers, launches: Path, monkeypatch) -> Iterator[str]:
    """A network namespace reaching only the test's web server, and workers whose SkyPilot
    provider's SDK is tests/fake_sky, running tasks in that namespace. This process finds it
    too, so the form offers the type (nothing here imports it)."""
    from django.test import override_settings

    from tests.netns import network_namespace
    from tests.servers import app_server

    launches.mkdir()
    monkeypatch.syspath_prepend(str(FAKE_SKY))
    types = {"h100-80gb": {"accelerators": "H100"}}
    with network_namespace() as ns, app_server(host=ns.host_ip) as url:
        workers.env_extra.update(
            {
                "PYTHONPATH": str(FAKE_SKY),
                "FAKE_SKY_DIR": str(launches),
                "FAKE_SKY_NETNS": ns.name,
                "TRAINING_PROVIDERS": "local,skypilot",
                "TRAINING_EVENTS_URL": url,
                "TRAINING_SKYPILOT_TYPES": json.dumps(types),
            }
        )
        with override_settings(
            TRAINING_PROVIDERS=["local", "skypilot"],
            TRAINING_EVENTS_URL=url,
            TRAINING_SKYPILOT_TYPES=types,
        ):
            yield url


@pytest.fixture
def gpu_h100(db) -> GpuType:
    return GpuType.objects.create(
        slug="h100-80gb", name="H100 80GB", vram_gb=80, hourly_price=2.5, provider="skypilot"
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.same_on_any_database(
    "SkyPilot's answers and the remote trainer are what is tested; the job's rows are written "
    "as a local job's (tests/training/test_engine.py runs on both)"
)
def test_a_job_on_skypilot_trains_in_another_network_like_a_local_one(
    team, project, detect_version, gpu_h100, workers, tmp_path, monkeypatch
):
    """The provider in a real training worker, SkyPilot's SDK answered by tests/fake_sky (which
    runs the task's `run` in a network namespace that reaches only the test's web server, with
    the task's secrets as its environment): the job ends like a local one."""
    launches = tmp_path / "sky"
    with skypilot_lab(workers, launches, monkeypatch) as url:
        job = submit(team, project, detect_version, gpu_h100, epochs=2)
        workers.start()
        job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED, timeout=300)
    assert job.state == JobState.SUCCEEDED, job.error
    assert [m.epoch for m in EpochMetric.objects.filter(job=job)] == [1, 2]
    assert job.checkpoint_epoch == 2 and "last.pt" in job.artifacts
    assert TrainedModel.objects.get(job=job).weights_key
    attempt = job.attempt_rows.get()
    assert attempt.machine == "H100 80GB via SkyPilot (H100)"
    [launched] = [json.loads(p.read_text()) for p in launches.glob("launched-*.json")]
    assert launched["name"] == f"kestrel-job-{job.pk}-attempt-1"
    task = launched["task"]
    assert task["secrets"]["KESTREL_JOB_URL"] == f"{url}/api/v1/trainer/jobs/{job.pk}"
    token = task["secrets"]["KESTREL_TRAINER_TOKEN"]
    assert token and token not in " ".join(launched["argv"])  # in its environment only
    assert task["resources"]["accelerators"] == "H100:1"


@pytest.mark.django_db(transaction=True)
@pytest.mark.same_on_any_database(
    "SkyPilot's answers and the remote trainer are what is tested; the job's rows are written "
    "as a local job's (tests/training/test_engine.py runs on both)"
)
def test_a_preempted_machine_is_recovered_and_the_job_resumes(
    team, project, detect_version, gpu_h100, workers, tmp_path, monkeypatch
):
    """SkyPilot reports RECOVERING, then runs the same task on a fresh machine (its folder
    empty again): the trainer, the same attempt still, resumes from the last checkpoint it
    uploaded, and no epoch is stored twice."""
    launches = tmp_path / "sky"
    with skypilot_lab(workers, launches, monkeypatch):
        job = submit(team, project, detect_version, gpu_h100, epochs=30)
        workers.start()
        job = wait_for(
            lambda: (j := job_reload(job)).checkpoint_epoch and j.state == JobState.RUNNING and j,
            what="the first checkpoint",
            timeout=240,
        )
        [launched] = launches.glob("launched-*.json")
        job_id = json.loads(launched.read_text())["job_id"]
        (launches / f"preempt-{job_id}").touch()
        wait_for((launches / f"recovered-{job_id}").exists, what="the recovery", timeout=60)
        job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED, timeout=300)
    assert job.state == JobState.SUCCEEDED, job.error
    epochs = [m.epoch for m in EpochMetric.objects.filter(job=job).order_by("epoch")]
    assert epochs == list(range(1, 31))
    assert job.attempt_rows.count() == 1  # SkyPilot recovered it: the same attempt went on
    log = (launches / f"job-{job_id}.log").read_text()
    after = log.partition("--- recovered on a new machine ---")[2]
    assert "Resuming training" in after  # from the checkpoint, not from scratch


@pytest.mark.django_db(transaction=True)
@pytest.mark.same_on_any_database(
    "SkyPilot's answers and the remote trainer are what is tested; the job's rows are written "
    "as a local job's (tests/training/test_engine.py runs on both)"
)
def test_cancelling_a_job_on_skypilot_cancels_its_managed_job(
    team, project, detect_version, gpu_h100, workers, tmp_path, monkeypatch
):
    from training.services.jobs import job_cancel
    from workspaces.selectors import workspace_access_for_user

    launches = tmp_path / "sky"
    with skypilot_lab(workers, launches, monkeypatch):
        job = submit(team, project, detect_version, gpu_h100, epochs=50)
        workers.start()
        wait_for(EpochMetric.objects.filter(job=job).exists, what="the first epoch", timeout=240)
        access = workspace_access_for_user(user=team.editor, slug=team.workspace.slug)
        job_cancel(access=access, job=job_reload(job))
        job = wait_state(job, JobState.CANCELED, JobState.FAILED, timeout=120)
    assert job.state == JobState.CANCELED
    [launched] = launches.glob("launched-*.json")
    job_id = json.loads(launched.read_text())["job_id"]
    assert (launches / f"cancelled-{job_id}").exists()
