"""A stand-in for SkyPilot's client SDK, for Celery workers started by a test (put this folder
on their PYTHONPATH): no cloud and no API server are reachable here. It answers the calls
training.providers.sky_sdk makes, with SkyPilot 0.14's shapes (a request id that `get`
resolves; records with a ManagedJobStatus), and "rents" a machine by running the task's `run`
in the test's network namespace (FAKE_SKY_NETNS), with the task's envs and secrets as its
environment and its file mounts as links in a home of its own. Set-up is not run (Kestrel's
packages are there already). What it launched is written to FAKE_SKY_DIR for the test."""

import enum
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

_DIR = Path(os.environ["FAKE_SKY_DIR"])
_ids = itertools.count(1)
_requests: dict[str, object] = {}
_jobs: dict[int, dict] = {}


class ManagedJobStatus(enum.Enum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    RECOVERING = "RECOVERING"
    SUCCEEDED = "SUCCEEDED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"

    def is_terminal(self) -> bool:
        return self in (self.SUCCEEDED, self.CANCELLED, self.FAILED)

    def is_failed(self) -> bool:
        return self is self.FAILED


class Task:
    def __init__(self, config: dict):
        self.config = config
        self.service = config.get("service")

    @staticmethod
    def from_yaml_config(config: dict) -> "Task":
        task = Task(json.loads(json.dumps(config)))
        config.clear()  # as SkyPilot's own does
        return task


def _request(value) -> str:
    request_id = f"req-{len(_requests) + 1}"
    _requests[request_id] = value
    return request_id


def get(request_id: str):
    value = _requests.pop(request_id)
    if isinstance(value, Exception):
        raise value
    return value() if callable(value) else value


def _launch(task: Task, name: str | None = None):
    config = task.config
    job_id = next(_ids) + os.getpid() * 1000  # unique across this test's workers
    home = _DIR / f"home-{job_id}"
    home.mkdir(parents=True)
    for remote, local in config.get("file_mounts", {}).items():
        target = home / remote.removeprefix("~/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(local)
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(home),
        "KESTREL_TRAINER_OFFLINE": "1",
        **config.get("envs", {}),
        **config.get("secrets", {}),
    }
    netns = os.environ.get("FAKE_SKY_NETNS")
    argv = [*(["ip", "netns", "exec", netns] if netns else []), "bash", "-c", config["run"]]
    command = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
    proc = _run(command, home, job_id)
    _jobs[job_id] = {"name": name, "proc": proc, "cancelled": False, "at": time.time()}
    _jobs[job_id].update(command=command, home=home, recover_at=None)
    record = {"job_id": job_id, "name": name, "task": config, "argv": argv, "pid": proc.pid}
    (_DIR / f"launched-{job_id}.json").write_text(json.dumps(record))
    return [job_id], None


def _run(command: list[str], home: Path, job_id: int) -> subprocess.Popen:
    log = (_DIR / f"job-{job_id}.log").open("ab")
    return subprocess.Popen(  # noqa: S603 - the test's own task
        command,
        cwd=home,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def _status(job_id: int, job: dict) -> ManagedJobStatus:
    """A test preempts the machine by writing FAKE_SKY_DIR/preempt-<id>: the task is killed,
    the job is RECOVERING for 3 s, then the same task runs again on a fresh "machine", as
    SkyPilot's recovery does."""
    preempt = _DIR / f"preempt-{job_id}"
    if preempt.exists() and job["proc"].poll() is None:
        preempt.unlink()
        os.killpg(job["proc"].pid, signal.SIGKILL)
        job["proc"].wait(timeout=30)
        job["recover_at"] = time.time() + 3
    if job["recover_at"]:
        if time.time() < job["recover_at"]:
            return ManagedJobStatus.RECOVERING
        job["recover_at"] = None
        # A new machine: nothing but the file mounts.
        shutil.rmtree(job["home"] / "kestrel" / "kestrel-trainer", ignore_errors=True)
        with (_DIR / f"job-{job_id}.log").open("a") as log:
            log.write("--- recovered on a new machine ---\n")
        job["proc"] = _run(job["command"], job["home"], job_id)
        (_DIR / f"recovered-{job_id}").touch()
    code = job["proc"].poll()
    if job["cancelled"]:
        return ManagedJobStatus.CANCELLED
    if code is None:
        return ManagedJobStatus.RUNNING
    return ManagedJobStatus.SUCCEEDED if code == 0 else ManagedJobStatus.FAILED


def _queue(job_ids=None, skip_finished=False, **_):
    records = []
    for job_id, job in _jobs.items():
        status = _status(job_id, job)
        if job_ids is not None and job_id not in job_ids:
            continue
        if skip_finished and status.is_terminal():
            continue
        code = job["proc"].poll()
        records.append(
            SimpleNamespace(
                job_id=job_id, job_name=job["name"], status=status, submitted_at=job["at"],
                failure_reason=f"exit {code}" if status.is_failed() else None,
            )
        )  # fmt: skip
    return records, len(records), {}, len(records)


def _cancel(job_ids=None, **_):
    for job_id in job_ids or []:
        job = _jobs.get(job_id)
        if job and job["proc"].poll() is None:
            job["cancelled"] = True
            os.killpg(job["proc"].pid, signal.SIGKILL)
            job["proc"].wait(timeout=30)
        (_DIR / f"cancelled-{job_id}").touch()


jobs = SimpleNamespace(
    ManagedJobStatus=ManagedJobStatus,
    launch=lambda task, name=None: _request(lambda: _launch(task, name)),
    queue_v2=lambda **kw: _request(lambda: _queue(**kw)),
    cancel=lambda **kw: _request(lambda: _cancel(**kw)),
)


# --- SkyServe (sky.serve): services of replicas, each the task's `run` in the namespace ------
#
# A replica is READY while its readiness path answers 200 at FAKE_SKY_NETNS_IP:<port>, STARTING
# before, FAILED if its run ended before it ever was (SkyServe does not relaunch a replica its
# own task failed), FAILED_PROBING once it stops answering after being ready, and then replaced
# by a new one, as SkyServe's autoscaler does. FAKE_SKY_DIR/no-capacity-<service> makes every
# replica of it FAILED_PROVISION (no cloud had the GPU). No load balancer: the endpoint is the
# replica's address, the same for each replica (one port in one namespace).


class ReplicaStatus(enum.Enum):
    PENDING = "PENDING"
    PROVISIONING = "PROVISIONING"
    STARTING = "STARTING"
    READY = "READY"
    NOT_READY = "NOT_READY"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    FAILED = "FAILED"
    FAILED_INITIAL_DELAY = "FAILED_INITIAL_DELAY"
    FAILED_PROBING = "FAILED_PROBING"
    FAILED_PROVISION = "FAILED_PROVISION"
    FAILED_CLEANUP = "FAILED_CLEANUP"
    PREEMPTED = "PREEMPTED"
    UNKNOWN = "UNKNOWN"


class ServiceStatus(enum.Enum):
    CONTROLLER_INIT = "CONTROLLER_INIT"
    REPLICA_INIT = "REPLICA_INIT"
    CONTROLLER_FAILED = "CONTROLLER_FAILED"
    READY = "READY"
    SHUTTING_DOWN = "SHUTTING_DOWN"
    FAILED = "FAILED"
    FAILED_CLEANUP = "FAILED_CLEANUP"
    NO_REPLICA = "NO_REPLICA"


_services: dict[str, dict] = {}


def _replica_launch(service: dict) -> dict:
    config = service["config"]
    service["next_id"] += 1
    replica_id = service["next_id"]
    name = service["name"]
    replica = {"id": replica_id, "proc": None, "ready": False, "status": ReplicaStatus.STARTING}
    if (_DIR / f"no-capacity-{name}").exists():
        replica["status"] = ReplicaStatus.FAILED_PROVISION
        with (_DIR / f"serve-{name}-{replica_id}.log").open("a") as log:
            log.write("Failed to provision all possible launchable resources: no capacity.\n")
        return replica
    home = _DIR / f"home-{name}-{replica_id}"
    home.mkdir(parents=True)
    env = {
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": str(home),
        **config.get("envs", {}),
        **config.get("secrets", {}),
    }
    netns = os.environ.get("FAKE_SKY_NETNS")
    argv = [*(["ip", "netns", "exec", netns] if netns else []), "bash", "-c", config["run"]]
    command = ["env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
    log = (_DIR / f"serve-{name}-{replica_id}.log").open("ab")
    replica["proc"] = subprocess.Popen(  # noqa: S603 - the test's own task
        command,
        cwd=config.get("workdir") or home,  # the workdir as SkyPilot syncs it: here already
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    record = {"service": name, "replica_id": replica_id, "task": config, "pid": replica["proc"].pid}
    (_DIR / f"serve-launched-{name}-{replica_id}.json").write_text(json.dumps(record))
    return replica


def _address(service: dict) -> str:
    return f"{os.environ.get('FAKE_SKY_NETNS_IP', '127.0.0.1')}:{service['port']}"


def _probe(service: dict) -> bool:
    import urllib.request

    path = service["config"]["service"]["readiness_probe"]["path"]
    try:
        with urllib.request.urlopen(f"http://{_address(service)}{path}", timeout=1) as answer:  # noqa: S310
            return answer.status == 200
    except OSError:
        return False


def _replicas(service: dict) -> list[dict]:
    for replica in list(service["replicas"]):
        proc = replica["proc"]
        if proc is None or replica["status"] not in (ReplicaStatus.STARTING, ReplicaStatus.READY):
            continue
        alive = proc.poll() is None
        if alive and _probe(service):
            replica["ready"], replica["status"] = True, ReplicaStatus.READY
        elif replica["ready"]:  # it served, and stopped answering: replaced
            if alive:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            replica["status"] = ReplicaStatus.FAILED_PROBING
            service["replicas"].append(_replica_launch(service))
        elif not alive:
            replica["status"] = ReplicaStatus.FAILED
    return service["replicas"]


def _serve_up(task: Task, service_name: str):
    config = task.config
    if service_name in _services:
        raise ValueError(f"Service {service_name!r} already exists.")
    service = {"name": service_name, "config": config, "next_id": 0, "replicas": []}
    service["port"] = int(config["resources"]["ports"])
    _services[service_name] = service
    service["replicas"].append(_replica_launch(service))
    return service_name, _address(service)


def _serve_status(service_names=None, **_):
    records = []
    for name, service in _services.items():
        if service_names is not None and name not in service_names:
            continue
        replicas = _replicas(service)
        statuses = [r["status"] for r in replicas]
        if ReplicaStatus.READY in statuses:
            status = ServiceStatus.READY
        elif any(s.name.startswith("FAILED") for s in statuses):
            status = ServiceStatus.FAILED
        else:
            status = ServiceStatus.REPLICA_INIT
        records.append(
            {
                "name": name,
                "status": status,
                "endpoint": _address(service),
                "replica_info": [
                    {"replica_id": r["id"], "name": f"{name}-{r['id']}", "status": r["status"],
                     "endpoint": _address(service), "launched_at": None}
                    for r in replicas
                ],
            }
        )  # fmt: skip
    return records


def _serve_down(service_names=None, all=False, purge=False):  # noqa: A002 - SkyPilot's name
    for name in list(_services) if all else service_names or []:
        service = _services.pop(name, None)
        for replica in (service or {}).get("replicas", []):
            proc = replica["proc"]
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        (_DIR / f"serve-down-{name}").touch()


def _tail_logs(service_name, target, replica_id=None, follow=True, output_stream=None):
    log = _DIR / f"serve-{service_name}-{replica_id}.log"
    text = log.read_text(errors="replace") if log.exists() else ""
    (output_stream or sys.stdout).write(text)


serve = SimpleNamespace(
    ReplicaStatus=ReplicaStatus,
    ServiceStatus=ServiceStatus,
    up=lambda task, service_name, _need_confirmation=False: _request(
        lambda: _serve_up(task, service_name)
    ),
    status=lambda service_names, use_endpoint_cache=False: _request(
        lambda: _serve_status(service_names)
    ),
    down=lambda service_names, all=False, purge=False: _request(  # noqa: A006
        lambda: _serve_down(service_names, all, purge)
    ),
    tail_logs=_tail_logs,
)
