"""Settings modes, checked in fresh interpreters so each reads its own environment."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROD = {
    "DJANGO_ENV": "production",
    "SECRET_KEY": "k" * 64 + "-not-a-real-secret-but-long-and-random-enough-9f8e7d",
    "ALLOWED_HOSTS": "kestrel.example.com",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/postgres",
}


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    unset = {
        "DJANGO_SETTINGS_MODULE",
        "DATABASE_URL",
        "SECRET_KEY",
        "DJANGO_ENV",
        "DEBUG",
        "MEDIA_ROOT",
    }
    clean = {k: v for k, v in os.environ.items() if k not in unset}
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env={**clean, "DJANGO_SETTINGS_MODULE": "config.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _settings(names: list[str], **env: str) -> dict:
    code = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        f"print(json.dumps({{n: getattr(s, n) for n in {names!r}}}, default=str))"
    )
    result = _run(["-c", code], **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_production_passes_check_deploy():
    result = _run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], **PROD)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_to_start_without_a_secret_key():
    env = {k: v for k, v in PROD.items() if k != "SECRET_KEY"}
    result = _run(["manage.py", "check"], **env)
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_production_has_secure_cookies_hsts_and_a_csp_without_inline_script():
    s = _settings(
        [
            "DEBUG",
            "SESSION_COOKIE_SECURE",
            "CSRF_COOKIE_SECURE",
            "SECURE_HSTS_SECONDS",
            "CONTENT_SECURITY_POLICY",
        ],
        **PROD,
    )
    assert s["DEBUG"] is False
    assert s["SESSION_COOKIE_SECURE"] and s["CSRF_COOKIE_SECURE"]
    assert int(s["SECURE_HSTS_SECONDS"]) >= 31536000
    scripts = s["CONTENT_SECURITY_POLICY"]["DIRECTIVES"]["script-src"]
    assert scripts == ["'self'"]


def test_quick_start_is_sqlite_in_wal_under_var_and_local_media(tmp_path):
    s = _settings(["DATABASES", "STORAGES", "MEDIA_ROOT"])  # no DATABASE_URL at all
    db = s["DATABASES"]["default"]
    assert db["ENGINE"] == "django.db.backends.sqlite3"
    assert db["NAME"].endswith("var/kestrel.sqlite3")
    assert "journal_mode=WAL" in db["OPTIONS"]["init_command"]
    assert s["STORAGES"]["default"]["BACKEND"].endswith("FileSystemStorage")
    assert s["MEDIA_ROOT"].endswith("var/media")


def test_sqlite_database_really_runs_in_wal_mode(tmp_path):
    code = (
        "import django; django.setup(); from django.db import connection; "
        "c = connection.cursor(); c.execute('PRAGMA journal_mode'); print(c.fetchone()[0])"
    )
    result = _run(["-c", code], DATABASE_URL=f"sqlite:///{tmp_path / 'k.sqlite3'}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "wal"


def test_s3_storage_when_a_bucket_is_named():
    s = _settings(
        ["STORAGES"],
        AWS_STORAGE_BUCKET_NAME="kestrel",
        AWS_S3_ENDPOINT_URL="http://minio:9000",
    )
    default = s["STORAGES"]["default"]
    assert default["BACKEND"] == "storages.backends.s3.S3Storage"
    assert default["OPTIONS"]["bucket_name"] == "kestrel"
    assert default["OPTIONS"]["endpoint_url"] == "http://minio:9000"


def test_celery_is_json_only_with_prefetch_one_and_a_beat_schedule():
    from django.conf import settings

    from config.celery import app

    assert app.conf.task_serializer == "json"
    assert app.conf.accept_content == ["json"]
    assert app.conf.worker_prefetch_multiplier == 1
    assert app.conf.task_acks_late is False
    assert app.conf.broker_transport_options["visibility_timeout"] > app.conf.task_time_limit
    app.loader.import_default_modules()  # what a worker does at start
    beat = settings.CELERY_BEAT_SCHEDULE
    assert {entry["task"] for entry in beat.values()} <= set(app.tasks.keys())


def test_production_static_files_rewrite_editor_module_imports_to_hashed_names(settings, tmp_path):
    """A deploy changes the editor's modules' names with their content, imports included."""
    import re

    from django.contrib.staticfiles.storage import staticfiles_storage
    from django.core.management import call_command
    from django.utils.functional import empty

    settings.STATIC_ROOT = tmp_path
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "config.storage.StaticStorage"},
    }
    staticfiles_storage._wrapped = empty  # built again from the settings above
    try:
        call_command("collectstatic", interactive=False, verbosity=0)
    finally:
        staticfiles_storage._wrapped = empty
    (main,) = (tmp_path / "js" / "annotate").glob("main.*.js")
    imports = re.findall(r'from "\./([^"]+)"', main.read_text())
    assert imports and all(re.fullmatch(r"[\w/]+\.[0-9a-f]{12}\.js", name) for name in imports)
