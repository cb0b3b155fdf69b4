"""A wheel built from the repo runs on its own: every app, the templates and the static files
are in it. Before, pyproject.toml packaged only config, workspaces and billing, and the image
worked only because PYTHONPATH pointed at the source folder."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.servers import ROOT

# Run from an empty folder with only the installed wheel on the path: every import, template
# and static file must come from it.
PROBE = r"""
import json, os, sys
import django
from django.conf import settings
django.setup()
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.template.loader import get_template
from django.test import Client

import config, training
call_command("check")
call_command("migrate", verbosity=0)
for name in ("404.html", "training/project_detail.html", "datasets/gallery.html"):
    get_template(name)
login = Client().get("/accounts/login/")
print(json.dumps({
    "config": config.__file__,
    "training": training.__file__,
    "static": finders.find("js/train_form.js"),
    "login": login.status_code,
}))
"""


def test_a_wheel_built_from_the_repo_serves_pages(tmp_path):
    source = tmp_path / "source"
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    for name in filter(None, tracked.split("\0")):
        if (ROOT / name).is_file():  # a file deleted in the working tree is not built
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    build = [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(source)]
    subprocess.run(build, check=True, capture_output=True)
    (wheel,) = wheels.glob("kestrel-*.whl")
    subprocess.run([*pip, "install", "--no-deps", "--target", str(site), str(wheel)], check=True)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "DATABASE_URL", "PYTEST", "KESTREL"))
    }
    env.update(
        PYTHONPATH=str(site),
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=f"sqlite:///{tmp_path / 'wheel.sqlite3'}",
        KESTREL_VAR_DIR=str(tmp_path / "var"),
        ALLOWED_HOSTS="testserver",
    )
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=elsewhere, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    for module in ("config", "training", "static"):
        assert Path(found[module]).is_relative_to(site), found
    assert found["login"] == 200
