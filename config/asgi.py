"""The ASGI application: what uvicorn serves (`make run`, compose)."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# A pool of PostgreSQL connections for this process (see DATABASES in config/settings.py).
os.environ.setdefault("DB_POOL", "true")

django.setup(set_prefix=False)
# Imported once Django is set up: the route table reads the apps' own limits.
from config.body_limits import BodyLimits  # noqa: E402
from config.predict_route import PREDICT_PATH, PredictRoute  # noqa: E402
from core.asgi_handler import OneHopASGIHandler  # noqa: E402
from core.refusal_pacing import RefusalPacing  # noqa: E402
from core.request_guard import RequestGuard  # noqa: E402

# Every request's body is bounded before Django reads any of it (core/request_guard.py); a
# predict call of a caller this process has just looked up skips Django's handler
# (config/predict_route.py); an address whose predict calls keep being refused, by either, is
# answered more slowly (core/refusal_pacing.py).
application = RefusalPacing(
    RequestGuard(PredictRoute(OneHopASGIHandler()), BodyLimits()), PREDICT_PATH
)
