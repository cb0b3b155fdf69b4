"""How large a request body each route takes, decided before any of the body is read
(core/request_guard.py enforces it; issue 31).

A caller who has shown no credentials may send ANONYMOUS_BODY_BYTES to any route (the Stripe
webhook, anonymous by design, STRIPE_EVENT_BYTES). Past that, the request's credentials are
looked at, once, by the app's own lookups, and earn the route's limit: the figure its view
enforces itself (imported from where the view keeps it), or its workspace plan's where the
plan sets one. Credentials that do not reach the route (another team's workspace, a refused
key, an expired upload URL) earn nothing more. Every other route takes a form or a JSON body:
Django's DATA_UPLOAD_MAX_MEMORY_SIZE, for a signed-in session or a live API key.

A new route that takes more than a form adds its line to ROUTES; the README's "Request limits"
table lists them.
"""

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from importlib import import_module

from django.conf import settings
from django.contrib import auth
from django.contrib.auth.models import AnonymousUser
from django.http import Http404, HttpRequest, QueryDict
from django.http.cookie import parse_cookie
from django.utils import timezone

from annotation.masks import MASK_MAX_BYTES
from core.request_guard import Grant, Refused, json_refusal, plain_refusal
from core.table_changes import tables_moves_seen
from datasets.selectors import dataset_access_for_caller
from datasets.services.uploads import chunk_bytes
from datasets.views.uploads import MAX_FILE_LIST_BYTES
from training import platform_webhooks
from training.event_schema import MAX_BODY_BYTES as TRAINER_EVENTS_BYTES
from training.models import ExternalUpload

# The views' own checks: the body limit is no second copy of the rule of which upload URL is good.
from training.remote import trainer_upload_refusal
from training.run_files import MAX_WEIGHTS_BYTES
from training.services.external_uploads import upload_attempt_ended
from training.trainer_events import attempt_authorised
from workspaces.models import ApiKey, User
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess, workspace_access_for_user
from workspaces.services.keys import api_key_authenticate

ANONYMOUS_BODY_BYTES = 64 * 1024  # a sign-in, sign-up or password form is a few hundred bytes
STRIPE_EVENT_BYTES = 512 * 1024  # a Stripe event is a few KB
MULTIPART_SLACK = 64 * 1024  # a form's other fields and the boundaries around its file
PREDICT_SLACK = 64 * 1024  # as deploy/predict.py allows over PREDICT_MAX_BODY_BYTES


class _Credentials:
    """What a request presents: each looked up on first use (a query or two)."""

    def __init__(self, scope: dict):
        self.headers = {
            name.decode("latin-1"): value.decode("latin-1") for name, value in scope["headers"]
        }
        self.query = QueryDict(scope.get("query_string", b""))

    @cached_property
    def user(self) -> User | None:
        """The signed-in person of the session cookie, as Django's own auth finds them."""
        key = parse_cookie(self.headers.get("cookie", "")).get(settings.SESSION_COOKIE_NAME)
        if not key:
            return None
        request = HttpRequest()
        request.session = import_module(settings.SESSION_ENGINE).SessionStore(key)
        user = auth.get_user(request)
        return user if user.is_authenticated else None

    @cached_property
    def api_key(self) -> ApiKey | None:
        header = self.headers.get("authorization", "")
        raw = header.removeprefix("Bearer ").strip() if header.startswith("Bearer ") else ""
        return api_key_authenticate(raw=raw) if raw else None

    def caller(self) -> str:
        if self.api_key is not None:
            return f"key:{self.api_key.pk}"
        return f"user:{self.user.pk}" if self.user is not None else ""

    def member(self, slug: str, perm: Perm) -> WorkspaceAccess | None:
        if self.user is None:
            return None
        try:
            access = workspace_access_for_user(user=self.user, slug=slug)
        except Http404:
            return None
        return access if access.can(perm) else None


def _signed_in_or_keyed(credentials: _Credentials, limit: int, what: str) -> Grant | None:
    if credentials.api_key is None and credentials.user is None:
        return None
    return Grant(limit, what, credentials.caller())


def _mask(credentials: _Credentials, path: dict) -> Grant | None:
    return _signed_in_or_keyed(credentials, MASK_MAX_BYTES, "a painted mask")


def _chunk(credentials: _Credentials, path: dict) -> Grant | None:
    if credentials.member(path["ws"], Perm.WRITE) is None:
        return None
    return Grant(chunk_bytes(), "A chunk of a dataset upload", credentials.caller())


