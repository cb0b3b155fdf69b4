"""A web process keeps a predict caller's lookup (deploy.api) while no table it read has
changed: every write to those tables moves the table's token in the shared Redis once it
commits (core.table_changes), and each call reads the tokens in the round trip that counts it.
A change reaches the very next call in every web process; one made behind Django's back is
seen once the keep lapses (PREDICT_KEY_KEPT_SECONDS)."""

# ruff: noqa: S608 - the SQL here is read by the watcher, never run

import json
import re
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

import pytest
from django.contrib.auth import SESSION_KEY
from django.contrib.sessions.backends.cached_db import SessionStore
from django.contrib.sessions.models import Session
from django.db import connection, transaction
from django.test import Client
from django.utils import timezone

from core.table_changes import statement_changes, tables_tokens_read, tables_watched, update_columns
from deploy.api import _deployment_rows
from deploy.models import Deployment, DeploymentState
from deploy.ratelimit import _redis
from deploy.selectors import models_for_predict
from tests.deploy.test_rate_limit_processes import _jpeg, _predict
from tests.servers import app_server
from tests.training.factories import trained_model_row
from training.models import TrainedModel, TrainingJob
from workspaces.models import ApiKey, Membership, User
from workspaces.selectors import _member_rows, _presented_key_rows
from workspaces.services.keys import api_key_create, api_key_revoke
from workspaces.services.members import membership_remove

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def _behind_djangos_back():
    """Statements on Django's connection that the watcher does not see, as psql's would be."""
    wrappers = list(connection.execute_wrappers)
    connection.execute_wrappers.clear()
    try:
        yield
    finally:
        connection.execute_wrappers[:] = wrappers


def _call(base: str, model_id: int, raw: str) -> tuple[int, bool]:
    status, headers = _predict(base, model_id, raw)
    return status, "kept" in [part.strip() for part in headers.get("server-timing", "").split(",")]


def _endpoint_call(base: str, raw: str) -> tuple[int, bool, str]:
    request = urllib.request.Request(
        f"{base}/d/street-cam/predict",
        data=b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.jpg"\r\n\r\n'
        + _jpeg()
        + b"\r\n--b--\r\n",
        headers={
            "Authorization": f"Bearer {raw}",
            "Content-Type": "multipart/form-data; boundary=b",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            status, headers, body = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        status, headers, body = error.code, error.headers, error.read()
    timing = [part.strip() for part in headers.get("Server-Timing", "").split(",")]
    return status, "kept" in timing, json.loads(body)["detail"].split(";")[0]


def test_a_change_reaches_the_next_call_in_every_web_process(team):
    for key in _redis().scan_iter("kestrel:ratelimit:*"):
        _redis().delete(key)
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])
    owner = team.access("owner")
    # No model server: an admitted call is 503, a refused key 401, an unreachable model 404.
    away = {"INFERENCE_URL": "http://127.0.0.1:9", "PREDICT_KEY_KEPT_SECONDS": "120"}
    with app_server(**away) as a, app_server(**away) as b:
        # A key revoked as a person does it.
        key, raw = api_key_create(access=owner, name="revoked", scopes=["predict"])
        assert [_call(a, model.pk, raw), _call(b, model.pk, raw)] == [(503, False)] * 2
        assert [_call(a, model.pk, raw), _call(b, model.pk, raw)] == [(503, True)] * 2
        api_key_revoke(access=owner, key=key)
        assert [_call(a, model.pk, raw), _call(b, model.pk, raw)] == [(401, False)] * 2

        # The key's creator removed from the workspace.
        _, raw = api_key_create(access=team.access("admin"), name="admin's", scopes=["predict"])
        assert [_call(a, model.pk, raw), _call(b, model.pk, raw)] == [(503, False)] * 2
        assert [_call(a, model.pk, raw), _call(b, model.pk, raw)] == [(503, True)] * 2
        membership_remove(
            access=owner,
            membership=Membership.objects.get(user=team.admin, workspace=model.workspace),
        )
        assert [_call(a, model.pk, raw)[0], _call(b, model.pk, raw)[0]] == [404, 404]

        # A scope taken away by a queryset's update(), which sends no signal.
        key, raw = api_key_create(access=owner, name="scoped", scopes=["predict", "read"])
        assert [_call(a, model.pk, raw), _call(b, model.pk, raw)] == [(503, False)] * 2
        ApiKey.objects.filter(pk=key.pk).update(scopes=["read"])
        assert [_call(a, model.pk, raw)[0], _call(b, model.pk, raw)[0]] == [403, 403]

        # Writes to what the lookup does not read drop nothing kept: the key's last use, a
        # job's progress.
        key, raw = api_key_create(access=owner, name="busy", scopes=["predict"])
        assert _call(a, model.pk, raw) == (503, False)
        ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
        TrainingJob.objects.filter(pk=model.job_id).update(updated_at=timezone.now())
        assert _call(a, model.pk, raw) == (503, True)
        # A dedicated endpoint's row is kept with the caller's lookup: its metering drops
        # nothing, a stop reaches the next call.
        Deployment.objects.create(
            workspace=team.workspace,
            model=model,
            slug="street-cam",
            name="Street cam",
            state=DeploymentState.RUNNING,
            port=9,
        )
        assert _endpoint_call(a, raw) == (503, False, "The model server is not answering")
        Deployment.objects.filter(slug="street-cam").update(replica_seconds=5, charged=1)
        assert _endpoint_call(a, raw) == (503, True, "The model server is not answering")
        Deployment.objects.filter(slug="street-cam").update(
            state=DeploymentState.STOPPED, desired_running=False, port=None
        )
        assert _endpoint_call(a, raw) == (503, False, "The deployment is stopped")

        # The model made to wait for a check: its state is read, so the next call sees it.
        TrainedModel.objects.filter(pk=model.pk).update(inspect_state="pending")
        assert _call(a, model.pk, raw)[0] == 409


