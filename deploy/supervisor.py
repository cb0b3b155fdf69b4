"""Dedicated endpoint processes on this machine: started detached (they outlive the worker
that started them), checked by a beat task, restarted when they die, stopped on request.

Each process carries its install's mark in its environment (INSTALL_ENV), so a process whose
row is gone (its workspace deleted, a test's database emptied) or whose deployment is halted
is still found on this machine, and ended, by the next check."""

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Collection
from pathlib import Path

import httpx
import psutil
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from deploy.inference.tokens import inference_token
from deploy.install import install_mark
from deploy.models import Deployment, DeploymentState, Placement

logger = logging.getLogger(__name__)

HEALTH_TIMEOUT = 2.0
START_WAIT_SECONDS = 90
PORT_TRIES = 3  # ports tried when the one found free is taken before the process binds it
LOG_TAIL_BYTES = 16 * 1024
INSTALL_ENV = "KESTREL_ENDPOINT_INSTALL"
NAME_PREFIX = "deployment-"
# A process younger than this may be one a worker has just spawned and not yet written down.
STRAY_GRACE_SECONDS = 15


def log_path(deployment: Deployment) -> Path:
    folder = Path(settings.TRAINING_DIR).parent / "deployments"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{deployment.slug}.log"


def log_tail(deployment: Deployment) -> str:
    path = log_path(deployment)
    if not path.exists():
        return ""
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
        return f.read().decode("utf-8", "replace")


def _url(deployment: Deployment) -> str:
    return f"http://{settings.DEPLOY_HOST}:{deployment.port}"


def endpoint_route(deployment: Deployment) -> tuple[str, str]:
    """Where a web process sends the endpoint's calls, and the secret it mints their tokens
    with: read from the row (a process here, or SkyServe's load balancer), so any web process
    routes to it. ("", "") while it has no address."""
    if deployment.placement == Placement.SKYSERVE:
        from deploy.remote_endpoint import endpoint_secret

        return (deployment.url, endpoint_secret(deployment)) if deployment.url else ("", "")
    url = deployment.url or (_url(deployment) if deployment.port else "")
    return url, settings.INFERENCE_TOKEN if url else ""


def health(deployment: Deployment) -> dict | None:
    """The process's /health answer, if it is this deployment's process and answers."""
    if not deployment.port:
        return None
    try:
        answer = httpx.get(f"{_url(deployment)}/health", timeout=HEALTH_TIMEOUT).json()
    except (httpx.HTTPError, ValueError):
        return None
    return answer if answer.get("name") == deployment.server_name else None


def stats(deployment: Deployment) -> dict | None:
    url, secret = endpoint_route(deployment)
    if not url:
        return None
    try:
        return httpx.get(
            f"{url}/stats",
            headers={
                "Authorization": "Bearer "
                + inference_token(
                    secret=secret,
                    server=deployment.server_name,
                    action="stats",
                )
            },
            timeout=HEALTH_TIMEOUT,
        ).json()
    except (httpx.HTTPError, ValueError):
        return None


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((settings.DEPLOY_HOST, port))
        except OSError:
            return False
    return True


def _free_port(deployment: Deployment, skip: Collection[int] = ()) -> int:
    taken = set(skip) | set(
        Deployment.objects.exclude(pk=deployment.pk)
        .exclude(port=None)
        .values_list("port", flat=True)
    )
    for port in settings.DEPLOY_PORTS:
        if port not in taken and _port_free(port):
            return port
    raise RuntimeError("Every port for dedicated endpoints is in use.")


def _reap(pid: int | None) -> None:
    """Collect a dead child of this worker, so it does not linger as a zombie."""
    if pid:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass


