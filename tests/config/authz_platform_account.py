"""Authorisation-matrix rows for the Ultralytics Platform account summary
(tests/test_authz_matrix.py): any signed-in person gets their own account (what a key gets:
tests/config/test_platform_account.py); no session and no key is 401 JSON, never the login
page (stock clients read the status)."""

from tests.authz import Row

ROUTES = [
    Row("platform_account_summary", "get", None, 200, anonymous=401, stranger=200),
]