def test_a_change_behind_djangos_back_is_seen_once_the_keep_lapses(team):
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])
    key, raw = api_key_create(access=team.access("owner"), name="kept", scopes=["predict"])
    with app_server(INFERENCE_URL="http://127.0.0.1:9", PREDICT_KEY_KEPT_SECONDS="1.5") as web:
        assert _call(web, model.pk, raw) == (503, False)
        kept_at = time.monotonic()
        with _behind_djangos_back():
            ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
        status = _call(web, model.pk, raw)
        if time.monotonic() - kept_at < 1.2:  # a slow machine: not provable
            assert status == (503, True)
        time.sleep(1.7)
        assert _call(web, model.pk, raw) == (401, False)


def test_a_key_that_expires_is_kept_no_longer_than_it_lives(team, settings):
    settings.PREDICT_KEY_KEPT_SECONDS = 120
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])
    key, raw = api_key_create(access=team.access("owner"), name="short", scopes=["predict"])
    ApiKey.objects.filter(pk=key.pk).update(
        expires_at=timezone.now() + timezone.timedelta(seconds=1.5)
    )
    client = Client(headers={"Authorization": f"Bearer {raw}"})
    url = f"/api/v1/models/{model.pk}/predict"
    assert client.post(url, {"file": b"x"}).status_code != 401
    time.sleep(1.6)
    assert client.post(url, {"file": b"x"}).status_code == 401


def test_a_session_signed_out_is_refused_by_its_next_call(team, settings):
    settings.PREDICT_KEY_KEPT_SECONDS = 120
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])
    browser = Client()
    browser.force_login(team.owner)
    url = f"/api/v1/models/{model.pk}/predict"
    assert browser.post(url, {"file": b"x"}).status_code == 400  # admitted: not an image
    assert "kept" in browser.post(url, {"file": b"x"})["Server-Timing"].split(", ")
    session = browser.cookies["sessionid"].value
    assert Session.objects.get(session_key=session).get_decoded()[SESSION_KEY]
    browser.logout()
    signed_out = Client()
    signed_out.cookies["sessionid"] = session
    assert signed_out.post(url, {"file": b"x"}).status_code == 401


def test_writes_move_the_tokens_of_what_they_change_once_committed(team):
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])
    key, _ = api_key_create(access=team.access("owner"), name="k", scopes=["predict"])
    before = tables_tokens_read()
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=timezone.now())
    TrainingJob.objects.filter(pk=model.job_id).update(updated_at=timezone.now())
    User.objects.filter(pk=team.viewer.pk).update(last_login=timezone.now())
    session = SessionStore()
    session.create()  # a new session
    session["seen"] = 1
    session.save()  # written again under its key
    assert tables_tokens_read() == before
    with transaction.atomic():
        Membership.objects.filter(user=team.viewer).update(role="editor")
        assert tables_tokens_read() == before  # not before the commit
    moved = tables_tokens_read()
    assert moved != before
    with pytest.raises(RuntimeError), transaction.atomic():
        Membership.objects.filter(user=team.viewer).update(role="viewer")
        raise RuntimeError
    assert tables_tokens_read() == moved  # rolled back: nothing changed


