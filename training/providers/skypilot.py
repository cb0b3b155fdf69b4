"""The SkyPilot provider: each attempt is a SkyPilot managed job on the GPU its type names,
running the remote trainer (`python -m training.process.runner --remote`), which talks to
Kestrel over HTTPS only. SkyPilot picks the cloud and region, recovers a preempted spot machine
(the trainer resumes from its last checkpoint) and tears the machine down when the job ends or
is cancelled.

What each GPU type rents comes from its options in the admin (GpuType.provider_options, see
`OPTION_KEYS`), else from `settings.TRAINING_SKYPILOT_TYPES` (GPU type slug -> options);
SkyPilot itself is called only through `sky_sdk`.
"""

import json
import shlex
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from django.conf import settings
from django.db import models

import training.providers.sky_sdk as sky_sdk
from training.models import GpuType
from training.providers.base import Machine, Provider, ProviderError, TrainerHandle
from training.providers.skypilot_options import options_problems

ROOT = Path(__file__).resolve().parents[2]
JOB_NAME_PREFIX = "kestrel-job-"  # every managed job Kestrel launches; reconciliation's scope
REMOTE_DIR = "~/kestrel"  # the trainer's code and its folder on the rented machine
# What the remote trainer imports, installed there at this server's versions.
TRAINER_DISTRIBUTIONS = ("ultralytics", "torch", "torchvision", "pydantic", "psutil")
STATUS_CACHE_SECONDS = 10.0  # the supervisor asks every second; SkyPilot is asked this often


class ProviderPhase(models.TextChoices):
    QUEUED = "queued", "Queued at the provider"
    PROVISIONING = "provisioning", "Provisioning"
    SETTING_UP = "setting_up", "Setting up"
    RUNNING = "running", "Running"
    RECOVERING = "recovering", "Recovering"
    CANCELLING = "cancelling", "Cancelling"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


