from django.contrib import admin
from django.http import HttpRequest, HttpResponseRedirect
from django.templatetags.static import static
from django.urls import include, path
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET

from config.api import api
from config.pages import page_parts_wire
from deploy.api import endpoints

page_parts_wire()


@require_GET
@cache_control(max_age=86400, public=True)
def favicon(request: HttpRequest) -> HttpResponseRedirect:
    """/favicon.ico, which browsers and tools ask for whatever a page's <link rel="icon"> says:
    the logo. Not permanent: the static file's name carries its hash and changes with it."""
    return HttpResponseRedirect(static("img/kestrel.svg"))


urlpatterns = [
    path("favicon.ico", favicon, name="favicon"),
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
    path("", include("evaluations.urls")),
    path("", include("sweeps.urls")),
]
# No route serves MEDIA_URL, not even under DEBUG: stored files are users' data, sent only by
# views that check access (core/files.py).

handler403 = "workspaces.views.workspaces.permission_denied"
