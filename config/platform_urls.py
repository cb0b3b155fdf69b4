"""The Ultralytics Platform's read routes that stock `ultralytics` calls to resolve ul:// URIs
and for `yolo login` (issue 20): mounted at /api/."""

urlpatterns: list = []
