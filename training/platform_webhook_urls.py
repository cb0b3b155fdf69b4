"""The Ultralytics Platform's webhooks, as the stock `ultralytics` client calls them (issue 20):
mounted at /api/webhooks/ (training.platform_webhooks)."""

from django.urls import path

from training import platform_webhooks

urlpatterns = [
    path("training/metrics", platform_webhooks.training_metrics, name="platform_training_metrics"),
    path("models/upload", platform_webhooks.model_upload, name="platform_model_upload"),
    path(
        "models/upload/<str:token>",
        platform_webhooks.model_upload_put,
        name="platform_model_upload_put",
    ),
]
