"""Kestrel's URLs plus the route config/urls.py used to add under DEBUG (what
`static(MEDIA_URL, document_root=MEDIA_ROOT)` gave): the whole media folder served to anyone.
Only tests/security/test_probe.py uses it, to prove the probe sees that hole."""

from django.conf import settings
from django.urls import re_path
from django.views.static import serve

from config.urls import handler403  # noqa: F401
from config.urls import urlpatterns as kestrel

urlpatterns = [
    *kestrel,
    re_path(r"^media/(?P<path>.*)$", serve, {"document_root": settings.MEDIA_ROOT}),
]
