"""A prediction call's one-query check of key, member and model (the scoped lookup,
workspaces.selectors.row_for_caller, given the key as presented) answers exactly as the API's
general path (ninja's key check, the caller's workspace access, the model) does, case by case."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.utils import timezone

from deploy.models import ExportState, ModelExport
from deploy.selectors import PREDICT_MODEL_FIELDS, models_for_predict
from tests.training.factories import trained_model_row
from workspaces.models import ApiKey, Membership
from workspaces.permissions import Perm
from workspaces.selectors import (
    KeyRefused,
    PresentedKey,
    row_for_caller,
    statement_first,
    workspace_access_for_api_key,
    workspace_access_for_user,
)
from workspaces.services.keys import api_key_authenticate, api_key_create

pytestmark = pytest.mark.django_db


def _general(raw: str, model_id: int):
    """What the API's usual path decides: 401, 404, 403, or (access, model)."""
    key = api_key_authenticate(raw=raw)
    if key is None:
        return 401
    model = models_for_predict().filter(pk=model_id).first()
    if model is None:
        return 404
    try:
        access = workspace_access_for_api_key(api_key=key, slug=model.workspace.slug)
        access.require(Perm.PREDICT)
    except Http404:
        return 404
    except PermissionDenied as e:
        return 403, str(e)
    return access, model


def predict_access(key: PresentedKey, model_id: int):
    """What the predict API does with a presented key (deploy.api._caller)."""
    access, model = row_for_caller(
        models_for_predict,
        pk=model_id,
        auth=key,
        user=AnonymousUser(),
        not_found="No such model.",
    )
    access.require(Perm.PREDICT)
    return access, model


def _fast(raw: str, model_id: int):
    try:
        return predict_access(PresentedKey(raw), model_id)
    except KeyRefused:
        return 401
    except Http404:
        return 404
    except PermissionDenied as e:
        return 403, str(e)


def _same(raw: str, model_id: int):
    general, fast = _general(raw, model_id), _fast(raw, model_id)
    if not isinstance(general, tuple) or general[0] == 403:
        assert fast == general
        return general
    (g_access, g_model), (f_access, f_model) = general, fast
    assert (f_access.workspace.pk, f_access.user.pk, f_access.role, f_access.api_key.pk) == (
        g_access.workspace.pk,
        g_access.user.pk,
        g_access.role,
        g_access.api_key.pk,
    )
    assert f_access.perms == g_access.perms
    assert f_access.workspace.plan.predict_requests_per_minute == (
        g_access.workspace.plan.predict_requests_per_minute
    )
    assert f_access.workspace.name == g_access.workspace.name
    for name in [f for f in PREDICT_MODEL_FIELDS if "__" not in f] + ["onnx_id", "onnx_key"]:
        assert getattr(f_model, name) == getattr(g_model, name), name
    assert (f_model.job_id and f_model.job.state) == (g_model.job_id and g_model.job.state)
    return "ok"


@pytest.fixture
def model(team):
    return trained_model_row(workspace=team.workspace, class_names=["bird"])


def _key(team, scopes=("predict",), **fields):
    key, raw = api_key_create(access=team.access("owner"), name="k", scopes=list(scopes))
    if fields:
        ApiKey.objects.filter(pk=key.pk).update(**fields)
    return key, raw


def test_every_case_answers_as_the_general_path(team, model, stranger):
    now = timezone.now()
    _, good = _key(team)
    assert _same(good, model.pk) == "ok"
    assert _same(good, model.pk + 1000) == 404  # no such model
    _, read_only = _key(team, scopes=("read",))
    assert _same(read_only, model.pk)[0] == 403
    _, revoked = _key(team, revoked_at=now)
    assert _same(revoked, model.pk) == 401
    _, expired = _key(team, expires_at=now - timedelta(seconds=1))
    assert _same(expired, model.pk) == 401
    _, later = _key(team, expires_at=now + timedelta(days=1))
    assert _same(later, model.pk) == "ok"
    wrong = good[:19] + ("0" * 24 if good[19:] != "0" * 24 else "1" * 24)
    assert _same(wrong, model.pk) == 401  # right prefix, wrong secret
    assert _same("ksk_short_x", model.pk) == 401
    # A key issued before issue 20 (`ksk_<12 hex>_<secret>`) predicts as a new one does.
    legacy = f"ksk_{'c0ffee' * 2}_legacy-secret"
    legacy_key, _ = _key(team)
    ApiKey.objects.filter(pk=legacy_key.pk).update(
        prefix="c0ffee" * 2, key_hash=PresentedKey(legacy).hash
    )
    assert _same(legacy, model.pk) == "ok"
    assert _same(legacy[:-1], model.pk) == 401
    # Keys act with their creator's current role (admins create them; roles change later).
    answers = {}
    for role in ("admin", "editor", "viewer"):
        _, raw = _key(team, created_by=team.user(role))
        answers[role] = _same(raw, model.pk)
    assert answers["admin"] == "ok"
    # Another workspace's key reaches none of this workspace's models.
    elsewhere = workspace_access_for_user(user=stranger, slug="elsewhere")
    _, theirs = api_key_create(access=elsewhere, name="theirs", scopes=["predict"])
    assert _same(theirs, model.pk) == 404
    # The key's creator left the workspace; another's was deactivated.
    _, editors = _key(team, created_by=team.editor)
    Membership.objects.filter(workspace=team.workspace, user=team.editor).delete()
    assert _same(editors, model.pk) == 404
    _, admins = _key(team, created_by=team.admin)
    team.admin.is_active = False
    team.admin.save(update_fields=["is_active"])
    assert _same(admins, model.pk) == 401