def _file_list(credentials: _Credentials, path: dict) -> Grant | None:
    if credentials.member(path["ws"], Perm.WRITE) is None:
        return None
    return Grant(MAX_FILE_LIST_BYTES, "An upload's list of files", credentials.caller())


def _upload_form(credentials: _Credentials, path: dict) -> Grant | None:
    access = credentials.member(path["ws"], Perm.WRITE)
    if access is None:
        return None
    plan = access.workspace.plan
    limit = plan.max_upload_bytes + MULTIPART_SLACK
    return Grant(limit, f"An upload on the {plan.name} plan", credentials.caller())


def _api_upload(credentials: _Credentials, path: dict) -> Grant | None:
    key, user = credentials.api_key, credentials.user
    if key is None and user is None:
        return None
    try:
        access, _ = dataset_access_for_caller(
            auth=key, user=user or AnonymousUser(), pk=int(path["dataset"])
        )
    except Http404:
        return None
    if not access.can(Perm.WRITE):
        return None
    plan = access.workspace.plan
    limit = plan.max_upload_bytes + MULTIPART_SLACK
    return Grant(limit, f"An upload on the {plan.name} plan", credentials.caller())


def _model_form(credentials: _Credentials, path: dict) -> Grant | None:
    access = credentials.member(path["ws"], Perm.TRAIN)
    if access is None:
        return None
    plan = access.workspace.plan
    limit = plan.max_model_upload_bytes + MULTIPART_SLACK
    return Grant(limit, f"A weights file on the {plan.name} plan", credentials.caller())


def _predict(credentials: _Credentials, path: dict) -> Grant | None:
    limit = settings.PREDICT_MAX_BODY_BYTES + PREDICT_SLACK
    return _signed_in_or_keyed(credentials, limit, "An image to predict on")


# A predict grant is kept by this process, by the credentials it was earned with, as long as
# the view keeps a caller's lookup (PREDICT_KEY_KEPT_SECONDS at most, deploy.api), and no
# longer once a call here has seen a table the lookup reads change (core.table_changes):
# nearly every photo is over the anonymous limit, and without this each call of a busy key
# looked its caller up twice (here on a thread, then in the view's one lookup), about 2 ms a
# call (bench/predict.py --image). The grant decides only how large a body is read; the view's
# lookup still checks the caller on every call, so a key revoked meanwhile sends at most its
# next image to each web process, which is refused.
GRANT_KEPT_MAX = 4096
PREDICT_ROUTES = re.compile(r"^/(api/v1/models/\d+|d/[^/]+)/predict$")


def _platform_event(credentials: _Credentials, path: dict) -> Grant | None:
    if credentials.api_key is None:
        return None
    limit = platform_webhooks.MAX_BODY_BYTES
    return Grant(limit, "An event of a training run", credentials.caller())


def _platform_upload(credentials: _Credentials, path: dict) -> Grant | None:
    """The signed URL stock `ultralytics` PUTs its weights to: its token is a secret of 192
    bits, handed out for one file of a run's attempt, good until it expires, is used, or the
    attempt ends."""
    upload = (
        ExternalUpload.objects.select_related("job__workspace__plan")
        .filter(token=path["token"], stored_at__isnull=True, expires_at__gt=timezone.now())
        .first()
    )
    if upload is None:
        return None
    if ended := upload_attempt_ended(upload.job, upload.attempt):
        raise Refused(410, ended)  # as the view answers: nothing of an ended run changes
    plan = upload.job.workspace.plan
    limit = plan.max_model_upload_bytes
    return Grant(limit, f"A weights file on the {plan.name} plan", f"job:{upload.job_id}")


def _trainer_events(credentials: _Credentials, path: dict) -> Grant | None:
    request = HttpRequest()
    request.META["HTTP_AUTHORIZATION"] = credentials.headers.get("authorization", "")
    job_id = int(path["job"])
    if not isinstance(attempt_authorised(request, job_id), int):
        return None
    return Grant(TRAINER_EVENTS_BYTES, "A trainer's batch of events", f"job:{job_id}")


def _trainer_upload(credentials: _Credentials, path: dict) -> Grant | None:
    """A remote trainer's signed upload URL, while its attempt is the job's live one."""
    job_id, attempt = int(path["job"]), int(path["attempt"])
    query = credentials.query
    refused = trainer_upload_refusal(
        job_id, attempt, path["name"], query.get("exp", ""), query.get("sig", "")
    )
    if refused and refused[0] == 410:
        raise Refused(*refused)  # as the view answers
    if refused:
        return None
    return Grant(MAX_WEIGHTS_BYTES, "A file of a training run", f"job:{job_id}")