# ManagedJobStatus name -> phase. SkyPilot's RUNNING covers the task's set-up and its run:
# until the trainer has reported, Kestrel shows it as setting up.
_PHASES = {
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
_FAILURES = {
    "FAILED": "The trainer failed on the cloud machine",
    "FAILED_SETUP": "Setting up the cloud machine failed",
    "FAILED_PRECHECKS": "SkyPilot refused the job before renting a machine",
    "FAILED_NO_RESOURCE": "No cloud SkyPilot may use had this GPU free",
    "FAILED_CONTROLLER": "SkyPilot's jobs controller failed",
}
EXIT_SUCCEEDED, EXIT_FAILED, EXIT_CANCELLED, EXIT_GONE = 0, 1, -15, -1


@dataclass(frozen=True)
class PhaseReport:
    phase: ProviderPhase
    status: str  # SkyPilot's own ManagedJobStatus name ("" once SkyPilot has forgotten it)
    reason: str = ""  # why it failed, in Kestrel's words then SkyPilot's


def phase_for(status: str, failure_reason: str = "", *, trainer_reported: bool) -> PhaseReport:
    if status in _FAILURES:
        reason = _FAILURES[status] + (f": {failure_reason}" if failure_reason else ".")
        return PhaseReport(ProviderPhase.FAILED, status, reason)
    phase = _PHASES.get(status)
    if phase is None:
        raise ProviderError(f"SkyPilot reported a status Kestrel does not know: {status}.")
    if phase == ProviderPhase.RUNNING and not trainer_reported:
        phase = ProviderPhase.SETTING_UP
    return PhaseReport(phase, status)


def type_options(gpu_slug: str) -> dict:
    """What SkyPilot rents for a GPU type: its options in the admin, else the ones
    TRAINING_SKYPILOT_TYPES gives it (a deployment configured from its environment)."""
    stored = GpuType.objects.filter(slug=gpu_slug).values_list("provider_options", flat=True)
    options = next(iter(stored), None) or settings.TRAINING_SKYPILOT_TYPES.get(gpu_slug) or {}
    if not options.get("accelerators"):
        raise ProviderError(
            f"The GPU type {gpu_slug} has no SkyPilot accelerator: set its options in the "
            "admin (or TRAINING_SKYPILOT_TYPES)."
        )
    problems = options_problems(options)
    if problems:
        raise ProviderError(f"The SkyPilot options of {gpu_slug} are refused: {' '.join(problems)}")
    return options


def _as_list(value) -> list[str]:
    if value in (None, ""):
        return []
    return [str(v) for v in (value if isinstance(value, list | tuple) else [value])]


def infras_of(options: dict) -> list[str]:
    infras = _as_list(options.get("infra"))
    clouds, regions = _as_list(options.get("clouds")), _as_list(options.get("regions"))
    if clouds and regions:
        infras += [f"{cloud}/{region}" for cloud in clouds for region in regions]
    else:
        infras += clouds + [f"*/{region}" for region in regions]
    return list(dict.fromkeys(infras))


def resources_for(options: dict) -> dict:
    """SkyPilot's `resources:` for a GPU type's options."""
    count = int(options.get("count", 1))
    resources: dict = {
        "accelerators": f"{options['accelerators']}:{count}",
        "use_spot": bool(options.get("use_spot", False)),
        "job_recovery": {
            "strategy": "EAGER_NEXT_REGION",
            "max_restarts_on_errors": int(options.get("max_restarts_on_errors", 1)),
        },
    }
    if options.get("disk_size"):
        resources["disk_size"] = int(options["disk_size"])
    infras = infras_of(options)
    if len(infras) == 1:
        resources["infra"] = infras[0]
    elif infras:  # any one of them, whichever SkyPilot finds cheapest and free
        resources["any_of"] = [{"infra": infra} for infra in infras]
    return resources


def _pinned(distribution: str) -> str:
    version = metadata.version(distribution).split("+")[0]  # 2.9.1+cpu: the cloud has CUDA
    return f"{distribution}=={version}"


def setup_script() -> str:
    requirements = " ".join(shlex.quote(_pinned(d)) for d in TRAINER_DISTRIBUTIONS)
    return f"set -e\npython3 -m pip install --quiet {requirements}\n"


def job_name(job_id: int, attempt: int) -> str:
    return f"{JOB_NAME_PREFIX}{job_id}-attempt-{attempt}"


def task_config(*, options: dict, job_url: str, token: str, name: str) -> dict:
    """The SkyPilot task of one attempt. The token and the job's URL are secrets (SkyPilot
    redacts them in its views), read by the trainer from its environment: never in `run`."""
    return {
        "name": name,
        "resources": resources_for(options),
        "file_mounts": {f"{REMOTE_DIR}/training": str(ROOT / "training")},
        "setup": setup_script(),
        "run": (
            f'cd {REMOTE_DIR} && python3 -m training.process.runner --remote "$KESTREL_JOB_URL"\n'
        ),
        "envs": {"PYTHONUNBUFFERED": "1", "YOLO_AUTOINSTALL": "0"},
        "secrets": {"KESTREL_JOB_URL": job_url, "KESTREL_TRAINER_TOKEN": token},
        # The trainer talks to Kestrel only, never to SkyPilot's API server.
        "api_server_access": False,
    }


def _managed_id(handle: TrainerHandle) -> int:
    if not handle.ref:
        raise ProviderError("This attempt has no SkyPilot managed job.")
    return int(handle.ref)


class SkyPilotProvider(Provider):
    key = "skypilot"

    def __init__(self):
        self._seen: dict[int, tuple[float, sky_sdk.ManagedJob | None]] = {}

    def provision(self, *, job_id: int, gpu_slug: str) -> Machine:
        """Checks what to rent; SkyPilot rents it when the job is launched (start)."""
        options = type_options(gpu_slug)
        if not settings.TRAINING_EVENTS_URL:
            raise ProviderError(
                "SkyPilot jobs need TRAINING_EVENTS_URL: the address where a cloud machine "
                "reaches this Kestrel."
            )
        count = int(options.get("count", 1))
        gpu_name = GpuType.objects.filter(slug=gpu_slug).values_list("name", flat=True).first()
        accelerators = f"{options['accelerators']}" + (f" × {count}" if count > 1 else "")
        # This worker's folder for the attempt: the supervisor takes the trainer's uploaded
        # checkpoints and run files into it, as from a local trainer.
        workdir = Path(settings.TRAINING_DIR) / "remote"
        workdir.mkdir(parents=True, exist_ok=True)
        return Machine(
            provider=self.key,
            name=f"{gpu_name or gpu_slug} via SkyPilot ({accelerators})",
            device=",".join(str(i) for i in range(count)),
            workdir=str(workdir),
            details={
                "remote": True,  # the trainer reports over HTTPS and uploads its files
                "gpu_slug": gpu_slug,
                "resources": resources_for(options),
                "provision_timeout_seconds": int(options.get("provision_timeout_seconds", 1800)),
            },
        )

    def start(self, machine: Machine, *, spec_path: str, log_path: str) -> TrainerHandle:
        spec = json.loads(Path(spec_path).read_text())
        token = spec.get("events_token")
        if not token:
            raise ProviderError("The attempt has no trainer token: is TRAINING_EVENTS_URL set?")
        base = settings.TRAINING_EVENTS_URL.rstrip("/")
        job_url = f"{base}/api/v1/trainer/jobs/{spec['job_id']}"
        name = job_name(spec["job_id"], spec["attempt"])
        config = task_config(
            options=type_options(machine.details["gpu_slug"]),
            job_url=job_url,
            token=token,
            name=name,
        )
        managed_id = sky_sdk.launch(config, name)
        machine.details["managed_job_id"] = managed_id
        with open(log_path, "a") as log:
            log.write(f"SkyPilot managed job {managed_id} ({name}) launched.\n")
        return TrainerHandle(machine=machine, ref=str(managed_id))

    def _job(self, managed_id: int) -> sky_sdk.ManagedJob | None:
        seen = self._seen.get(managed_id)
        if seen and (seen[1] is not None and seen[1].terminal or time.monotonic() < seen[0]):
            return seen[1]
        job = next(iter(sky_sdk.jobs(job_ids=[managed_id])), None)
        self._seen[managed_id] = (time.monotonic() + STATUS_CACHE_SECONDS, job)
        return job

    def phase(self, handle: TrainerHandle, *, trainer_reported: bool) -> PhaseReport:
        job = self._job(_managed_id(handle))
        if job is None:
            return PhaseReport(ProviderPhase.FAILED, "", "SkyPilot no longer knows this job.")
        return phase_for(job.status, job.failure_reason, trainer_reported=trainer_reported)

    def exit_code(self, handle: TrainerHandle) -> int | None:
        job = self._job(_managed_id(handle))
        if job is None:
            return EXIT_GONE  # as a local trainer whose process is gone
        if not job.terminal:
            return None
        if job.failed:
            return EXIT_FAILED
        return EXIT_SUCCEEDED if job.status == "SUCCEEDED" else EXIT_CANCELLED

    def terminate(self, handle: TrainerHandle, *, force: bool) -> None:
        """Cancel the managed job: SkyPilot ends the trainer and tears the machine down. A
        polite stop reaches the trainer first, in the answers to its events."""
        managed_id = _managed_id(handle)
        sky_sdk.cancel([managed_id])
        self._seen.pop(managed_id, None)

    def release(self, machine: Machine) -> None:
        """No machine outlives its attempt: a managed job still going is cancelled."""
        managed_id = machine.details.get("managed_job_id")
        if managed_id is None:
            return
        self._seen.pop(managed_id, None)
        job = self._job(managed_id)
        if job is not None and not job.terminal:
            sky_sdk.cancel([managed_id])
