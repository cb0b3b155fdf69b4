"""Reads. Every workspace-owned row is reached through `workspace_access_*` + `.for_workspace`,
or, named by id alone, through `row_for_caller` (the row and the caller's access, one query)."""

import functools
import hashlib
import hmac
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TypeVar

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import connections
from django.db.models import Count, F, FilteredRelation, Model, Q, QuerySet
from django.db.models.query import get_related_populators
from django.http import Http404
from django.utils import timezone

from workspaces.models import (
    PLATFORM_KEY_PREFIX_HEX,
    ApiKey,
    Invitation,
    Membership,
    Project,
    Role,
    User,
    Workspace,
)
from workspaces.permissions import (
    PERM_REQUIRED_ROLE,
    Perm,
    role_permissions,
    scopes_permissions,
)


@dataclass(frozen=True)
class WorkspaceAccess:
    """Who is acting in which workspace, and what they may do there."""

    workspace: Workspace
    user: User
    role: str
    api_key: ApiKey | None = None
    perms: frozenset[Perm] = field(default=frozenset())

    def can(self, perm: Perm) -> bool:
        return perm in self.perms

    def owns(self, obj) -> bool:
        """Whether `obj` (a row with a workspace) is of this workspace: for services that
        take an object their caller looked up."""
        return obj.workspace_id == self.workspace.pk

    def require(self, perm: Perm) -> None:
        if self.can(perm):
            return
        if self.api_key is not None and perm in role_permissions(self.role):
            raise PermissionDenied(f"This API key lacks the scope needed to {perm.label}.")
        if perm == Perm.REVIEW and Perm.WRITE in self.perms:
            raise PermissionDenied(
                "Only reviewers approve or reject labels: an admin can make you a reviewer "
                "on the members page."
            )
        needed = Role(PERM_REQUIRED_ROLE[perm]).label.lower()
        raise PermissionDenied(
            f"You need the {needed} role in {self.workspace.name} to {perm.label}; "
            f"you are {Role(self.role).label.lower()}."
        )


def workspace_access_for_user(*, user: User, slug: str) -> WorkspaceAccess:
    """The scoping helper for people. Not a member (or no such workspace): 404."""
    if not user.is_authenticated:
        raise Http404("No such workspace.")
    membership = (
        Membership.objects.select_related("workspace", "workspace__plan")
        .filter(user=user, workspace__slug=slug)
        .first()
    )
    if membership is None:
        raise Http404("No such workspace.")
    return WorkspaceAccess(
        workspace=membership.workspace,
        user=user,
        role=membership.role,
        perms=role_permissions(membership.role, is_reviewer=membership.is_reviewer),
    )


def workspace_access_for_api_key(*, api_key: ApiKey, slug: str) -> WorkspaceAccess:
    """The scoping helper for API keys: a key reaches only its own workspace (else 404)."""
    if api_key.workspace.slug != slug:
        raise Http404("No such workspace.")
    membership = Membership.objects.filter(
        workspace_id=api_key.workspace_id, user_id=api_key.created_by_id
    ).first()
    if membership is None:  # the key's creator left: the key no longer acts for anyone
        raise Http404("No such workspace.")
    perms = role_permissions(
        membership.role, is_reviewer=membership.is_reviewer
    ) & scopes_permissions(api_key.scopes)
    return WorkspaceAccess(
        workspace=api_key.workspace,
        user=api_key.created_by,
        role=membership.role,
        api_key=api_key,
        perms=perms,
    )


def workspace_access_for_caller(*, auth, user: User, slug: str) -> WorkspaceAccess:
    """The scoping helper for API calls: by API key when one was presented, else the session."""
    if isinstance(auth, ApiKey):
        return workspace_access_for_api_key(api_key=auth, slug=slug)
    return workspace_access_for_user(user=user, slug=slug)


# Keys are issued as `ul_` + 40 hex, the form `yolo login` keeps (it discards any other): the
# first PLATFORM_KEY_PREFIX_HEX of the 40 find the row, the other 24 (96 bits) are the secret.
# Keys issued before issue 20, `ksk_<12 hex>_<secret>`, keep working. The prefixes of the two
# forms differ in length, so a new key's prefix can never be an old key's.
PLATFORM_KEY = re.compile(r"ul_([0-9a-f]{40})")
LEGACY_KEY_PREFIX_HEX = 12
M = TypeVar("M", bound=Model)


