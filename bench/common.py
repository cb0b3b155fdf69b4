"""What several benches set up the same way: a throwaway training folder, a team with a project
and the demo dataset saved as a version, a logged-in session, a Celery worker, the web server,
and stopping what a bench started."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def training_env(prefix: str) -> Path:
    """A temp folder for runs and media, no downloads, a queue of this process's own; call
    before django.setup()."""
    work = Path(tempfile.mkdtemp(prefix=f"kestrel-{prefix}-"))
    os.environ.update(
        TRAINING_DIR=str(work / "training"),
        MEDIA_ROOT=str(work / "media"),
        TRAINING_ALLOW_DOWNLOADS="false",
        TRAINING_QUEUE=f"training-{prefix}-{os.getpid()}",
    )
    return work


@dataclass
class DemoSetup:
    user: object
    team: object
    access: object
    project: object
    version: object
    gpu: object


def demo_yolo_write(root: Path, copies: int = 1) -> None:
    """The demo dataset as a YOLO folder (bench.demo_train.write_yolo), and `copies` - 1 more
    sets of different pictures of the same kind (the demo's generator with other seeds)."""
    from bench.demo_train import write_yolo
    from datasets.services.demo import SEED, TRAIN, demo_images

    write_yolo(root)
    for copy in range(1, copies):
        for n, (data, labels) in enumerate(demo_images(SEED + copy)):
            split = "train" if n < TRAIN else "val"
            (root / "images" / split / f"{copy}-{n:03d}.jpg").write_bytes(data)
            lines = "".join(f"{c} {' '.join(f'{v:.6f}' for v in box)}\n" for c, box in labels)
            (root / "labels" / split / f"{copy}-{n:03d}.txt").write_text(lines)


def demo_setup(work: Path, email: str, copies: int = 1) -> DemoSetup:
    """Migrate, seed the catalog, and save the demo dataset's images (`copies` sets of them, 120
    pictures each) as version 1 of a dataset in a new team (after django.setup())."""
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from datasets.services.datasets import dataset_create
    from datasets.services.ingest import dataset_import_path
    from datasets.services.versions import version_create
    from training.models import GpuType
    from training.services.catalog import gpu_catalog_seed
    from workspaces.models import Project, User
    from workspaces.selectors import workspace_access_for_user
    from workspaces.services.workspaces import workspace_create_team

    gpu_catalog_seed()
    user, _ = User.objects.get_or_create(email=email)
    team = workspace_create_team(user=user, name=f"bench {email} {time.time():.0f}")
    access = workspace_access_for_user(user=user, slug=team.slug)
    project = Project.objects.create(workspace=team, name="bench", created_by=user)
    demo_yolo_write(work / "demo", copies)
    dataset = dataset_create(access=access, name="shapes", task="detect")
    imp = dataset_import_path(access=access, dataset=dataset, path=work / "demo")
    assert imp.status == "succeeded", imp.error
    version = version_create(access=access, dataset=dataset)
    gpu = GpuType.objects.get(slug="local")
    return DemoSetup(user, team, access, project, version, gpu)


def session_cookie(user) -> tuple[str, str]:
    """(cookie name, value) of a new logged-in session for `user`."""
    from django.conf import settings
    from django.contrib.auth import SESSION_KEY
    from django.contrib.sessions.backends.db import SessionStore

    session = SessionStore()
    session[SESSION_KEY] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.create()
    return settings.SESSION_COOKIE_NAME, session.session_key


def celery_worker(queue: str, *args: str, env: dict | None = None) -> subprocess.Popen:
    """A Celery worker on `queue` (with worker options `args`), in its own process group."""
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "--quiet", "worker", "-Q", queue,
         "--loglevel", "WARNING", "--without-heartbeat", "--without-gossip", "--without-mingle",
         *args],
        cwd=ROOT, env=env or os.environ.copy(), start_new_session=True,
    )  # fmt: skip


def training_worker(env: dict | None = None) -> subprocess.Popen:
    """A Celery worker on this process's training queue, in its own process group."""
    from django.conf import settings

    return celery_worker(settings.TRAINING_QUEUE, "--pool", "solo", env=env)


def web_server(port: int, *args: str, root: Path = ROOT) -> subprocess.Popen:
    """The app under uvicorn, as `make run` serves it: one process, or more with
    `--workers N` in `args`. `root`: the checkout whose code it runs (bench/predict_versions.py
    runs another's beside this one)."""
    return subprocess.Popen(
        [sys.executable, "-m", "config.web", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning", "--timeout-graceful-shutdown", "5", *args],
        cwd=root, env=os.environ.copy(), start_new_session=True,
    )  # fmt: skip


def web_wait(base: str, timeout: float = 60) -> None:
    """Until the web at `base` answers (SystemExit after `timeout` seconds)."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            httpx.get(f"{base}/", timeout=1)
            return
        except httpx.TransportError:
            time.sleep(0.3)
    raise SystemExit(f"the web at {base} did not start")


def processes_stop(procs: list[subprocess.Popen], timeout: float = 20) -> None:
    """TERM each process (a Celery worker, uvicorn: each stops its own children), then KILL
    its whole group (they were started in sessions of their own) after `timeout` seconds."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + timeout
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        try:  # the group too: a worker's pool children, uvicorn's workers
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if proc.poll() is None:
            proc.wait(timeout=5)


def plan_unlimited_predict(workspace) -> None:
    """Put `workspace` on a plan of its own without the shared API's rate limit (20 calls a
    minute on the free plan would turn a bench into 429s), as an admin would make one."""
    import secrets

    from billing.models import Plan

    tag = secrets.token_hex(4)
    workspace.plan = Plan.objects.create(
        slug=f"bench-{tag}", name="Bench", max_seats=5, predict_requests_per_minute=1_000_000
    )
    workspace.save(update_fields=["plan"])
