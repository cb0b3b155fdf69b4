"""`GET /api/account/summary` (issue 20): what `yolo login` and the `ul` CLI call with a key.
Through Django's client, then the real `yolo login` in a process of its own against a live
server."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from billing import ledger
from datasets.models import Dataset
from tests.platform_client import client_env
from tests.servers import app_server
from tests.training.factories import trained_model_row
from tests.workspaces.factories import MembershipFactory, ProjectFactory, WorkspaceFactory
from workspaces.models import ApiKey, Membership, Role
from workspaces.services.keys import api_key_create

URL = "/api/account/summary"
ROOT = Path(__file__).resolve().parents[2]


def _key(team, scopes=("read",), role="admin") -> str:
    return api_key_create(access=team.access(role), name="login", scopes=list(scopes))[1]


def _get(raw: str | None = None, header: str | None = None):
    headers = {"Authorization": header or f"Bearer {raw}"} if (raw or header) else {}
    return Client(headers=headers).get(URL)


@pytest.mark.django_db
def test_a_key_gets_its_workspace_as_the_account(team, stranger):
    ProjectFactory(workspace=team.workspace, name="Birds")
    Dataset.objects.create(workspace=team.workspace, name="Gulls")
    trained_model_row(workspace=team.workspace, class_names=["bird"])
    Dataset.objects.create(workspace=stranger.memberships.get().workspace, name="Not ours")
    available = ledger.account_for(team.workspace).available
    response = _get(_key(team, scopes=("train", "read")))
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert "no-cache" in response["Cache-Control"] or "no-store" in response["Cache-Control"]
    body = response.json()
    assert body == {
        "username": "acme",  # what `project=acme/...` and `ul://acme/...` name
        "name": "Acme Vision",
        "accountType": "team",
        "plan": "pro",
        "teams": [],
        "counts": {"projects": 2, "datasets": 1, "models": 1},  # the model's project is one
        "creditsCents": available // 10_000,
    }


@pytest.mark.django_db
def test_a_key_that_may_not_read_gets_who_it_is_and_nothing_more(team):
    body = _get(_key(team, scopes=("predict",))).json()
    assert body == {
        "username": "acme",
        "name": "Acme Vision",
        "accountType": "team",
        "plan": "pro",
        "teams": [],
    }


@pytest.mark.django_db
def test_no_key_a_bad_key_or_a_dead_key_is_401_with_a_readable_error(team):
    raw = _key(team)
    key = ApiKey.objects.get()
    for response in [
        _get(),
        _get(header="Basic Zm9vOmJhcg=="),
        _get(header="Bearer "),
        _get("ul_" + "0" * 40),
        _get(raw.upper()),
        _get(raw[:-1]),
    ]:
        assert response.status_code == 401, response.content
        assert response["Content-Type"] == "application/json"
        assert "key" in response.json()["error"].lower()
    ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    assert "revoked" in _get(raw).json()["error"]
    other = _key(team, role="owner")
    Membership.objects.filter(user=team.owner).delete()  # its creator left
    response = _get(other)
    assert response.status_code == 401 and "left" in response.json()["error"]


@pytest.mark.django_db
def test_a_browser_session_gets_its_personal_workspace_and_its_teams(team, client):
    personal = WorkspaceFactory(name="Ed's space", slug="ed", is_personal=True)
    MembershipFactory(workspace=personal, user=team.editor, role=Role.OWNER)
    client.force_login(team.editor)
    body = client.get(URL).json()
    assert body["username"] == "ed" and body["accountType"] == "personal"
    assert body["teams"] == [
        {
            "userId": str(team.workspace.pk),
            "username": "acme",
            "fullName": "Acme Vision",
            "plan": "pro",
            "role": "editor",
        }
    ]
    assert client.post(URL).status_code == 405


def _client_env(config_dir: Path, url: str) -> dict:
    """The client as a user's machine runs it (tests.platform_client), its settings in
    `config_dir`."""
    return client_env(config_dir, ULTRALYTICS_PLATFORM_URL=url)


def _yolo(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(  # noqa: S603 - the venv's own yolo
        [str(Path(sys.executable).parent / "yolo"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _saved_key(config_dir: Path) -> str:
    return json.loads((config_dir / "Ultralytics" / "settings.json").read_text())["api_key"]


@pytest.mark.same_on_any_database(
    "the stock client's login is what is tested; the key it makes is written as in "
    "tests/workspaces, which run on both"
)
@pytest.mark.django_db(transaction=True)
def test_yolo_login_saves_a_kestrel_key_and_ultralytics_keeps_it(team, tmp_path):
    """The real `yolo login <key>` against a live server saves the key; a later process of the
    client reads it back, even when it migrates its settings file (where it discards any key
    not shaped `ul_` + 40 hex); a refused key is not saved and the user is told why."""
    raw = _key(team, scopes=("train", "read"))
    config = tmp_path / "config"
    with app_server() as url:
        env = _client_env(config, url)
        refused = _yolo(env, "login", "ul_" + "0" * 40)
        assert refused.returncode != 0 and "Invalid API key" in refused.stderr + refused.stdout
        assert not (config / "Ultralytics" / "settings.json").exists() or _saved_key(config) == ""
        done = _yolo(env, "login", raw)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "New authentication successful" in done.stdout + done.stderr
    assert _saved_key(config) == raw
    settings_file = config / "Ultralytics" / "settings.json"
    stale = json.loads(settings_file.read_text()) | {"settings_version": "0.0.1"}
    settings_file.write_text(json.dumps(stale))  # the next start migrates the file
    read_key = "from ultralytics.utils import SETTINGS; print(SETTINGS['api_key'])"
    read_back = subprocess.run(  # noqa: S603 - the venv's python
        [sys.executable, "-c", read_key],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert read_back.stdout.strip().splitlines()[-1] == raw, read_back.stderr[-2000:]
    assert _saved_key(config) == raw
    # Why the form matters: a key shaped as Kestrel issued them before is dropped there.
    settings_file.write_text(json.dumps(stale | {"api_key": "ksk_0123456789ab_secret"}))
    subprocess.run(read_back.args, cwd=ROOT, env=env, capture_output=True, timeout=120, check=False)
    assert _saved_key(config) == ""