@dataclass(frozen=True)
class PresentedKey:
    """A bearer token as a caller sent it, not yet checked: `row_for_caller` checks it in the
    query that finds the row (the predict path), `api_key_authenticate` on its own. The one
    parser of keys: `ul_<40 hex>`, or the legacy `ksk_<12 hex>_<secret>`."""

    raw: str

    @property
    def prefix(self) -> str | None:
        """The key's public prefix, or None when the token is not shaped like a Kestrel key."""
        platform = PLATFORM_KEY.fullmatch(self.raw)
        if platform is not None:
            return platform[1][:PLATFORM_KEY_PREFIX_HEX]
        parts = self.raw.split("_", 2)
        if len(parts) != 3 or parts[0] != "ksk" or len(parts[1]) != LEGACY_KEY_PREFIX_HEX:
            return None
        return parts[1]

    @property
    def hash(self) -> str:
        return hashlib.sha256(self.raw.encode()).hexdigest()

    def matches(self, key_hash: str) -> bool:
        return hmac.compare_digest(key_hash, self.hash)


class KeyRefused(Exception):
    """The key is unknown, wrong, revoked, expired, or its creator can no longer sign in: 401."""


def api_key_live(presented: PresentedKey, *, now) -> ApiKey | None:
    """The live key for a presented secret, with its workspace and creator; None when it is
    malformed, unknown, wrong, revoked, expired, or its creator can no longer sign in."""
    if presented.prefix is None:
        return None
    key = (
        ApiKey.objects.select_related("workspace", "created_by")
        .filter(prefix=presented.prefix)
        .first()
    )
    if key is None or not presented.matches(key.key_hash):
        return None
    if key.revoked_at is not None or (key.expires_at is not None and key.expires_at <= now):
        return None
    if not key.created_by.is_active:
        return None
    return key


def api_key_last_use_note(*, key_id: int, last_used_at, now) -> bool:
    """Whether the key's last use was written now: at most once a minute per key, so a busy
    key does not write on every call."""
    if last_used_at is None or now - last_used_at > settings.API_KEY_LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=key_id).update(last_used_at=now)
        return True
    return False


def row_for_caller(
    queryset: QuerySet[M] | Callable[[], QuerySet[M]],
    *,
    pk: int,
    auth,
    user: User,
    not_found: str,
    workspace: str = "workspace",
) -> tuple[WorkspaceAccess, M]:
    """The one scoped lookup of a row named by id: the row `pk` of `queryset` and the caller's
    access to its workspace (`workspace`: the path from the row to it), in one query that joins
    the row to the caller's membership there. The caller is a person (`user`, from the
    session), an `ApiKey` the API checked, or a `PresentedKey` checked in the same query (the
    predict path: raises KeyRefused for a bad key). An unknown id and another team's id get
    the same 404 with the same words, `not_found`: the answer never tells a stranger that the
    id exists. `queryset` may be a function returning it: for a key, its statement is then
    compiled once per process (the predict path's speed)."""
    if isinstance(auth, PresentedKey):
        return _row_for_presented_key(
            queryset, pk=pk, key=auth, not_found=not_found, workspace=workspace
        )
    api_key = auth if isinstance(auth, ApiKey) else None
    if api_key is not None:
        member_id = api_key.created_by_id
    elif user.is_authenticated:
        member_id = user.pk
    else:
        raise Http404(not_found)
    statement = None
    if api_key is None and callable(queryset):
        statement = _member_statement(queryset, workspace)
    if statement is not None:
        # The queryset is not even built: building models_for_predict's cost a millisecond.
        row = _statement_row(statement, (member_id, pk))
    else:
        if callable(queryset):
            queryset = queryset()
        if api_key is not None:
            queryset = queryset.filter(**{f"{workspace}_id": api_key.workspace_id})
        row = _first(_member_rows(queryset, workspace=workspace, member_id=member_id, pk=pk))
    if row is None:  # no such row, another team's, or the key's creator left the workspace
        raise Http404(not_found)
    perms = role_permissions(row._member_role, is_reviewer=row._member_reviewer)
    if api_key is not None:
        perms &= scopes_permissions(api_key.scopes)
    access = WorkspaceAccess(
        workspace=_workspace_of(row, workspace),
        user=api_key.created_by if api_key is not None else user,
        role=row._member_role,
        api_key=api_key,
        perms=perms,
    )
    return access, row


