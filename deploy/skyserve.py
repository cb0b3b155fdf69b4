"""The one module that calls SkyPilot's serving (SkyServe, through its 0.14 client SDK:
sky.serve.up / status / down / tail_logs); the rest of Kestrel gets Kestrel's types and
`ProviderError`s with SkyPilot's own text. Requests are sent and resolved as every SkyPilot call
of Kestrel is (training.providers.sky_sdk: a request id, resolved within a deadline of its own).

A service is a task with a `service:` section: SkyServe rents its replicas, probes each one's
readiness path, puts a load balancer in front of the ready ones and replaces a replica that
fails or is preempted."""

import copy
import inspect
import io
import threading
from dataclasses import dataclass

from training.providers import sky_sdk
from training.providers.base import ProviderError
from training.providers.sky_sdk import ANSI, error_text, sky_request

__all__ = ["Replica", "Service", "installed", "service_check", "up", "status", "down", "log_tail"]

UP_SECONDS = 600.0  # a first `up` starts SkyServe's controller: minutes
QUERY_SECONDS = 60.0
DOWN_SECONDS = 120.0
LOG_SECONDS = 30.0
# sky.serve.ReplicaStatus: those after which the replica serves no more (SkyServe launches a
# new one in its place while the service is up).
REPLICA_FAILED = {
    "FAILED",
    "FAILED_CLEANUP",
    "FAILED_INITIAL_DELAY",
    "FAILED_PROBING",
    "FAILED_PROVISION",
    "UNKNOWN",
}
REPLICA_GONE = REPLICA_FAILED | {"SHUTTING_DOWN", "PREEMPTED"}
# What each failure means for the person reading the endpoint's page.
REPLICA_REASONS = {
    "FAILED_PROVISION": "no cloud SkyPilot may use had this GPU free (capacity or quota)",
    "FAILED_INITIAL_DELAY": "the model server did not answer its readiness probe in time",
    "FAILED_PROBING": "the model server stopped answering its readiness probe",
    "FAILED": "the model server exited (bad weights, or an error at start)",
    "FAILED_CLEANUP": "SkyPilot could not tear its machine down",
    "PREEMPTED": "the cloud took its machine back (spot)",
    "UNKNOWN": "SkyPilot lost track of it",
}


@dataclass(frozen=True)
class Replica:
    replica_id: int
    status: str  # sky.serve.ReplicaStatus's name
    endpoint: str
    launched_at: float | None

    @property
    def ready(self) -> bool:
        return self.status == "READY"

    @property
    def failed(self) -> bool:
        return self.status in REPLICA_FAILED

    def as_row(self) -> dict:
        return {
            "id": self.replica_id,
            "status": self.status,
            "endpoint": self.endpoint,
            "launched_at": self.launched_at,
        }


@dataclass(frozen=True)
class Service:
    name: str
    status: str  # sky.serve.ServiceStatus's name
    endpoint: str  # the load balancer's address ("host:port" or a URL), once there is one
    replicas: tuple[Replica, ...]

    @property
    def url(self) -> str:
        if not self.endpoint:
            return ""
        return self.endpoint if "://" in self.endpoint else f"http://{self.endpoint}"


def installed() -> bool:
    return sky_sdk.installed()


def _name(value) -> str:
    """An enum's name, or the text SkyPilot sent (its records travel as JSON too)."""
    return str(getattr(value, "name", value) or "UNKNOWN").upper()


def _task(task_config: dict):
    try:
        # A copy: from_yaml_config empties the dict it is given.
        task = sky_sdk.sky_module().Task.from_yaml_config(copy.deepcopy(task_config))
    except Exception as exc:
        raise ProviderError(f"SkyPilot refused the service: {error_text(exc)}") from exc
    if getattr(task, "service", None) is None:
        raise ProviderError("SkyPilot refused the service: it has no service section.")
    return task


def service_check(task_config: dict) -> None:
    """Parse the service with SkyPilot's own task and service-spec parsers (offline)."""
    _task(task_config)


def up(task_config: dict, name: str) -> str:
    """Start the service `name`; the load balancer's address SkyPilot answers (may be empty)."""
    sky = sky_sdk.sky_module()
    task = _task(task_config)
    answer = sky_request(
        f"start the service {name}", lambda: sky.serve.up(task, service_name=name), UP_SECONDS
    )
    if isinstance(answer, tuple | list) and len(answer) == 2:
        return str(answer[1] or "")
    return ""


def status(names: list[str] | None) -> dict[str, Service]:
    """{name: Service} for the services SkyServe knows of `names` (a gone one is missing), or
    of every service (None)."""
    if names is not None and not names:
        return {}
    sky = sky_sdk.sky_module()
    # Newer SDKs ask whether a cached load-balancer address will do: it will not, a web
    # process routes to what this returns.
    options = {}
    if "use_endpoint_cache" in inspect.signature(sky.serve.status).parameters:
        options["use_endpoint_cache"] = False
    asked = None if names is None else list(names)
    records = sky_request(
        "list its services", lambda: sky.serve.status(asked, **options), QUERY_SECONDS
    )
    found = {}
    for record in records or []:
        replicas = tuple(
            Replica(
                replica_id=int(info.get("replica_id") or 0),
                status=_name(info.get("status")),
                endpoint=str(info.get("endpoint") or ""),
                launched_at=info.get("launched_at"),
            )
            for info in record.get("replica_info") or []
        )
        found[record["name"]] = Service(
            name=record["name"],
            status=_name(record.get("status")),
            endpoint=str(record.get("endpoint") or ""),
            replicas=tuple(sorted(replicas, key=lambda r: r.replica_id)),
        )
    return found


def down(names: list[str]) -> None:
    """Tear the services down (their replicas' machines with them); purge: one that failed is
    torn down too, not left to leak."""
    if not names:
        return
    sky = sky_sdk.sky_module()
    sky_request(
        f"tear down {', '.join(names)}",
        lambda: sky.serve.down(list(names), purge=True),
        DOWN_SECONDS,
    )


def log_tail(name: str, replica_id: int | None = None, lines: int = 40) -> str:
    """The last lines of a replica's log (or of SkyServe's controller for the service)."""
    sky = sky_sdk.sky_module()
    out = io.StringIO()
    target = "replica" if replica_id is not None else "controller"
    outcome: dict = {}

    def read() -> None:
        try:
            sky.serve.tail_logs(
                name, target=target, replica_id=replica_id, follow=False, output_stream=out
            )
        except Exception as exc:  # a log is a courtesy: its absence is said, never raised
            outcome["error"] = exc

    reader = threading.Thread(target=read, name=f"sky-serve-log-{name}", daemon=True)
    reader.start()
    reader.join(LOG_SECONDS)
    if "error" in outcome:
        return f"(SkyPilot gave no log: {error_text(outcome['error'])})"
    text = ANSI.sub("", out.getvalue())
    return "\n".join(text.splitlines()[-lines:])
