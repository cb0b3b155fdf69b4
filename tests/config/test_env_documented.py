"""Every environment variable Kestrel reads is in the README's configuration table, with its
default, and in .env.example.

The settings' reads are recorded as they happen: config.settings is imported in a fresh
interpreter whose os.environ notes each name that config/settings.py itself (directly or through
django-environ) asks for, in each of its branches (quick start; workers on PostgreSQL;
production with a connection pool and S3). Names read elsewhere (the model server's tuning,
scripts/run.sh) are found in the source.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
ENV_EXAMPLE = ROOT / ".env.example"
APP_PACKAGES = ("config", "core", "workspaces", "datasets", "annotation", "training", "billing",
                "deploy")  # fmt: skip
# Read by Kestrel's code, but set by Kestrel itself or by the platform, never by a person.
NOT_SETTINGS = {
    "DJANGO_SETTINGS_MODULE",  # each entry point sets it
    "KESTREL_SUPERVISOR_PID",  # the supervisor tells its trainer who to watch
    "CUDA_VISIBLE_DEVICES",  # the trainer reads which GPUs it was given
    "YOLO_CONFIG_DIR",  # the trainer points Ultralytics at the run's own folder
    "YOLO_VERBOSE",
    "KESTREL_API_KEY",  # in the try-it page's Python snippet, read on the user's machine
    # A rented endpoint's replica fetches its weights from there with a token of its own
    # (deploy/weights_fetch.py): set in its SkyPilot task (deploy/remote_endpoint.py).
    "KESTREL_WEIGHTS_SOURCE",
    "KESTREL_ENDPOINT",
}

RECORDER = r"""
import json, os, sys
SETTINGS = os.path.join(os.getcwd(), "config", "settings.py")
SKIP = ("/environ/", "/os.py", "_collections_abc.py")
seen = set()

class Recording(type(os.environ)):
    def __getitem__(self, key):
        frame = sys._getframe(1)
        while frame and any(part in frame.f_code.co_filename for part in SKIP):
            frame = frame.f_back
        if frame and frame.f_code.co_filename == SETTINGS:
            seen.add(key)
        return super().__getitem__(key)

e = os.environ
os.environ = Recording(e._data, e.encodekey, e.decodekey, e.encodevalue, e.decodevalue)
sys.path.insert(0, os.getcwd())
import config.settings  # noqa: E402,F401
print(json.dumps(sorted(seen)))
"""

BRANCHES = {
    "quick start": {},
    "workers on PostgreSQL": {"DATABASE_URL": "postgres://kestrel@db.example.com/kestrel"},
    "production": {
        "DJANGO_ENV": "production",
        "SECRET_KEY": "x" * 50,
        "ALLOWED_HOSTS": "kestrel.example.com",
        "DATABASE_URL": "postgres://kestrel@db.example.com/kestrel",
        "DB_POOL": "1",
        "AWS_STORAGE_BUCKET_NAME": "kestrel",
    },
}


def settings_reads(tmp_path: Path) -> set[str]:
    names = set()
    for values in BRANCHES.values():
        env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "KESTREL_VAR_DIR": str(tmp_path)}
        out = subprocess.run(
            [sys.executable, "-c", RECORDER],
            cwd=ROOT,
            env=env | values,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        names |= set(json.loads(out.stdout.strip().splitlines()[-1]))
    return names


def source_reads() -> set[str]:
    """os.environ.get("NAME") / os.environ["NAME"] / os.getenv("NAME") in the apps, and
    ${NAME:-default} in scripts/run.sh."""
    pattern = re.compile(r"""os\.(?:environ\.get\(|environ\[|getenv\()\s*["']([A-Z][A-Z0-9_]*)""")
    names = set()
    for package in APP_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if path.name != "test_settings.py":
                names |= set(pattern.findall(path.read_text()))
    names |= set(re.findall(r"\$\{([A-Z][A-Z0-9_]*):-", (ROOT / "scripts" / "run.sh").read_text()))
    return names - NOT_SETTINGS


def readme_table() -> dict[str, str]:
    """The README's configuration table: `NAME` → its default column (a row may name a few
    variables that go together: `HOST`, `PORT`)."""
    table = {}
    for first, default in re.findall(r"^\| (`[^|]*`) \| ([^|]*) \|", README.read_text(), re.M):
        for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", first):
            table[name] = default.strip()
    return table


@pytest.fixture(scope="module")
def settings_read(tmp_path_factory) -> set[str]:
    return settings_reads(tmp_path_factory.mktemp("env"))


@pytest.fixture(scope="module")
def every_read(settings_read) -> set[str]:
    return settings_read | source_reads()


def test_the_recorder_sees_what_settings_reads(every_read):
    # A variable of each kind of read: django-environ's env.str/bool/float/db_url, the var
    # folder, and the production-only branch.
    for name in ("DATABASE_URL", "DEBUG", "LONG_JOB_LEASE_SECONDS", "KESTREL_VAR_DIR",
                 "SECURE_HSTS_SECONDS", "DB_POOL_MAX_SIZE", "AWS_S3_ENDPOINT_URL",
                 "INFERENCE_BATCH_MAX", "INFERENCE_PORT"):  # fmt: skip
        assert name in every_read, name
    # ...and not what libraries read on their own.
    assert not {"CELERY_LOADER", "HOME", "TERM"} & every_read


def test_readme_lists_every_variable_with_its_default(every_read):
    table = readme_table()
    missing = every_read - set(table)
    assert not missing, f"README's configuration table lacks {sorted(missing)}"
    blank = sorted(name for name in every_read if not table[name])
    assert not blank, f"README gives no default for {blank}"
    stale = set(table) - every_read
    assert not stale, f"README lists variables nothing reads: {sorted(stale)}"


def test_env_example_lists_every_variable_settings_reads(settings_read):
    listed = set(re.findall(r"^#? ?([A-Z][A-Z0-9_]*)=", ENV_EXAMPLE.read_text(), re.MULTILINE))
    missing = settings_read - listed
    assert not missing, f".env.example lacks {sorted(missing)}"
