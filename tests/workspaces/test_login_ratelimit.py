"""Failed logins are counted in the shared Redis cache, so two web processes share one limit."""

import http.cookiejar
import os
import re
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.servers import free_port, subprocess_database_url, web_start
from tests.workspaces.factories import PASSWORD, UserFactory

ROOT = Path(__file__).resolve().parents[2]
WRONG = "The email address and/or password you specified are not correct."
LIMITED = "Too many failed login attempts"
HOST = "kestrel.test"


def _login(port: int, email: str, password: str) -> str:
    """Log in as a browser would (fresh cookies, CSRF token); return where it ended up + body."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    base = f"http://127.0.0.1:{port}"
    # Both processes sit behind one host name, as behind a load balancer.
    headers = {"Host": HOST}
    page = (
        opener.open(urllib.request.Request(f"{base}/accounts/login/", headers=headers), timeout=10)
        .read()
        .decode()
    )
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    body = urllib.parse.urlencode(
        {"csrfmiddlewaretoken": token, "login": email, "password": password}
    ).encode()
    response = opener.open(
        urllib.request.Request(f"{base}/accounts/login/", data=body, headers=headers), timeout=10
    )
    return response.geturl() + "\n" + response.read().decode()


@pytest.fixture
def two_web_processes(transactional_db):
    env = {
        **os.environ,
        "DATABASE_URL": subprocess_database_url(),
        "DJANGO_SETTINGS_MODULE": "config.test_settings",
        "ALLOWED_HOSTS": f"{HOST},127.0.0.1",
        # Only the per-account limit: every attempt here comes from 127.0.0.1.
        "LOGIN_FAILED_RATE_LIMIT": "100/m/ip,5/300s/key",
    }
    ports = [free_port(), free_port()]
    procs = []
    try:
        for port in ports:
            procs.append(web_start(port, env))
        yield ports
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


def test_failed_logins_are_limited_across_two_processes(two_web_processes, plans):
    a, b = two_web_processes
    UserFactory(email="target@acme.test")
    UserFactory(email="control@acme.test")

    # Four failures, alternating processes: the right password still works.
    for i in range(4):
        assert WRONG in _login([a, b][i % 2], "control@acme.test", "nope")
    control = _login(b, "control@acme.test", PASSWORD)
    assert "/accounts/login/" not in control.splitlines()[0], control[:300]

    # Five failures spread over both processes lock the account on either of them.
    for i in range(5):
        assert WRONG in _login([a, b][i % 2], "target@acme.test", "nope")
    for port in (a, b):
        result = _login(port, "target@acme.test", PASSWORD)
        assert LIMITED in result
        assert result.splitlines()[0].endswith("/accounts/login/")
