"""What several benches set up the same way: a throwaway training folder, a team with a project
and the demo dataset saved as a version, a logged-in session, a Celery training worker."""

import os
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


def demo_setup(work: Path, email: str) -> DemoSetup:
    """Migrate, seed the catalog, and save the demo dataset's images as version 1 of a dataset
    in a new team (after django.setup())."""
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from bench.demo_train import write_yolo
    from datasets.services.datasets import dataset_create
    from datasets.services.ingest import dataset_import_path
    from datasets.services.versions import version_create
    from training.models import GpuType
    from training.services.catalog import gpu_catalog_seed
    from workspaces.models import Project, User
    from workspaces.selectors import workspace_access_for_user
    from workspaces.services import workspace_create_team

    gpu_catalog_seed()
    user, _ = User.objects.get_or_create(email=email)
    team = workspace_create_team(user=user, name=f"bench {email} {time.time():.0f}")
    access = workspace_access_for_user(user=user, slug=team.slug)
    project = Project.objects.create(workspace=team, name="bench", created_by=user)
    write_yolo(work / "demo")
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


def training_worker(env: dict | None = None) -> subprocess.Popen:
    """A Celery worker on this process's training queue, in its own process group."""
    from django.conf import settings

    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "config", "worker", "-Q",
         settings.TRAINING_QUEUE, "--pool", "solo", "--loglevel", "WARNING",
         "--without-heartbeat", "--without-gossip", "--without-mingle"],
        cwd=ROOT, env=env or os.environ.copy(), start_new_session=True,
    )  # fmt: skip


def web_server(port: int) -> subprocess.Popen:
    """The app under uvicorn, one process, as `make run` serves it."""
    return subprocess.Popen(
        [sys.executable, "-m", "config.web", "--host", "127.0.0.1",
         "--port", str(port), "--log-level", "warning", "--timeout-graceful-shutdown", "5"],
        cwd=ROOT, env=os.environ.copy(), start_new_session=True,
    )  # fmt: skip
