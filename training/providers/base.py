"""The one small interface every provider implements.

A cloud provider (SkyPilot, Kubernetes) fits behind it: `provision` rents the machine,
`start` launches `python -m training.process.runner` there with the job's spec, whose events come
back over HTTP with a per-job token into the same Redis stream; `alive` and `terminate` ask the
cloud. The local provider does all four with processes on this machine.
"""

from dataclasses import dataclass, field


class ProviderError(Exception):
    """The provider cannot give or use a machine; the message is shown on the job."""


@dataclass
class Machine:
    provider: str
    name: str  # what the job page shows it ran on, e.g. "CPU: AMD EPYC (2 cores)"
    device: str  # the Ultralytics device argument: "cpu", "0", "0,1"
    workdir: str  # where runs and cached datasets live on that machine
    details: dict = field(default_factory=dict)


@dataclass
class TrainerHandle:
    machine: Machine
    pid: int | None = None
    ref: str = ""  # a cloud provider's own id of the running trainer


class Provider:
    key = ""

    def provision(self, *, job_id: int, gpu_slug: str) -> Machine:
        raise NotImplementedError

    def start(self, machine: Machine, *, spec_path: str, log_path: str) -> TrainerHandle:
        raise NotImplementedError

    def exit_code(self, handle: TrainerHandle) -> int | None:
        """None while the trainer runs; its exit status once it has ended (negative: signal)."""
        raise NotImplementedError

    def terminate(self, handle: TrainerHandle, *, force: bool) -> None:
        """End the trainer: politely (SIGTERM) or at once (SIGKILL of its process group)."""
        raise NotImplementedError

    def release(self, machine: Machine) -> None:
        """Give the machine back (a cloud provider stops paying for it here)."""
