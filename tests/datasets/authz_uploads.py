"""Authorisation-matrix rows for uploads and imports (see tests/test_authz_matrix.py).

The matrix's @import declares no files (files=[], total_size=10), so for an editor a chunk is
out of range and completing finds sizes that do not add up: 400, after the role and tenancy
checks (viewer 403, stranger 404) have passed. Every other row succeeds for real.
"""

from tests.authz import Row, _ws

ROUTES = [
    Row("upload_page", "get", "editor", 200, _ws(pk="@dataset")),
    # No file chosen: the form comes back with "This field is required."
    Row("upload_page", "post", "editor", 200, _ws(pk="@dataset")),
    Row(
        "upload_create",
        "post",
        "editor",
        201,
        _ws(pk="@dataset"),
        {"name": ["a.jpg", "a.txt"], "size": ["10", "4"]},
    ),
    Row("upload_status", "get", "editor", 200, _ws(import_pk="@import")),
    Row(
        "upload_chunk",
        "put",
        "editor",
        400,
        _ws(import_pk="@import", file_index=0, chunk_index=0),
    ),
    Row("upload_complete", "post", "editor", 400, _ws(import_pk="@import")),
    # Like the API's GET /imports/{id}: anyone who may read the dataset may follow its imports.
    Row("import_detail", "get", "viewer", 200, _ws(import_pk="@import")),
    # The whole report as JSON, for the same readers.
    Row("import_report_download", "get", "viewer", 200, _ws(import_pk="@import")),
]


def __getattr__(name: str):
    # The matrix imports this module while defining ROUTES, before ApiRow exists; API rows are
    # built when it asks for them.
    if name != "API":
        raise AttributeError(name)
    from tests.authz import ApiRow

    return [
        # Without a multipart `file` the request is refused (400), after the access checks.
        ApiRow("/api/v1/datasets/{dataset_id}/uploads", "post", "editor", "write", 400),
        ApiRow("/api/v1/imports/{import_id}", "get", "viewer", "read", 200),
    ]
