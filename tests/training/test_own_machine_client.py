""" "Train on your own machine", end to end (issue 20): the variables and the command the page
shows, with the key its button made, run as they are by stock `ultralytics` on "a person's
machine" (a subprocess, not under pytest or CI) against Kestrel served live, train on the
Kestrel dataset picked and report the run into the page's project, under the page's run name.
Only what a real machine would change is changed: a model built from its YAML (no download
offline) and a tiny, one-epoch CPU run."""

import html
import re
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.test import Client
from django.urls import reverse

from tests.platform_client import client_env
from tests.servers import app_server
from tests.training.helpers import version_of
from training.models import JobKind, TrainedModel, TrainingJob
from workspaces.models import ApiKey, Project

COCO8 = Path("/work/shared/datasets/coco8")
if not COCO8.exists():  # the checkout's sibling, as the other training tests read it
    COCO8 = Path(__file__).resolve().parents[3] / "shared/datasets/coco8"
# What only a machine with internet and time would keep: pretrained weights and a long run.
TINY = ["epochs=1", "imgsz=64", "batch=4", "device=cpu", "amp=False", "workers=0", "plots=False"]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def _pre(body: str, testid: str) -> str:
    found = re.search(rf'<pre [^>]*data-testid="{testid}">(.*?)</pre>', body, re.S)
    assert found, body[:2000]
    return html.unescape(found[1])


def _machine_env(home: Path, exports: str) -> dict:
    """A person's machine (tests.platform_client) with the page's `export` lines, read as a
    shell reads them."""
    env = client_env(home / "config")
    for line in exports.splitlines():
        words = shlex.split(line)
        assert words[0] == "export" and len(words) == 2, line
        name, _, value = words[1].partition("=")
        env[name] = value
    return env


@pytest.mark.same_on_any_database(
    "the stock client run by the page's commands is what is tested; its rows are written as in "
    "test_platform_client.py's first test, which runs on both"
)
def test_the_pages_commands_train_on_the_picked_dataset_and_report_to_the_project(team, tmp_path):
    coco8 = version_of(
        user=team.owner, workspace=team.workspace, folder=COCO8, task="detect", name="COCO 8"
    )
    project = Project.objects.create(
        workspace=team.workspace, name="Harbour Seals", created_by=team.owner
    )
    admin = Client()
    admin.force_login(team.admin)
    url = reverse("job_own_machine", kwargs={"ws_slug": "acme", "pk": project.pk})
    with app_server() as live:
        host = urlsplit(live).netloc  # the page as a browser at the live server's address has it
        page = admin.get(url, {"data": coco8.dataset.pk, "name": "Dawn Run"}, HTTP_HOST=host)
        made = admin.post(url, {}, headers={"HX-Request": "true"}, HTTP_HOST=host)
        assert made.status_code == 200
        exports = _pre(made.content.decode(), "own-env")
        commands = _pre(page.content.decode(), "own-train").splitlines()
        assert commands[0] == "pip install ultralytics"
        argv = shlex.split(commands[1])
        assert argv[:2] == ["yolo", "train"]
        assert "data=ul://acme/datasets/coco-8" in argv and "project=acme/harbour-seals" in argv
        argv = [a for a in argv[2:] if not a.startswith("model=")]
        home = tmp_path / "machine"
        env = _machine_env(home, exports)
        assert env["ULTRALYTICS_PLATFORM_URL"] == live
        done = subprocess.run(  # noqa: S603 - the installed client
            [
                str(Path(sys.executable).parent / "yolo"),
                "train",
                "model=yolo11n.yaml",
                *argv,
                *TINY,
            ],
            cwd=home,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    job = TrainingJob.objects.get(project=project)
    assert job.kind == JobKind.EXTERNAL and job.name == "dawn-run", output[-3000:]
    assert job.dataset_version == coco8  # the version the ul:// URI pulled
    assert job.epochs_done == 1, output[-3000:]
    model = TrainedModel.objects.get(job=job)
    assert model.workspace == team.workspace and model.project == project
    key = ApiKey.objects.get()
    assert key.scopes == ["read", "train"] and key.last_used_at is not None
