from django.contrib import admin
from django.urls import include, path

from config.api import api
from config.pages import page_parts_wire
from deploy.api import endpoints

page_parts_wire()
urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/", include("allauth.urls")),
    path("api/v1/", api.urls),
    # What stock `ultralytics` calls when ULTRALYTICS_PLATFORM_URL points here.
    path("api/webhooks/", include("training.platform_webhook_urls")),
    path("api/", include("config.platform_urls")),
    path("d/", endpoints.urls),
    path("", include("workspaces.urls")),
    path("", include("datasets.urls")),
    path("", include("annotation.urls")),
    path("", include("deploy.urls")),
    path("", include("training.urls")),
    path("", include("billing.urls")),
]
# No route serves MEDIA_URL, not even under DEBUG: stored files are users' data, sent only by
# views that check access (core/files.py).

handler403 = "workspaces.views.workspaces.permission_denied"