@pytest.mark.parametrize(
    ("sql", "columns"),
    [
        ('UPDATE "t" SET "a" = %s WHERE "t"."id" = %s', ["a"]),
        ('UPDATE "t" SET "a" = %s, "b" = NULL', ["a", "b"]),
        (
            'UPDATE "t" SET "a" = ("t"."a" + %s), "b" = (SELECT U0."x" FROM "u" U0 '
            'WHERE U0."y" = %s) WHERE "t"."c" = \'it, WHERE\'',
            ["a", "b"],
        ),
        (
            'UPDATE "t" SET "a" = CASE WHEN ("t"."id" = %s) THEN %s ELSE NULL END '
            'WHERE "t"."id" IN (%s)',
            ["a"],
        ),
        ("update t set a = 1", None),
        ('UPDATE "t" SET ("a", "b") = (%s, %s)', None),
    ],
)
def test_the_columns_an_update_sets_are_read_from_its_set_clause(sql, columns):
    assert update_columns(sql) == columns


def test_statements_that_change_nothing_watched_move_nothing():
    trained = TrainedModel._meta.db_table
    assert statement_changes(f'SELECT * FROM "{trained}"') == ()
    assert statement_changes('UPDATE "not_watched" SET "a" = %s') == ()
    assert statement_changes('INSERT INTO "django_session" ("session_key") VALUES (%s)') == ()
    assert statement_changes(f'INSERT INTO "{trained}" ("id") VALUES (%s)') == (trained,)
    assert statement_changes(f'DELETE FROM "{trained}" WHERE "id" = %s') == (trained,)
    assert statement_changes(f"update {trained} set name = 1") == (trained,)  # not read: all
    assert trained in statement_changes(f'TRUNCATE "{trained}", "x"')
    assert statement_changes(f"\n        UPDATE {trained}\n SET name = 1") == (trained,)
    assert statement_changes(f"WITH x AS (SELECT 1) UPDATE {trained} SET name = 1") == (trained,)
    assert statement_changes(f"/* why */ DELETE FROM {trained}") == (trained,)
    assert statement_changes(f'  SELECT * FROM "{trained}" FOR UPDATE') == ()


_TABLE = re.compile(
    r'(?:FROM|JOIN) "(\w+)"(?: (?:AS )?"?(?!(?:ON|WHERE|INNER|LEFT|RIGHT|ORDER|LIMIT)\b)(\w+)"?)?'
)


def _columns_read(sql: str) -> set[tuple[str, str]]:
    """(table, column) of every qualified column a compiled statement names, each subquery
    read with its own aliases (Django names each one's table U0)."""
    read = set()
    while (start := sql.rfind("(SELECT ")) >= 0:  # the innermost, last first
        depth, end = 0, start
        for end in range(start, len(sql)):
            depth += {"(": 1, ")": -1}.get(sql[end], 0)
            if depth == 0:
                break
        read |= _columns_read(sql[start + 1 : end])
        sql = sql[:start] + sql[end + 1 :]
    aliases = {alias or table: table for table, alias in _TABLE.findall(sql)}
    for alias, column in re.findall(r'"?(\w+)"?\."(\w+)"', sql):
        read.add((aliases.get(alias, alias), column))
    return read


def test_every_column_a_kept_lookup_reads_is_watched():
    """The lookups deploy.api keeps, compiled: each column they name is one whose change moves
    its table's token, but a key's last use (it only decides when to write it again)."""
    key_sql = str(
        _presented_key_rows(
            models_for_predict(), workspace="workspace", prefix="p", now=timezone.now(), pk=1
        ).query
    )
    member_sql = str(
        _member_rows(models_for_predict(), workspace="workspace", member_id=1, pk=1)
        .order_by()
        .query
    )
    # As they run: ordered by nothing (workspaces.selectors.statement_first).
    public_sql = str(models_for_predict().filter(pk=1, is_public=True).order_by().query)
    deployment_sql = str(_deployment_rows("slug").order_by().query)
    watched = tables_watched()
    missing = []
    for table, column in set().union(
        *map(_columns_read, (key_sql, member_sql, public_sql, deployment_sql))
    ):
        if (table, column) == (ApiKey._meta.db_table, "last_used_at"):
            continue
        columns, quiet, _ = watched.get(table, (frozenset(), frozenset(), False))
        if (columns is not None and column not in columns) or column in quiet:
            missing.append(f"{table}.{column}")
    assert not missing, f"read by a kept lookup, not watched: {sorted(missing)}"
    assert len(_columns_read(key_sql)) > 20  # the statement was read at all