def _is_endpoint(pid: int, deployment: Deployment) -> bool:
    """Whether `pid` is still this deployment's process: a pid saved before a reboot, or from a
    process that ended long ago, may be anyone's by now. Without /proc (macOS) the pid is
    trusted."""
    proc = Path("/proc")
    if not proc.is_dir():
        return True
    try:
        arguments = (proc / str(pid) / "cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return deployment.server_name.encode() in arguments


def _stop(deployment: Deployment, pid: int | None = None) -> None:
    """End the deployment's process (its saved pid, or `pid`), and only if it is still it."""
    pid = pid or deployment.pid
    if pid and _is_endpoint(pid, deployment):
        _kill(pid)
    else:
        _reap(pid)  # ended: collect it if it was our child


def _kill(pid: int | None) -> None:
    if not pid:
        return
    try:
        os.killpg(pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        _reap(pid)
        return
    for _ in range(50):
        _reap(pid)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    _reap(pid)


def process_start(deployment: Deployment) -> Deployment:
    """Start the deployment's process and wait until it answers (or give up: failed).

    The process binds its port only once it has imported itself, seconds after the port was
    found free; a port another process took meanwhile (another install's endpoint, another
    worker's) is given up for the next free one, up to PORT_TRIES times. A port lost once is
    not tried again, even if it is free by the time the process has died of it: whoever took
    it is likely starting on it again (CI's SQLite run, 2026-12-06: another worker's endpoint
    restarting on 8800 took it three times in a row)."""
    lost: set[int] = set()
    for attempt in range(1, PORT_TRIES + 1):
        port = deployment.port
        if not (port and port not in lost and _port_free(port)):
            port = _free_port(deployment, skip=lost)
        proc = _process_spawn(deployment, port)
        deployment.refresh_from_db()
        deadline = time.monotonic() + START_WAIT_SECONDS
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            if health(deployment):
                Deployment.objects.filter(pk=deployment.pk).update(
                    state=DeploymentState.RUNNING, checked_at=timezone.now()
                )
                deployment.refresh_from_db()
                return deployment
            time.sleep(0.3)
        exited = proc.poll() is not None
        _stop(deployment, proc.pid)
        # Its port taken: by a process that still holds it, or by one that has let it go by
        # now (another worker's endpoint, stopped meanwhile), which only its log tells.
        this_try = log_tail(deployment).rpartition("\n--- starting at ")[2]
        lost_port = exited and (not _port_free(port) or "address already in use" in this_try)
        if not (lost_port and attempt < PORT_TRIES):
            break
        lost.add(port)
    tail = log_tail(deployment).strip().splitlines()[-5:]
    Deployment.objects.filter(pk=deployment.pk).update(
        state=DeploymentState.FAILED,
        pid=None,
        log=log_tail(deployment)[-6000:],
        last_error="The endpoint process did not start: " + (" / ".join(tail) or "no output"),
    )
    deployment.refresh_from_db()
    return deployment


def endpoint_processes(install: str | None = None) -> list[tuple[int, str]]:
    """(pid, slug) of every endpoint process of `install` (this one by default) running on
    this machine, found by their command line and their environment's mark. Without /proc
    (macOS) none are found: the saved pids are all there is."""
    install = install or install_mark()
    wanted = f"{INSTALL_ENV}={install}".encode()
    found = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            arguments = (entry / "cmdline").read_bytes().split(b"\0")
            if b"deploy.inference" not in arguments or b"--name" not in arguments:
                continue
            if wanted not in (entry / "environ").read_bytes().split(b"\0"):
                continue
        except OSError:  # ended meanwhile, or another user's
            continue
        at = arguments.index(b"--name") + 1
        name = arguments[at].decode(errors="replace") if at < len(arguments) else ""
        if name.startswith(NAME_PREFIX):
            found.append((int(entry.name), name.removeprefix(NAME_PREFIX)))
    return found


def endpoint_processes_stop(install: str | None = None) -> int:
    """End every endpoint process of `install` on this machine, whatever the database says
    (a test's end; the database may be gone already). Returns how many were ended."""
    found = endpoint_processes(install)
    for pid, _ in found:
        _kill(pid)
    return len(found)


def _young(pid: int) -> bool:
    try:
        return time.time() - psutil.Process(pid).create_time() < STRAY_GRACE_SECONDS
    except psutil.Error:
        return False


def endpoints_stray_stop() -> int:
    """End this install's endpoint processes on this machine that no deployment wants: its row
    is gone (the workspace was deleted), it is halted (not meant to run, stopped, failed), or
    it is not the process the row names (a second one). A row a worker holds (starting,
    reconciling) is left to it. Returns how many processes were ended."""
    ended = 0
    for pid, slug in endpoint_processes():
        with transaction.atomic():
            row = Deployment.objects.filter(slug=slug).first()
            if row is not None:
                row = Deployment.objects.select_for_update(skip_locked=True).filter(pk=row.pk)
                row = row.first()
                if row is None:
                    continue  # a worker is on it
                wanted = row.desired_running and row.state not in (
                    DeploymentState.STOPPED,
                    DeploymentState.FAILED,
                )
                # Young and not the row's: perhaps spawned and not yet written down.
                if wanted and (row.pid == pid or _young(pid)):
                    continue
            logger.warning("ending endpoint process %s of %s: no deployment wants it", pid, slug)
            _kill(pid)
            ended += 1
    return ended


def _process_spawn(deployment: Deployment, port: int) -> subprocess.Popen:
    """`python -m deploy.inference` for the deployment on `port`, detached, its output appended
    to the deployment's log; the row says it is starting there."""
    log = log_path(deployment).open("ab")
    log.write(f"\n--- starting at {timezone.now():%Y-%m-%d %H:%M:%S} on port {port}\n".encode())
    log.flush()
    proc = subprocess.Popen(  # noqa: S603 (our interpreter and module, fixed arguments)
        [
            sys.executable,
            "-m",
            "deploy.inference",
            "--host",
            settings.DEPLOY_HOST,
            "--port",
            str(port),
            "--name",
            f"{NAME_PREFIX}{deployment.slug}",
        ],
        cwd=settings.BASE_DIR,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: it outlives the worker
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": os.environ.get("DJANGO_SETTINGS_MODULE", "config.settings"),
            INSTALL_ENV: install_mark(),
        },
    )
    log.close()
    Deployment.objects.filter(pk=deployment.pk).update(
        port=port,
        url=f"http://{settings.DEPLOY_HOST}:{port}",
        pid=proc.pid,
        host=socket.gethostname(),
        state=DeploymentState.STARTING,
        started_at=timezone.now(),
    )
    return proc


def process_stop(deployment: Deployment) -> Deployment:
    _stop(deployment)
    Deployment.objects.filter(pk=deployment.pk).update(state=DeploymentState.STOPPED, pid=None)
    deployment.refresh_from_db()
    return deployment


def _ours(deployment: Deployment) -> bool:
    """A process here is this machine's to supervise; SkyServe's services any worker's."""
    if deployment.placement == Placement.SKYSERVE:
        return True
    return not deployment.host or deployment.host == socket.gethostname()


def deployment_reconcile(deployment_id: int) -> Deployment | None:
    """Bring one deployment to what is wanted: running (start it if it does not answer) or
    stopped. One at a time per deployment (row lock taken without waiting)."""
    with transaction.atomic():
        deployment = (
            Deployment.objects.select_for_update(skip_locked=True).filter(pk=deployment_id).first()
        )
        if deployment is None or not _ours(deployment):
            return deployment
        if deployment.placement == Placement.SKYSERVE:
            from deploy.remote_endpoint import remote_check

            return remote_check(deployment)
        if not deployment.desired_running:
            return process_stop(deployment)
        if health(deployment):
            if deployment.state != DeploymentState.RUNNING:
                deployment.state = DeploymentState.RUNNING
                deployment.save(update_fields=["state"])
            # The tail in the row: the page of a web process on another machine shows it.
            Deployment.objects.filter(pk=deployment.pk).update(
                checked_at=timezone.now(), log=log_tail(deployment)[-6000:]
            )
            return deployment
        was_running = deployment.state == DeploymentState.RUNNING
        _stop(deployment)  # hung or half-dead: make sure it is gone
        if was_running:
            Deployment.objects.filter(pk=deployment.pk).update(
                restarts=deployment.restarts + 1,
                last_error=(
                    f"The process stopped answering at {timezone.now():%Y-%m-%d %H:%M:%S} UTC "
                    "and was restarted."
                ),
            )
            deployment.refresh_from_db()
        return process_start(deployment)


def deployments_check() -> int:
    """Every deployment of this machine: restart the dead, stop the unwanted, end the processes
    no deployment wants. One that failed to start waits for a person to press Start again.
    Returns how many were looked at."""
    endpoints_stray_stop()
    from deploy.remote_endpoint import services_stray_down

    services_stray_down()
    ids = list(
        Deployment.objects.exclude(state=DeploymentState.STOPPED, desired_running=False)
        .exclude(state=DeploymentState.FAILED)
        .values_list("pk", flat=True)
    )
    for pk in ids:
        deployment_reconcile(pk)
    return len(ids)


def deployments_halt() -> int:
    """Stop this machine's endpoint processes and keep what is wanted: those meant to run show
    as stopped and the next check starts them again. `make run` calls this on Ctrl-C, once its
    worker and beat are gone. Returns how many processes were stopped."""
    halted = 0
    for deployment in Deployment.objects.exclude(pid=None).filter(placement=Placement.LOCAL):
        if not _ours(deployment):
            continue
        process_stop(deployment)
        halted += 1
    # And any the rows lost track of (a worker killed between spawning one and saving its pid).
    return halted + endpoint_processes_stop()
