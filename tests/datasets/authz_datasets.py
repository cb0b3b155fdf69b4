"""Authorisation-matrix rows for dataset pages (see tests/test_authz_matrix.py)."""

from tests.authz import ApiRow, Row, _ws

ROUTES = [
    Row("dataset_list", "get", "viewer", 200, _ws()),
    Row("dataset_create", "get", "editor", 200, _ws()),
    Row("dataset_create", "post", "editor", 302, _ws(), {"name": "New DS", "task": "detect"}),
    Row("dataset_detail", "get", "viewer", 200, _ws(pk="@dataset")),
    Row("dataset_edit", "get", "editor", 200, _ws(pk="@dataset")),
    Row("dataset_edit", "post", "editor", 302, _ws(pk="@dataset"), {"name": "Renamed DS"}),
    Row("dataset_delete", "get", "editor", 200, _ws(pk="@dataset")),
    Row("dataset_delete", "post", "editor", 302, _ws(pk="@dataset"), {"confirm": "Birds DS"}),
]

API = [
    ApiRow(
        "/api/v1/datasets", "post", "editor", "write", 201, {"name": "API DS", "workspace": "acme"}
    ),
    ApiRow("/api/v1/datasets/{dataset_id}", "get", "viewer", "read", 200),
]