def _member_rows(rows: QuerySet, *, workspace: str, member_id: int, pk: int) -> QuerySet:
    """`rows` joined to the membership of `member_id` in the row's workspace."""
    return (
        rows.select_related(f"{workspace}__plan")
        .annotate(
            _member=FilteredRelation(
                f"{workspace}__memberships",
                condition=Q(**{f"{workspace}__memberships__user_id": member_id}),
            )
        )
        .filter(pk=pk, _member__isnull=False)
        .annotate(_member_role=F("_member__role"), _member_reviewer=F("_member__is_reviewer"))
    )


_PRESENTED_KEY_COLUMNS = {
    "_key_id": "id",
    "_key_hash": "key_hash",
    "_key_name": "name",
    "_key_scopes": "scopes",
    "_key_last_used_at": "last_used_at",
    "_key_expires_at": "expires_at",
    "_key_created_by_id": "created_by_id",
    "_key_user_email": "created_by__email",
    "_key_user_active": "created_by__is_active",
}


def _presented_key_rows(rows: QuerySet, *, workspace: str, prefix: str, now, pk: int) -> QuerySet:
    """`rows` joined to the live key of `prefix` in the row's workspace and to the key's
    creator's membership there, both outer joins (PostgreSQL plans it faster than inner)."""
    keys = f"{workspace}__api_keys"
    live = Q(**{f"{keys}__prefix": prefix, f"{keys}__revoked_at__isnull": True}) & (
        Q(**{f"{keys}__expires_at__isnull": True}) | Q(**{f"{keys}__expires_at__gt": now})
    )
    return (
        rows.select_related(f"{workspace}__plan")
        .annotate(
            _key=FilteredRelation(keys, condition=live),
            _member=FilteredRelation(
                f"{workspace}__memberships",
                condition=Q(**{f"{workspace}__memberships__user_id": F("_key__created_by_id")}),
            ),
        )
        .filter(pk=pk)
        .annotate(
            _member_role=F("_member__role"),
            _member_reviewer=F("_member__is_reviewer"),
            **{alias: F(f"_key__{column}") for alias, column in _PRESENTED_KEY_COLUMNS.items()},
        )
        .order_by()[:1]
    )


# Values no call binds, to find where the compiled statement takes the call's own.
_PROBE_PREFIX, _PROBE_NOW, _PROBE_PK = "probe-prefix", datetime(1900, 1, 1, tzinfo=UTC), -(2**62)
_PROBE_MEMBER = -(2**62) + 1


@functools.cache
def _presented_key_statement(rows_of, workspace: str):
    """The lookup for rows from `rows_of()`, compiled by the ORM once per process: its SQL, the
    positions of the prefix, the time and the id among its parameters, and the compiler that
    knows its columns. Building and compiling the query on every prediction cost more than
    the rest of the web's work on it (bench/predict.py)."""
    queryset = _presented_key_rows(
        rows_of(), workspace=workspace, prefix=_PROBE_PREFIX, now=_PROBE_NOW, pk=_PROBE_PK
    )
    compiler = queryset.query.get_compiler(using=queryset.db)
    sql, params = compiler.as_sql()
    params = list(params)
    if [params.count(v) for v in (_PROBE_PREFIX, _PROBE_NOW, _PROBE_PK)] != [1, 1, 1]:
        return None  # a statement whose values cannot be found again: compiled per call
    slots = tuple(params.index(v) for v in (_PROBE_PREFIX, _PROBE_NOW, _PROBE_PK))
    return queryset.db, compiler, sql, params, slots


@functools.cache
def _member_statement(rows_of, workspace: str):
    """As _presented_key_statement, for a person's session (the try-it page's calls): the row
    joined to their membership, compiled once per process."""
    queryset = _member_rows(
        rows_of(), workspace=workspace, member_id=_PROBE_MEMBER, pk=_PROBE_PK
    ).order_by()[:1]
    return _statement_compiled(queryset, (_PROBE_MEMBER, _PROBE_PK))


def _statement_compiled(queryset: QuerySet, probes: tuple):
    compiler = queryset.query.get_compiler(using=queryset.db)
    sql, params = compiler.as_sql()
    params = list(params)
    if [params.count(v) for v in probes] != [1] * len(probes):
        return None  # a statement whose values cannot be found again: compiled per call
    slots = tuple(params.index(v) for v in probes)
    return queryset.db, compiler, sql, params, slots


