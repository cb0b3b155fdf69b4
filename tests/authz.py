"""The rows of the authorisation matrix (tests/test_authz_matrix.py): what each route and API
operation should answer to each kind of caller. Each area lists its own rows, in
tests/<app>/authz_*.py."""

from dataclasses import dataclass, field

LOGIN = "login"  # expected: 302 to the login page


@dataclass
class Row:
    route: str
    method: str
    min_role: str | None  # None: not tied to a workspace
    ok: int
    kwargs: dict = field(default_factory=dict)  # values are names of context objects or literals
    data: dict = field(default_factory=dict)
    # expectation overrides for callers not in the workspace
    anonymous: object = LOGIN
    stranger: object = 404


def _ws(**kw):
    return {"ws_slug": "acme", **kw}


@dataclass
class ApiRow:
    path: str  # as in the OpenAPI schema
    method: str
    min_role: str
    scope: str
    ok: int
    body: dict | None = None  # values may name context objects ("@name"), as Row's do
    ids: dict = field(default_factory=dict)  # path ids for this row, e.g. {"job_id": "@job"}
    query: str = ""  # appended to the path, e.g. "?workspace=acme"
