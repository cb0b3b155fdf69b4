"""Authorisation-matrix rows for the health report, statistics and the workspace's health policy."""

from tests.authz import Row, _ws

ROUTES = [
    Row("dataset_health", "get", "viewer", 200, _ws(pk="@dataset")),
    Row("dataset_health_run", "post", "editor", 302, _ws(pk="@dataset")),
    Row("dataset_stats", "get", "viewer", 200, _ws(pk="@dataset")),
    Row(
        "workspace_dataset_health_policy",
        "post",
        "admin",
        302,
        _ws(),
        {"block_training": "on"},
    ),
]
