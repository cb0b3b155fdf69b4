"""Who is calling which model, for a prediction call with an API key, in one query.

The API's general path (ninja's key check, then the caller's access to the workspace, then the
model) is three ORM queries: most of a web process's work on a prediction call. Here one
statement reads the key, its creator, their membership, the workspace's plan, the model, its
run's state and its newest ONNX export, and the same rules as
workspaces.services.api_key_authenticate and workspaces.selectors.workspace_access_for_api_key
decide (tests hold both paths to the same answers). Nothing is cached: a revoked key or a
removed member is refused on the very next call."""

import functools
import hmac
from dataclasses import dataclass

from django.conf import settings
from django.db import connection
from django.http import Http404
from django.utils import timezone

from billing.models import Plan
from deploy.models import ExportState, ModelExport
from deploy.selectors import PREDICT_MODEL_FIELDS
from training.models import TrainedModel, TrainingJob
from workspaces.models import ApiKey, Membership, User, Workspace
from workspaces.permissions import Perm, role_permissions, scopes_permissions
from workspaces.selectors import WorkspaceAccess
from workspaces.services import API_KEY_PREFIX_BYTES, _api_key_hash


@dataclass(frozen=True)
class PresentedKey:
    """A bearer token shaped like a Kestrel key, not yet checked (PredictKeyAuth's answer)."""

    raw: str

    @property
    def prefix(self) -> str | None:
        parts = self.raw.split("_", 2)
        if len(parts) != 3 or parts[0] != "ksk" or len(parts[1]) != API_KEY_PREFIX_BYTES * 2:
            return None
        return parts[1]


class KeyRefused(Exception):
    """The key is unknown, wrong, revoked, expired, or its creator can no longer sign in: 401."""


def _table(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _fields(model, wanted: set[str]) -> tuple[str, ...]:
    """Column names in the model's own field order, as Model.from_db takes values."""
    return tuple(f.attname for f in model._meta.concrete_fields if f.attname in wanted)


_KEY = _fields(ApiKey, {"id", "name", "scopes", "workspace_id", "created_by_id"})
_USER = _fields(User, {"id", "email", "is_active"})
_WORKSPACE = _fields(Workspace, {"id", "slug", "name", "plan_id"})
_PLAN = _fields(Plan, {"id", "name", "predict_requests_per_minute"})
# The model's own columns that selectors.models_for_predict reads, and its two keys.
_MODEL = _fields(
    TrainedModel,
    {f for f in PREDICT_MODEL_FIELDS if "__" not in f} | {"workspace_id", "job_id"},
)


@functools.cache
def _sql() -> str:
    """The statement (built once): only model-defined names go into it; every value is a
    parameter."""

    def cols(alias: str, names: tuple) -> str:
        return ", ".join(f"{alias}.{connection.ops.quote_name(n)}" for n in names)

    export = (
        f"FROM {_table(ModelExport)} e WHERE e.model_id = t.id AND e.format = 'onnx' "
        "AND e.state = %s AND e.file_key <> '' ORDER BY e.finished_at DESC"
    )
    # Names from the models' metadata, values as parameters:
    return (
        f"SELECT k.key_hash, "  # noqa: S608
        f"CASE WHEN k.last_used_at IS NULL OR k.last_used_at < %s THEN 1 ELSE 0 END, "
        f"{cols('k', _KEY)}, {cols('u', _USER)}, {cols('w', _WORKSPACE)}, {cols('p', _PLAN)}, "
        f"m.role, m.is_reviewer, {cols('t', _MODEL)}, j.state, "
        f"(SELECT e.id {export} LIMIT 1), (SELECT e.file_key {export} LIMIT 1) "
        f"FROM {_table(ApiKey)} k "
        f"JOIN {_table(User)} u ON u.id = k.created_by_id "
        f"JOIN {_table(Workspace)} w ON w.id = k.workspace_id "
        f"LEFT JOIN {_table(Plan)} p ON p.id = w.plan_id "
        f"LEFT JOIN {_table(Membership)} m "
        f"ON m.workspace_id = k.workspace_id AND m.user_id = k.created_by_id "
        f"LEFT JOIN {_table(TrainedModel)} t ON t.id = %s "
        f"LEFT JOIN {_table(TrainingJob)} j ON j.id = t.job_id "
        "WHERE k.prefix = %s AND k.revoked_at IS NULL "
        "AND (k.expires_at IS NULL OR k.expires_at > %s)"
    )


def _take(row: list, names: tuple):
    values = row[: len(names)]
    del row[: len(names)]
    return values


def predict_access(key: PresentedKey, model_id: int) -> tuple[WorkspaceAccess, TrainedModel]:
    """The caller's access and the model (as selectors.models_for_predict gives it), or
    KeyRefused (401), Http404 (another workspace's model, or the key's creator left it), or
    PermissionDenied (the key lacks the predict scope)."""
    prefix = key.prefix
    if prefix is None:
        raise KeyRefused
    now = timezone.now()
    at = connection.ops.adapt_datetimefield_value  # what Django itself sends for a datetime
    stale = at(now - settings.API_KEY_LAST_USED_RESOLUTION)
    state = ExportState.SUCCEEDED
    with connection.cursor() as cursor:
        cursor.execute(_sql(), [stale, state, state, model_id, prefix, at(now)])
        found = cursor.fetchone()
    if found is None:
        raise KeyRefused
    row = list(found)
    key_hash, stale_use = row.pop(0), row.pop(0)
    if not hmac.compare_digest(key_hash, _api_key_hash(key.raw)):
        raise KeyRefused
    api_key = ApiKey.from_db("default", _KEY, _take(row, _KEY))
    if isinstance(api_key.scopes, str):  # a JSON column read without Django's converter
        api_key.scopes = ApiKey._meta.get_field("scopes").from_db_value(api_key.scopes, None, None)
    user = User.from_db("default", _USER, _take(row, _USER))
    if not user.is_active:
        raise KeyRefused
    workspace = Workspace.from_db("default", _WORKSPACE, _take(row, _WORKSPACE))
    plan_values = _take(row, _PLAN)
    workspace.plan = Plan.from_db("default", _PLAN, plan_values) if plan_values[0] else None
    role, is_reviewer = row.pop(0), row.pop(0)
    model_values = _take(row, _MODEL)
    job_state, onnx_id, onnx_key = row
    if stale_use:
        # Written at most once a minute per key, as api_key_authenticate does.
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
    api_key.workspace, api_key.created_by = workspace, user
    if role is None:  # the key's creator left: the key no longer acts for anyone
        raise Http404("No such model.")
    model_at = dict(zip(_MODEL, model_values, strict=True))
    if model_at["id"] is None or model_at["workspace_id"] != workspace.pk:
        raise Http404("No such model.")
    access = WorkspaceAccess(
        workspace=workspace,
        user=user,
        role=role,
        api_key=api_key,
        perms=role_permissions(role, is_reviewer=bool(is_reviewer))
        & scopes_permissions(api_key.scopes),
    )
    access.require(Perm.PREDICT)
    model = TrainedModel.from_db("default", _MODEL, model_values)
    model.workspace = workspace
    if model.job_id is not None:
        model.job = TrainingJob.from_db("default", ("id", "state"), [model.job_id, job_state])
    model.onnx_id, model.onnx_key = onnx_id, onnx_key
    return access, model