def test_the_newest_onnx_export_and_the_run_state_come_along(team, model):
    _, raw = _key(team)
    finished = timezone.now()
    for offset, state in ((0, ExportState.SUCCEEDED), (5, ExportState.SUCCEEDED)):
        ModelExport.objects.create(
            workspace=team.workspace,
            model=model,
            format="onnx",
            state=state,
            file_key=f"exports/{offset}.onnx",
            finished_at=finished + timedelta(seconds=offset),
        )
    ModelExport.objects.create(
        workspace=team.workspace, model=model, format="onnx", state=ExportState.FAILED
    )
    assert _same(raw, model.pk) == "ok"
    _, fast_model = _fast(raw, model.pk)
    assert fast_model.onnx_key == "exports/5.onnx"


def test_one_query_and_last_use_written_at_most_once_a_minute(
    team, model, django_assert_num_queries
):
    key, raw = _key(team)
    with django_assert_num_queries(2):  # the check, and the first use written
        predict_access(PresentedKey(raw), model.pk)
    key.refresh_from_db()
    assert key.last_used_at is not None
    with django_assert_num_queries(1):
        access, fast_model = predict_access(PresentedKey(raw), model.pk)
    # Fields the call does not read are deferred, never silently empty.
    with django_assert_num_queries(1):
        assert fast_model.class_names == ["bird"]
    assert access.api_key.scopes == ["predict"]


@pytest.mark.postgres_only("prepared statements and their plans are PostgreSQL's")
def test_the_lookup_is_a_statement_prepared_once_and_planned_once_per_connection(
    team, model, settings
):
    """PostgreSQL planned the key lookup in 1.4 ms for 0.08 ms of running it; prepared with a
    generic plan, later calls on the connection skip the planning (workspaces.selectors)."""

    def lookups() -> list[tuple[int, int]]:
        return _prepared("training_trainedmodel")

    _, raw = _key(team)
    settings.DB_PREPARED_LOOKUPS = False
    assert _fast(raw, model.pk)[1].pk == model.pk
    assert lookups() == []
    settings.DB_PREPARED_LOOKUPS = True
    for _ in range(3):  # prepared, it answers exactly as the general path
        assert _same(raw, model.pk) == "ok"
    assert lookups() and all(custom == 0 for _, custom in lookups())
    assert sum(generic for generic, _ in lookups()) >= 3


def _prepared(table: str) -> list[tuple[int, int]]:
    """(generic plans, custom plans) of each statement prepared on this connection that reads
    `table` first (PostgreSQL)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s",
            [f'SELECT "{table}"."id"%'],
        )
        return cursor.fetchall()


def test_a_dedicated_endpoint_and_a_public_model_are_read_as_the_orm_reads_them(team, model):
    """The deployment behind /d/<slug>/ and a public model for a stranger's session are read on
    every call by statements compiled once (workspaces.selectors.statement_first): each answers
    what the ORM's own query answers, rule and deferred columns included, and None for none."""
    from deploy.api import _deployment_row, _deployment_rows, _public_models
    from deploy.models import CollectionRule, Deployment, DeploymentState
    from tests.datasets.factories import DatasetFactory

    deployment = Deployment.objects.create(
        workspace=team.workspace,
        model=model,
        slug="street-cam",
        name="Street cam",
        state=DeploymentState.RUNNING,
        port=8899,
    )
    columns = ("id", "slug", "state", "port", "url", "placement", "desired_running", "model_id")

    def same() -> Deployment:
        fast, orm = _deployment_row("street-cam"), _deployment_rows("street-cam").first()
        assert [getattr(fast, c) for c in (*columns, "workspace_id", "collect_rule_id")] == [
            getattr(orm, c) for c in (*columns, "workspace_id", "collect_rule_id")
        ]
        assert fast.get_deferred_fields() == orm.get_deferred_fields()
        return fast

    assert same().collect_rule_id is None
    rule = CollectionRule.objects.create(
        workspace=team.workspace,
        deployment=deployment,
        enabled=True,
        dataset=DatasetFactory(workspace=team.workspace),
    )
    assert same().collect_rule_id == rule.pk
    Deployment.objects.filter(pk=deployment.pk).update(state=DeploymentState.STOPPED, port=None)
    assert (same().state, same().port) == (DeploymentState.STOPPED, None)  # read afresh
    for unknown in ("street", "street-cam2", "'; --", "/probe-slug/"):
        assert _deployment_row(unknown) is None

    def public(pk):  # the public model a stranger's session may try
        return statement_first(_public_models, probes=(-(2**62),), values=(pk,))

    assert public(model.pk) is None and public(model.pk + 1000) is None
    type(model).objects.filter(pk=model.pk).update(is_public=True)
    found = public(model.pk)
    assert found.pk == model.pk and found.workspace.plan == model.workspace.plan
    assert found.onnx_id is None and found.class_names == ["bird"]


@pytest.mark.postgres_only("prepared statements and their plans are PostgreSQL's")
def test_a_dedicated_endpoints_row_is_a_statement_prepared_once_per_connection(team, model):
    from deploy.api import _deployment_row
    from deploy.models import Deployment

    Deployment.objects.create(workspace=team.workspace, model=model, slug="cam", name="Cam")
    for _ in range(3):
        assert _deployment_row("cam").slug == "cam"
    assert _prepared("deploy_deployment") and all(c == 0 for _, c in _prepared("deploy_deployment"))
    assert sum(generic for generic, _ in _prepared("deploy_deployment")) >= 3