def _form(credentials: _Credentials, path: dict) -> Grant | None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return _signed_in_or_keyed(credentials, limit, "A form or JSON body")


@dataclass(frozen=True)
class _Route:
    pattern: re.Pattern
    grant: Callable[[_Credentials, dict], Grant | None]


WS = r"^/w/(?P<ws>[-a-zA-Z0-9_]+)"
# The resumable uploader's endpoints answer JSON (static/js/upload.js reads its `detail`).
UPLOADER = re.compile(WS + r"/(imports/\d+/files/\d+/chunks/\d+|datasets/\d+/uploads)/$")
ROUTES = [
    _Route(re.compile(WS + r"/imports/\d+/files/\d+/chunks/\d+/$"), _chunk),
    _Route(re.compile(WS + r"/datasets/\d+/uploads/$"), _file_list),
    _Route(re.compile(WS + r"/datasets/\d+/upload/$"), _upload_form),
    _Route(re.compile(WS + r"/projects/\d+/models/upload/$"), _model_form),
    _Route(re.compile(r"^/api/v1/datasets/(?P<dataset>\d+)/uploads$"), _api_upload),
    _Route(re.compile(r"^/api/v1/models/\d+/predict$"), _predict),
    _Route(re.compile(r"^/api/v1/images/\d+/mask$"), _mask),
    _Route(re.compile(r"^/d/[^/]+/predict$"), _predict),
    _Route(re.compile(r"^/api/v1/trainer/jobs/(?P<job>\d+)/events$"), _trainer_events),
    _Route(
        re.compile(
            r"^/api/v1/trainer/jobs/(?P<job>\d+)/attempts/(?P<attempt>\d+)/files/(?P<name>[^/]+)$"
        ),
        _trainer_upload,
    ),
    _Route(re.compile(r"^/api/webhooks/models/upload/(?P<token>[^/]{1,64})$"), _platform_upload),
    _Route(re.compile(r"^/api/webhooks/(training/metrics|models/upload)$"), _platform_event),
]
STRIPE_WEBHOOK = "/billing/stripe/webhook"


def _fingerprint(scope: dict) -> str:
    """The credentials a request presents (its Authorization and Cookie headers), hashed: what
    a kept grant is found by; "" when it presents none."""
    presented = sorted(
        (name, value) for name, value in scope["headers"] if name in (b"authorization", b"cookie")
    )
    return hashlib.sha256(repr(presented).encode()).hexdigest() if presented else ""


class BodyLimits:
    """The RouteLimits of Kestrel's routes (core.request_guard)."""

    def __init__(self):
        # By the credentials' fingerprint: (until when, tables_moves_seen() then, the grant).
        self._kept: dict[str, tuple[float, int, Grant]] = {}

    def anonymous(self, scope: dict) -> Grant:
        if scope["path"] == STRIPE_WEBHOOK:
            return Grant(STRIPE_EVENT_BYTES, "A Stripe event")
        return Grant(ANONYMOUS_BODY_BYTES, "A request without credentials that reach this route")

    def granted(self, scope: dict) -> Grant:
        credentials = _Credentials(scope)
        path = scope["path"]
        for route in ROUTES:
            if match := route.pattern.match(path):
                grant = route.grant(credentials, match.groupdict())
                break
        else:
            grant = None if path == STRIPE_WEBHOOK else _form(credentials, {})
        if grant is not None and PREDICT_ROUTES.match(path):
            self._keep(scope, grant)
        return grant or self.anonymous(scope)

    def kept(self, scope: dict) -> Grant | None:
        if not PREDICT_ROUTES.match(scope["path"]):
            return None
        fingerprint = _fingerprint(scope)
        kept = self._kept.get(fingerprint) if fingerprint else None
        if kept is None or time.monotonic() >= kept[0] or kept[1] != tables_moves_seen():
            return None
        return kept[2]

    def _keep(self, scope: dict, grant: Grant) -> None:
        fingerprint = _fingerprint(scope)
        if not fingerprint:
            return
        if len(self._kept) >= GRANT_KEPT_MAX:
            self._kept.clear()
        until = time.monotonic() + settings.PREDICT_KEY_KEPT_SECONDS
        self._kept[fingerprint] = (until, tables_moves_seen(), grant)

    def refusal(self, scope: dict, status: int, message: str) -> tuple[str, bytes]:
        path = scope["path"]
        if path.startswith("/api/webhooks/"):
            return json_refusal(message, field="error")  # the Ultralytics Platform's word
        if path.startswith(("/api/", "/d/")) or UPLOADER.match(path):
            return json_refusal(message)
        return plain_refusal(message)
