"""Authorisation-matrix rows for the billing API (tests/test_authz_matrix.py)."""

from tests.test_authz_matrix import ApiRow

API = [
    ApiRow("/api/v1/workspaces/{slug}/billing/balance", "get", "viewer", "read", 200),
    ApiRow("/api/v1/workspaces/{slug}/billing/ledger", "get", "viewer", "read", 200),
]
