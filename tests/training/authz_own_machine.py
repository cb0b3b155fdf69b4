"""Authorisation-matrix rows for "Train on your own machine" (tests/test_authz_matrix.py):
every member sees the commands; only those who may make API keys (admins, owners) press its
button, which makes a key and redirects back to the page."""

from tests.authz import Row, _ws

ROUTES = [
    Row("job_own_machine", "get", "viewer", 200, _ws(pk="@project")),
    Row("job_own_machine", "post", "admin", 302, _ws(pk="@project"), {"data": ""}),
]
