"""The Ultralytics Platform's read routes that stock `ultralytics` calls to resolve ul:// URIs
and for `yolo login` (issue 20): mounted at /api/.

The `signed/` routes take no credentials: each URL is signed for one file and expires (what
the client downloads right after resolving a URI)."""

from django.urls import path, re_path

from config.platform_account import account_summary
from datasets import platform_export
from training import platform_files

urlpatterns: list = [
    path("account/summary", account_summary, name="platform_account_summary"),
    path(
        "datasets/<str:owner>/<str:slug>/export",
        platform_export.platform_dataset_export,
        name="platform_dataset_export",
    ),
    path(
        "models/<str:owner>/<str:project>/<str:model>/files",
        platform_files.platform_model_files,
        name="platform_model_files",
    ),
    path(
        "signed/dataset-versions/<int:pk>/<str:filename>",
        platform_export.platform_dataset_ndjson,
        name="platform_dataset_ndjson",
    ),
    re_path(
        r"^signed/images/(?P<sha256>[0-9a-f]{64})/(?P<filename>[^/]+)$",
        platform_export.platform_dataset_image,
        name="platform_dataset_image",
    ),
    path(
        "signed/models/<int:pk>/<str:filename>",
        platform_files.platform_model_weights,
        name="platform_model_weights",
    ),
]
