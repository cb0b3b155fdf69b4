"""Authorisation-matrix rows for billing pages and the billing API (tests/test_authz_matrix.py).

Without Stripe keys (as in tests) starting a top-up returns to the billing page with the reason;
the webhook is signature-only (TOKEN_ROUTES; tests/billing/test_stripe.py)."""

from tests.authz import ApiRow, Row, _ws

ROUTES = [
    Row("billing_topup", "post", "admin", 302, _ws(), {"credits": "25"}),
    Row("billing_topup_done", "get", "viewer", 302, _ws()),
]

API = [
    ApiRow("/api/v1/workspaces/{slug}/billing/balance", "get", "viewer", "read", 200),
    ApiRow("/api/v1/workspaces/{slug}/billing/ledger", "get", "viewer", "read", 200),
    ApiRow("/api/v1/billing/balance", "get", "viewer", "read", 200, query="?workspace=acme"),
    ApiRow("/api/v1/billing/ledger", "get", "viewer", "read", 200, query="?workspace=acme"),
]
