"""The remote trainer across a network boundary: `python -m training.process.runner --remote` in a
network namespace of the suite's own (tests/netns.py), with its own empty folder and nothing of
Kestrel's settings, reaching only the test's web server over HTTP. It fetches its spec, the
dataset and its weights, sends its events and uploads its checkpoints there, and the job ends
exactly like a local one."""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.test import override_settings

from tests.netns import network_namespace
from tests.servers import app_server
from tests.training.helpers import job_reload, submit, wait_for, wait_state
from training.models import AttemptEnd, EpochMetric, GpuType, JobState, TrainedModel

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gpu_remote(db) -> GpuType:
    return GpuType.objects.create(
        slug="lab-box",
        name="Lab box",
        vram_gb=0,
        hourly_price=Decimal("0"),
        provider="command",
    )


def _reaches(ns, host: str, port: int) -> bool:
    probe = (
        "import socket,sys\n"
        f"s=socket.socket(); s.settimeout(2)\n"
        f"sys.exit(0 if s.connect_ex(({host!r}, {port})) == 0 else 1)\n"
    )
    done = subprocess.run([*ns.exec_prefix(), sys.executable, "-c", probe], timeout=20)
    return done.returncode == 0


@contextlib.contextmanager
def remote_lab(workers, remote_dir) -> Iterator:
    """A network namespace, the test's web server on its link, and workers whose command
    provider starts trainers in the namespace."""
    with network_namespace() as ns, app_server(host=ns.host_ip) as url:
        port = int(url.rsplit(":", 1)[1])
        assert _reaches(ns, ns.host_ip, port)  # the test's web server, and nothing else:
        assert not _reaches(ns, "127.0.0.1", 5432)  # no PostgreSQL
        assert not _reaches(ns, "127.0.0.1", 6379)  # no Redis
        command = f"ip netns exec {ns.name} env KESTREL_TRAINER_OFFLINE=1"
        workers.env_extra.update(
            {
                "TRAINING_PROVIDERS": "local,command",
                "TRAINING_EVENTS_URL": url,
                "TRAINING_COMMAND": command,
                "TRAINING_COMMAND_PYTHON": sys.executable,
                "TRAINING_COMMAND_WORKDIR": str(remote_dir),
            }
        )
        # This process too: the form offers the type only once its provider can start a job.
        with override_settings(
            TRAINING_PROVIDERS=["local", "command"],
            TRAINING_COMMAND=command,
            TRAINING_EVENTS_URL=url,
        ):
            yield ns


def test_a_remote_trainer_in_another_network_trains_a_job_like_a_local_one(
    team, project, detect_version, gpu_remote, workers, tmp_path
):
    remote_dir = tmp_path / "remote-machine"
    with remote_lab(workers, remote_dir):
        job = submit(team, project, detect_version, gpu_remote, epochs=2)
        workers.start()
        job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED, timeout=300)
    assert job.state == JobState.SUCCEEDED, job.error
    assert [m.epoch for m in EpochMetric.objects.filter(job=job)] == [1, 2]
    assert job.checkpoint_epoch == 2
    assert "last.pt" in job.artifacts and "results.csv" in job.artifacts
    assert job.log_chunks.exists()
    model = TrainedModel.objects.get(job=job)
    assert model.weights_key
    # The trainer worked in its own folder: the dataset it fetched, its run, its checkpoints.
    assert (remote_dir / "datasets").is_dir()
    assert (remote_dir / "jobs" / str(job.pk) / "run" / "weights" / "best.pt").is_file()
    assert job.dropped_events == 0


@pytest.mark.same_on_any_database(
    "the trainer's link or process is what is cut; the events' ingest into the database is "
    "the first test's, which runs on both"
)
def test_a_cut_link_loses_nothing_and_stores_no_epoch_twice(
    team, project, detect_version, gpu_remote, workers, tmp_path
):
    with remote_lab(workers, tmp_path / "remote-machine") as ns:
        job = submit(team, project, detect_version, gpu_remote, epochs=6)
        workers.start()
        first_epoch = EpochMetric.objects.filter(job=job).exists
        wait_for(first_epoch, what="the first epoch", timeout=240)
        ns.link(up=False)  # the trainer cannot reach Kestrel: it trains on, keeping its events
        time.sleep(6)
        ns.link(up=True)
        job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED, timeout=300)
    assert job.state == JobState.SUCCEEDED, job.error
    epochs = [m.epoch for m in EpochMetric.objects.filter(job=job).order_by("epoch")]
    assert epochs == [1, 2, 3, 4, 5, 6]  # each once: nothing lost, nothing twice
    assert job.attempt_rows.count() == 1 and job.checkpoint_epoch == 6
    assert job.dropped_events == 0