@functools.cache
def _first_statement(rows_of, probes: tuple):
    return _statement_compiled(rows_of(*probes).order_by()[:1], probes)


def statement_first(rows_of: Callable[..., QuerySet[M]], *, probes: tuple, values: tuple):
    """The row of `rows_of(*values)` (a query that finds at most one), or None: its statement
    compiled by the ORM once per process with `probes` (values no call binds, one per
    argument, of the arguments' types) in place of the call's, and prepared on PostgreSQL as
    the caller lookup is (_statement_cursor). For a lookup on every prediction (deploy.api),
    where compiling and planning cost more than running it. `rows_of` must be a module-level
    function: the compiled statement is kept per function."""
    statement = _first_statement(rows_of, probes)
    if statement is None:
        return rows_of(*values).first()
    return _statement_row(statement, values)


def _presented_key_row(rows, *, workspace: str, prefix: str, now, pk: int):
    """The row of `_presented_key_rows` (None for none); `rows` a function returning the
    queryset runs the statement compiled once, a queryset is compiled for this call."""
    statement = _presented_key_statement(rows, workspace) if callable(rows) else None
    if statement is None:
        queryset = rows() if callable(rows) else rows
        found = _presented_key_rows(queryset, workspace=workspace, prefix=prefix, now=now, pk=pk)
        return next(iter(found), None)
    return _statement_row(statement, (prefix, now, pk))


def _statement_cursor(connection):
    """A cursor for a lookup compiled once. On PostgreSQL (unless DB_PREPARED_LOOKUPS is off),
    one that sends its values apart from the SQL and has the statement prepared on the
    connection: PostgreSQL spent 1.4 ms planning the key lookup for 0.08 ms of running it
    (EXPLAIN ANALYZE), and a prepared statement is planned once per connection, with a plan
    for any values (plan_cache_mode, set on the connection by config/settings.py); Django's
    own cursors put the values into the SQL text, which is planned afresh each time. Through
    Django's cursor wrapper all the same: counted and logged as any query."""
    if (
        connection.vendor != "postgresql"
        or _PreparedCursor is None
        or not settings.DB_PREPARED_LOOKUPS
    ):
        return connection.cursor()
    connection.ensure_connection()
    return connection._prepare_cursor(_PreparedCursor(connection.connection))


try:
    from django.db.backends.postgresql.base import ServerBindingCursor as _ServerBinding

    class _PreparedCursor(_ServerBinding):
        def execute(self, query, params=None, *, prepare=None, binary=None):
            raw = self.connection
            if raw.prepare_threshold is None:
                # Django turns psycopg's preparing off (None), which refuses prepare=True too;
                # a threshold no other statement reaches prepares these alone.
                raw.prepare_threshold = 2**31 - 1
            return super().execute(query, params, prepare=True, binary=binary)

except ImportError:  # no psycopg 3: SQLite only
    _PreparedCursor = None


def _statement_row(statement, values: tuple):
    """The one row (or None) of a statement compiled once, run with this call's `values`."""
    db, compiler, sql, params, slots = statement
    bound = list(params)
    for slot, value in zip(slots, values, strict=True):
        bound[slot] = value
    with _statement_cursor(connections[db]) as cursor:
        cursor.execute(sql, bound)
        found = cursor.fetchmany(1)
    if not found:
        return None
    # As Django's ModelIterable makes an instance of a row, with the select_related objects.
    klass_info, select = compiler.klass_info, compiler.select
    start, end = klass_info["select_fields"][0], klass_info["select_fields"][-1] + 1
    row = next(iter(compiler.results_iter(results=[found])))
    obj = klass_info["model"].from_db(
        db, [column[0].target.attname for column in select[start:end]], row[start:end]
    )
    for populator in get_related_populators(klass_info, select, db):
        populator.populate(row, obj)
    for name, position in compiler.annotation_col_map.items():
        setattr(obj, name, row[position])
    return obj


