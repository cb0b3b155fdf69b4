"""Item 4: the quick start's secrets and error pages.

`make run` used a public default SECRET_KEY and DEBUG on: anyone who could reach it forged
invitation links and the model server's token, and every error showed a debug page with
settings and paths. Each test reproduces one of those against the quick-start settings.
"""

import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.core import signing
from django.test import Client, override_settings
from django.urls import reverse

from config.secrets import install_secret
from tests.security.boom_urls import MARKER
from tests.workspaces.factories import UserFactory
from workspaces.models import Role
from workspaces.services.invitations import invitation_create

ROOT = Path(__file__).resolve().parents[2]
# The key every quick start shared before: public, in the repository's history.
PUBLIC_KEY = "dev-only-insecure-key-change-me-" + "x" * 32
# Checks `check --deploy` makes that do not apply to a plain-HTTP server on loopback: they
# are all about HTTPS, which the quick start does not serve. Everything else must hold.
HTTPS_ONLY_CHECKS = {"security.W004", "security.W008", "security.W012", "security.W016"}


def _quick_start(args: list[str]) -> subprocess.CompletedProcess:
    """A fresh interpreter with the quick start's environment: nothing set but the database."""
    unset = {"DJANGO_SETTINGS_MODULE", "SECRET_KEY", "DEBUG", "DJANGO_ENV", "DATABASE_URL"}
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["DJANGO_SETTINGS_MODULE"] = "config.settings"
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def _quick_start_settings(names: list[str]) -> dict:
    code = (
        "import django, json; django.setup(); from django.conf import settings as s; "
        f"print(json.dumps({{n: getattr(s, n) for n in {names!r}}}, default=str))"
    )
    result = _quick_start(["-c", code])
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_quick_start_key_is_random_kept_private_in_var_and_never_printed():
    s = _quick_start_settings(["SECRET_KEY", "DEBUG", "INFERENCE_TOKEN"])
    key_file = ROOT / "var" / "secret_key"
    assert s["SECRET_KEY"] != PUBLIC_KEY
    assert s["SECRET_KEY"] == key_file.read_text().strip()
    assert len(s["SECRET_KEY"]) >= 50
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    # The model servers' secret is not derivable from anything public either.
    public_inference = hashlib.sha256(f"kestrel-inference:{PUBLIC_KEY}".encode()).hexdigest()
    assert s["INFERENCE_TOKEN"] != public_inference
    # Again: the same key (sessions and links survive a restart).
    assert _quick_start_settings(["SECRET_KEY"])["SECRET_KEY"] == s["SECRET_KEY"]
    check = _quick_start(["manage.py", "check", "--deploy"])
    assert s["SECRET_KEY"] not in check.stdout + check.stderr


def test_processes_starting_together_all_get_the_same_new_key(tmp_path):
    path = tmp_path / "var" / "secret_key"
    code = "import sys; from pathlib import Path; from config.secrets import install_secret; "
    code += "print(install_secret(Path(sys.argv[1])))"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
        )
        for _ in range(8)
    ]
    keys = {proc.communicate(timeout=60)[0].strip() for proc in procs}
    assert all(proc.returncode == 0 for proc in procs)
    assert len(keys) == 1 and len(keys.pop()) >= 50
    assert sorted(p.name for p in path.parent.iterdir()) == ["secret_key"]  # no leftovers
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert install_secret(path) == path.read_text().strip()  # kept


def test_quick_start_runs_with_debug_off_and_passes_the_checks_that_apply_to_it():
    assert _quick_start_settings(["DEBUG"])["DEBUG"] is False
    result = _quick_start(["manage.py", "check", "--deploy"])
    assert result.returncode == 0, result.stderr
    found = {
        word.strip("():")
        for line in (result.stdout + result.stderr).splitlines()
        for word in line.split()
        if word.startswith("(") and word.endswith(")") and "." in word
    }
    assert found <= HTTPS_ONLY_CHECKS, found - HTTPS_ONLY_CHECKS


@pytest.mark.django_db
def test_an_invitation_link_forged_with_the_old_public_key_is_refused(team, client):
    invitation = invitation_create(
        access=team.access("admin"), email="new@acme.test", role=Role.ADMIN, base_url="http://x/"
    )
    forged = signing.dumps(
        {"i": invitation.pk, "e": "new@acme.test"},
        key=PUBLIC_KEY,
        salt="kestrel.invitation",
        compress=True,
    )
    client.force_login(UserFactory(email="new@acme.test"))
    url = reverse("invitation_accept", kwargs={"token": forged})
    page = client.get(url)
    assert page.status_code == 404 and b"not valid" in page.content
    client.post(url)
    assert not team.workspace.memberships.filter(user__email="new@acme.test").exists()


@pytest.fixture(scope="module")
def model_server(tmp_path_factory):
    from tests.deploy.conftest import inference_server_start

    server = inference_server_start(tmp_path_factory.mktemp("inference"), "--name", "shared")
    yield server
    server.stop()


def test_the_model_server_refuses_tokens_made_from_the_old_public_key(model_server):
    from deploy.inference.tokens import inference_token

    public_secret = hashlib.sha256(f"kestrel-inference:{PUBLIC_KEY}".encode()).hexdigest()
    forged = [
        public_secret,  # the old fixed bearer
        inference_token(secret=public_secret, server="shared", action="stats"),
    ]
    for token in forged:
        answer = httpx.get(
            f"{model_server.url}/stats", headers={"Authorization": f"Bearer {token}"}
        )
        assert answer.status_code == 401, answer.text
    assert httpx.get(f"{model_server.url}/stats", headers=model_server.auth("stats")).is_success


@override_settings(DEBUG=True, ROOT_URLCONF="tests.security.boom_urls")
@pytest.mark.django_db
def test_under_debug_only_a_signed_in_superuser_sees_the_technical_error_page():
    anonymous = Client(raise_request_exception=False)
    member = Client(raise_request_exception=False)
    member.force_login(UserFactory())
    for client in (anonymous, member):
        for accept in ("text/html", "text/plain", "application/json"):
            response = client.get("/boom/", headers={"accept": accept})
            assert response.status_code == 500
            body = response.content.decode()
            assert MARKER not in body and "Traceback" not in body, body[:400]
            assert "SECRET_KEY" not in body and str(settings.BASE_DIR) not in body
        # The JSON API: a short JSON answer, never django-ninja's DEBUG traceback.
        response = client.get("/boom-api/boom")
        assert response.status_code == 500
        assert response.json() == {"detail": "Internal server error."}
    admin = Client(raise_request_exception=False)
    admin.force_login(UserFactory(is_staff=True, is_superuser=True))
    assert MARKER in admin.get("/boom/").content.decode()  # what DEBUG is for


def test_every_kestrel_api_answers_unhandled_errors_with_the_json_handler():
    from config.api import api
    from config.errors import api_server_error
    from deploy.api import endpoints

    for ninja_api in (api, endpoints):
        handler = ninja_api._lookup_exception_handler(RuntimeError(MARKER))
        assert getattr(handler, "func", None) is api_server_error, ninja_api.urls_namespace
