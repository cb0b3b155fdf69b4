"""docker-compose.yml and .env.example checked against config/settings.py, without a Docker engine.

The compose file is read with PyYAML (a dependency of uvicorn[standard]); `docker compose config`
runs only where a compose binary is installed.
"""

import ast
import os
import re
import shutil
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import environ
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
SETTINGS_FILE = ROOT / "config" / "settings.py"
ENV_EXAMPLE = ROOT / ".env.example"

APP_SERVICES = ("web", "worker", "beat", "gpu-worker")
ALL_SERVICES = ("postgres", "redis", "minio", "minio-init", *APP_SERVICES)
ENV_READERS = {"str", "bool", "list", "int", "db_url", "email_url"}
# Variables whose value is a URL to another container: its host must be a compose service.
URL_VARIABLES = (
    "DATABASE_URL",
    "REDIS_URL",
    "CACHE_URL",
    "CELERY_BROKER_URL",
    "AWS_S3_ENDPOINT_URL",
)


def settings_env_names() -> set[str]:
    """Names settings.py reads through env.str("NAME", ...), env.bool(...), env.list(...), ..."""
    names = set()
    for node in ast.walk(ast.parse(SETTINGS_FILE.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "env"
            and node.func.attr in ENV_READERS
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names.add(node.args[0].value)
    return names


def service_env(service: dict) -> dict[str, str]:
    environment = service.get("environment") or {}
    if isinstance(environment, list):  # ["NAME=value", ...] form
        return dict(item.partition("=")[::2] for item in environment)
    return {name: "" if value is None else str(value) for name, value in environment.items()}


def command_words(service: dict) -> list[str]:
    command = service.get("command") or []
    return command.split() if isinstance(command, str) else [str(word) for word in command]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose) -> dict:
    return compose["services"]


def test_settings_parser_finds_the_variables():
    names = settings_env_names()
    # One of each reader, so a change in how settings.py is written can't empty the set unseen.
    assert {
        "SECRET_KEY",
        "DEBUG",
        "ALLOWED_HOSTS",
        "CONN_MAX_AGE",
        "DATABASE_URL",
        "EMAIL_URL",
    } <= names


def test_services_exist(services):
    assert set(ALL_SERVICES) <= set(services)


def test_app_services_set_only_variables_settings_reads(services):
    known = settings_env_names()
    for name in APP_SERVICES:
        unknown = set(service_env(services[name])) - known
        assert not unknown, f"{name} sets {sorted(unknown)}, which config/settings.py never reads"


def test_app_services_run_production_against_compose_hosts(services):
    for name in APP_SERVICES:
        env = service_env(services[name])
        assert env["DJANGO_ENV"] == "production", name
        assert env["SECRET_KEY"].startswith("${SECRET_KEY:?"), (
            f"{name}: SECRET_KEY must be required"
        )
        assert "ALLOWED_HOSTS" in env, name
        assert "DATABASE_URL" in env and "REDIS_URL" in env, name
        for variable in URL_VARIABLES:
            if variable in env:
                host = urlsplit(env[variable]).hostname
                assert host in services, f"{name}: {variable} host {host!r} is no compose service"
        assert environ.Env.db_url_config(env["DATABASE_URL"])["ENGINE"] == (
            "django.db.backends.postgresql"
        )


def test_app_services_wait_for_their_backends(services):
    for backend in ("postgres", "redis", "minio"):
        assert "healthcheck" in services[backend], backend
    for name in APP_SERVICES:
        depends_on = services[name]["depends_on"]
        assert depends_on["postgres"]["condition"] == "service_healthy", name
        assert depends_on["redis"]["condition"] == "service_healthy", name
        assert depends_on["minio-init"]["condition"] == "service_completed_successfully", name
    assert services["minio-init"]["depends_on"]["minio"]["condition"] == "service_healthy"


def test_object_storage_uses_minio_root_user(services):
    minio_env = service_env(services["minio"])
    for name in APP_SERVICES:
        env = service_env(services[name])
        assert env["AWS_STORAGE_BUCKET_NAME"], name
        assert env["AWS_ACCESS_KEY_ID"] == minio_env["MINIO_ROOT_USER"], name
        assert env["AWS_SECRET_ACCESS_KEY"] == minio_env["MINIO_ROOT_PASSWORD"], name
    assert service_env(services["minio-init"]) == minio_env
    init_command = " ".join(command_words(services["minio-init"]))
    bucket = service_env(services["web"])["AWS_STORAGE_BUCKET_NAME"]
    assert f"mb --ignore-existing kestrel/{bucket}" in init_command
    # Private even if it was opened before: stored files leave only through signed URLs.
    assert f"anonymous set none kestrel/{bucket}" in init_command


def test_commands(services):
    web = " ".join(command_words(services["web"]))
    assert re.search(
        r"migrate --noinput && python manage.py seed_demo"
        r" && (exec )?python -m config\.web",
        web,
    ), web
    worker = command_words(services["worker"])
    assert worker[:4] == ["celery", "-A", "config", "worker"]
    assert worker[worker.index("-Q") + 1] == "default"
    trainer = command_words(services["trainer"])
    assert trainer[:4] == ["celery", "-A", "config", "worker"]
    assert trainer[trainer.index("-Q") + 1] == "training"
    assert trainer[trainer.index("--concurrency") + 1] == "1"
    assert command_words(services["beat"])[:4] == ["celery", "-A", "config", "beat"]
    gpu = command_words(services["gpu-worker"])
    assert gpu[:4] == ["celery", "-A", "config", "worker"]
    assert gpu[gpu.index("-Q") + 1] == "training"


def test_gpu_worker_reserves_nvidia_gpus_behind_a_profile(services):
    devices = services["gpu-worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert any(
        device.get("driver") == "nvidia"
        and str(device.get("count")) == "all"
        and "gpu" in device.get("capabilities", [])
        for device in devices
    ), devices
    assert "gpu" in services["gpu-worker"]["profiles"]
    # Everything else starts on a machine without a GPU.
    for name in ALL_SERVICES:
        if name != "gpu-worker":
            assert not services[name].get("profiles"), name


def compose_command() -> list[str] | None:
    """`docker compose` (v2 plugin) where it works, else a `docker-compose` binary, else None."""
    candidates = []
    if docker := shutil.which("docker"):
        candidates.append([docker, "compose"])
    if legacy := shutil.which("docker-compose"):
        candidates.append([legacy])
    for command in candidates:
        try:
            probe = subprocess.run(
                [*command, "version"], capture_output=True, text=True, timeout=60
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return command
    return None


def test_docker_compose_config_accepts_the_file():
    command = compose_command()
    if command is None:
        pytest.skip(
            "no compose binary: neither `docker compose` (v2 plugin) nor `docker-compose` runs here"
        )
    env = {**os.environ, "SECRET_KEY": "compose-config-check-not-a-secret"}
    result = subprocess.run(
        [*command, "-f", str(COMPOSE_FILE), "--profile", "gpu", "config", "-q"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"{' '.join(command)} config -q:\n{result.stderr}{result.stdout}"