@pytest.mark.same_on_any_database(
    "the trainer's link or process is what is cut; the events' ingest into the database is "
    "the first test's, which runs on both"
)
def test_a_killed_remote_trainer_is_resumed_from_its_uploaded_checkpoint(
    team, project, detect_version, gpu_remote, workers, tmp_path
):
    # A checkpoint is known only once it came over HTTP and was inspected and stored, and under
    # CI's load 8 tiny epochs were all over by then once: enough epochs that the trainer is
    # still at work when it is killed (a kill after the final checkpoint ends with the model
    # made from it).
    epochs = 16
    with remote_lab(workers, tmp_path / "remote-machine"):
        job = submit(team, project, detect_version, gpu_remote, epochs=epochs)
        workers.start()
        job = wait_for(
            lambda: (j := job_reload(job)).checkpoint_epoch and j.state == JobState.RUNNING and j,
            what="the first checkpoint",
            timeout=240,
        )
        os.kill(job.attempt_rows.get(number=1).pid, signal.SIGKILL)
        job = wait_state(job, JobState.SUCCEEDED, JobState.FAILED, timeout=300)
    assert job.state == JobState.SUCCEEDED, job.error
    done = [m.epoch for m in EpochMetric.objects.filter(job=job).order_by("epoch")]
    assert done == list(range(1, epochs + 1))
    first, second = job.attempt_rows.order_by("number")
    assert first.end_reason == AttemptEnd.LOST and "signal 9" in first.message
    assert second.end_reason == AttemptEnd.FINISHED and second.resumed_from_epoch >= 1


RECORDER = """
import json, os, sys
json.dump({"argv": sys.argv[1:], "stdin": sys.stdin.readline(), "env": dict(os.environ)},
          open(os.environ.get("OUT", "") or sys.argv[0] + ".json", "w"))
"""


def test_the_command_provider_passes_the_token_on_stdin_and_no_settings(tmp_path, settings):
    """The token never on a command line (other users of a machine can read those), and the
    command gets none of Kestrel's environment (database, Redis, secret key)."""
    import json
    import time

    from training.providers.command import CommandProvider

    recorder = tmp_path / "recorder.py"
    recorder.write_text(RECORDER)
    settings.TRAINING_COMMAND = f"{sys.executable} {recorder}"
    settings.TRAINING_EVENTS_URL = "https://kestrel.example.com"
    settings.TRAINING_COMMAND_PYTHON = "/opt/python"
    settings.TRAINING_COMMAND_WORKDIR = "/data/kestrel"
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"job_id": 7, "attempt": 2, "events_token": "2.s3cret"}))
    provider = CommandProvider()
    machine = provider.provision(job_id=7, gpu_slug="lab-box")
    handle = provider.start(machine, spec_path=str(spec), log_path=str(tmp_path / "log"))
    deadline = time.monotonic() + 20
    while provider.exit_code(handle) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert provider.exit_code(handle) == 0, (tmp_path / "log").read_text()
    seen = json.loads((tmp_path / "recorder.py.json").read_text())
    assert seen["argv"] == [
        "/opt/python", "-m", "training.process.runner",
        "--remote", "https://kestrel.example.com/api/v1/trainer/jobs/7",
        "--workdir", "/data/kestrel",
    ]  # fmt: skip
    assert seen["stdin"] == "2.s3cret\n"
    assert "2.s3cret" not in json.dumps(seen["env"]) + json.dumps(seen["argv"])
    for name in ("DATABASE_URL", "REDIS_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE"):
        assert name not in seen["env"]


def test_the_command_provider_needs_its_command_and_kestrels_address(settings):
    from training.providers import ProviderError
    from training.providers.command import CommandProvider

    settings.TRAINING_COMMAND = ""
    with pytest.raises(ProviderError, match="TRAINING_COMMAND"):
        CommandProvider().provision(job_id=1, gpu_slug="lab-box")
    settings.TRAINING_COMMAND = "ssh -T gpu-box"
    settings.TRAINING_EVENTS_URL = ""
    with pytest.raises(ProviderError, match="TRAINING_EVENTS_URL"):
        CommandProvider().provision(job_id=1, gpu_slug="lab-box")
