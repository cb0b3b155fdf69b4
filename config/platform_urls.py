"""The Ultralytics Platform's read routes that stock `ultralytics` calls to resolve ul:// URIs
and for `yolo login` (issue 20): mounted at /api/."""

from django.urls import path

from config.platform_account import account_summary

urlpatterns: list = [
    path("account/summary", account_summary, name="platform_account_summary"),
]
