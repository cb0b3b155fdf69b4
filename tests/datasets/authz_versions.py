"""Authorisation-matrix rows for versions, exports, Explore and clone (tests/test_authz_matrix.py).

@dataset is private (its public routes answer 404 to everyone); @public_dataset belongs to the
stranger's workspace and is public.
"""

from tests.authz import LOGIN, Row, _ws

ROUTES = [
    Row("version_list", "get", "viewer", 200, _ws(pk="@dataset")),
    Row("version_create", "post", "editor", 302, _ws(pk="@dataset"), {"note": "first"}),
    Row("version_detail", "get", "viewer", 200, _ws(pk="@dataset", number="@version")),
    Row("version_export", "get", "viewer", 200, _ws(pk="@dataset", number="@version", fmt="yolo")),
    Row("dataset_export", "get", "viewer", 200, _ws(pk="@dataset", fmt="yolo")),
    Row("dataset_export", "get", "viewer", 200, _ws(pk="@dataset", fmt="coco")),
    Row("dataset_clone", "get", "viewer", 200, _ws(pk="@dataset")),
    Row("dataset_clone", "post", "editor", 302, _ws(pk="@dataset"), {"workspace": "acme"}),
    Row("explore", "get", None, 200, anonymous=200, stranger=200),
    Row("public_dataset", "get", None, 404, {"pk": "@dataset"}, anonymous=404),
    Row("public_dataset", "get", None, 200, {"pk": "@public_dataset"}, anonymous=200, stranger=200),
    Row(
        "public_dataset_clone",
        "post",
        "editor",
        302,
        {"pk": "@public_dataset"},
        {"workspace": "acme"},
        anonymous=LOGIN,
        stranger=404,
    ),
    Row("public_dataset_clone", "get", None, 404, {"pk": "@dataset"}, anonymous=LOGIN),
    Row(
        "public_dataset_clone",
        "post",
        None,
        404,
        {"pk": "@dataset"},
        {"workspace": "acme"},
        anonymous=LOGIN,
    ),
]


def __getattr__(name: str):
    # The matrix imports this module while defining ROUTES, before ApiRow exists; API rows are
    # built when it asks for them.
    if name != "API":
        raise AttributeError(name)
    from tests.authz import ApiRow

    return [
        ApiRow("/api/v1/datasets/{dataset_id}/versions", "get", "viewer", "read", 200),
        ApiRow(
            "/api/v1/datasets/{dataset_id}/versions", "post", "editor", "write", 201, {"note": "v"}
        ),
        ApiRow("/api/v1/datasets/{dataset_id}/export", "get", "viewer", "read", 200),
        ApiRow(
            "/api/v1/datasets/{dataset_id}/clone",
            "post",
            "editor",
            "write",
            201,
            {"workspace": "acme"},
        ),
    ]
