"""The site's URLs plus two that fail on purpose: a page and an API operation, each raising
an exception whose message holds a marker that must never reach an ordinary caller."""

from django.urls import path
from ninja import NinjaAPI

from config.errors import api_errors_install
from config.urls import urlpatterns as site_urlpatterns

MARKER = "kestrel-secret-marker-7f3a"

boom_api = NinjaAPI(urls_namespace="boom-api")
api_errors_install(boom_api)


@boom_api.get("/boom", auth=None)
def api_boom(request):
    raise RuntimeError(MARKER)


def page_boom(request):
    raise RuntimeError(MARKER)


urlpatterns = [
    path("boom/", page_boom),
    path("boom-api/", boom_api.urls),
    *site_urlpatterns,
]