def _row_for_presented_key(rows, *, pk: int, key: PresentedKey, not_found: str, workspace):
    """The row joined to the live key of that prefix in the row's workspace and to the key's
    creator's membership there. No key or no membership: a bad key (401) or a row the key may
    not reach (404), told apart by checking the key on its own (a refusal only: a call that
    succeeds is one query)."""
    prefix = key.prefix
    if prefix is None:
        raise KeyRefused
    now = timezone.now()
    row = _presented_key_row(rows, workspace=workspace, prefix=prefix, now=now, pk=pk)
    if row is None or row._key_id is None or row._member_role is None:
        live = api_key_live(key, now=now)  # the key on its own: a bad key (401), or a 404
        if live is None:
            raise KeyRefused
        api_key_last_use_note(key_id=live.pk, last_used_at=live.last_used_at, now=now)
        raise Http404(not_found)
    if not key.matches(row._key_hash) or not row._key_user_active:
        raise KeyRefused
    api_key_last_use_note(key_id=row._key_id, last_used_at=row._key_last_used_at, now=now)
    ws = _workspace_of(row, workspace)
    creator = User(id=row._key_created_by_id, email=row._key_user_email, is_active=True)
    api_key = ApiKey(
        id=row._key_id,
        name=row._key_name,
        prefix=prefix,
        scopes=row._key_scopes,
        workspace=ws,
        created_by=creator,
        last_used_at=row._key_last_used_at,
        expires_at=row._key_expires_at,
    )
    access = WorkspaceAccess(
        workspace=ws,
        user=creator,
        role=row._member_role,
        api_key=api_key,
        perms=role_permissions(row._member_role, is_reviewer=row._member_reviewer)
        & scopes_permissions(api_key.scopes),
    )
    return access, row


def _first(queryset: QuerySet):
    return next(iter(queryset.order_by()[:1]), None)


def _workspace_of(row, path: str) -> Workspace:
    for name in path.split("__"):
        row = getattr(row, name)
    return row


def workspace_slugs_for_caller(*, auth, user: User) -> list[str]:
    """Every workspace an API caller can reach: a key reaches only its own."""
    if isinstance(auth, ApiKey):
        return [auth.workspace.slug]
    return list(Workspace.objects.for_user(user).values_list("slug", flat=True))


def workspace_list_for_user(*, user: User) -> QuerySet[Workspace]:
    return Workspace.objects.for_user(user).select_related("plan")


def workspace_labels(workspaces: Iterable[Workspace]) -> list[tuple[Workspace, str]]:
    """Each workspace with what a picker calls it: its name, and its slug beside the name where
    two of them share it (two teams called "Vision" are otherwise the same line)."""
    workspaces = list(workspaces)
    names = Counter(w.name.casefold() for w in workspaces)
    return [
        (w, f"{w.name} ({w.slug})" if names[w.name.casefold()] > 1 else w.name) for w in workspaces
    ]


def membership_list(*, workspace: Workspace) -> QuerySet[Membership]:
    return (
        Membership.objects.for_workspace(workspace).select_related("user").order_by("user__email")
    )


def membership_get(*, workspace: Workspace, pk: int) -> Membership:
    membership = membership_list(workspace=workspace).filter(pk=pk).first()
    if membership is None:
        raise Http404("No such member.")
    return membership


def invitation_list_open(*, workspace: Workspace) -> QuerySet[Invitation]:
    return (
        Invitation.objects.for_workspace(workspace)
        .filter(accepted_at__isnull=True, revoked_at__isnull=True)
        .select_related("invited_by")
    )


def invitation_get(*, workspace: Workspace, pk: int) -> Invitation:
    invitation = invitation_list_open(workspace=workspace).filter(pk=pk).first()
    if invitation is None:
        raise Http404("No such invitation.")
    return invitation


def project_list(*, workspace: Workspace) -> QuerySet[Project]:
    return Project.objects.for_workspace(workspace).select_related("created_by")


def project_get(*, workspace: Workspace, pk: int) -> Project:
    project = project_list(workspace=workspace).filter(pk=pk).first()
    if project is None:
        raise Http404("No such project.")
    return project


def api_key_list(*, workspace: Workspace) -> QuerySet[ApiKey]:
    return ApiKey.objects.for_workspace(workspace).select_related("created_by")


def api_key_get(*, workspace: Workspace, pk: int) -> ApiKey:
    key = api_key_list(workspace=workspace).filter(pk=pk).first()
    if key is None:
        raise Http404("No such API key.")
    return key


def workspace_seats_used(*, workspace: Workspace) -> int:
    counts = Workspace.objects.filter(pk=workspace.pk).aggregate(
        members=Count("memberships", distinct=True)
    )
    pending = invitation_list_open(workspace=workspace).filter(expires_at__gt=timezone.now())
    return counts["members"] + pending.count()
