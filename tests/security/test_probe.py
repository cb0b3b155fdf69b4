"""scripts/security_probe.py against the app under uvicorn: it finds nothing on Kestrel as it
is, says what it could not check, and finds the public media route Kestrel used to have."""

import re
import subprocess
import sys

from tests.servers import ROOT, app_server

PROBE = ROOT / "scripts" / "security_probe.py"


def _probe(url: str, *extra: str) -> subprocess.CompletedProcess:
    command = [sys.executable, str(PROBE), url, "--wait", "30", "--time-limit", "90", *extra]
    return subprocess.run(command, capture_output=True, text=True, timeout=150)  # noqa: S603


def _leaked(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.rstrip().endswith("LEAKED")]


def test_probe_holds_on_kestrel_and_catches_the_old_media_route(
    celery_worker_process, plans, tmp_path
):
    mail = tmp_path / "mail"
    mail.mkdir()
    # Verification on (as signup now is), mail written as files the probe reads when told to;
    # the second server has the route config/urls.py used to add under DEBUG.
    env = {
        "EMAIL_URL": f"filemail:///{mail}",
        "ACCOUNT_EMAIL_VERIFICATION": "mandatory",
        "LOG_LEVEL": "ERROR",
    }
    old = {**env, "DJANGO_SETTINGS_MODULE": "tests.security.old_media_route_settings"}
    with app_server(**env) as kestrel, app_server(**old) as leaky:
        skipped = _probe(kestrel)
        held = _probe(kestrel, "--read-mail", str(mail))
        found = _probe(leaky, "--read-mail", str(mail))

    # Without the mail the accounts cannot sign in: nothing is claimed to have held.
    assert skipped.returncode == 2, skipped.stdout + skipped.stderr
    assert "verify the address; skipped" in skipped.stdout

    assert held.returncode == 0, held.stdout + held.stderr
    assert "address verified through the mail" in held.stdout
    assert _leaked(held.stdout) == []
    assert " unchecked" not in held.stdout.split("\nnote:")[0]
    # It tried the other account's pages, files and API objects, and their media paths.
    assert re.search(r"/images/\d+/file/", held.stdout)  # ids depend on what ran before
    for tried in ("/thumb/", "/export/", "/api/v1/imports/", "/api/v1/images/"):
        assert tried in held.stdout, tried
    for tried in ("/media/blobs/", "/media/thumbs/", "/media/uploads/"):
        assert tried in held.stdout, tried

    assert found.returncode == 1, found.stdout + found.stderr
    leaked = _leaked(found.stdout)
    assert any(line.startswith("/media/blobs/") for line in leaked), found.stdout
    assert any(line.startswith("/media/thumbs/") for line in leaked), found.stdout
    assert all(line.startswith("/media/") for line in leaked), leaked
