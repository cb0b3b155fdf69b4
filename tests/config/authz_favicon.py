"""Authorisation-matrix row for /favicon.ico (tests/test_authz_matrix.py): the logo, to anyone,
signed in or not (tests/browser/test_first_hour_small.py follows it in a browser)."""

from tests.authz import Row

ROUTES = [
    Row("favicon", "get", None, 302, anonymous=302, stranger=302),
]
