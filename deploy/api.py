"""The shared inference API (under /api/v1/), and dedicated endpoints (/d/<slug>/predict).

Both answer in the hosted Ultralytics Platform's shape, so its users can switch by changing
the URL. A key needs the predict scope; the browser session works too (the try-it page)."""

import hashlib
import time
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db.models import OuterRef, Subquery
from django.http import Http404, HttpRequest
from django.utils import timezone
from ninja import NinjaAPI, Router
from ninja.errors import AuthenticationError
from ninja.security import HttpBearer

from core.files import stored_file_response
from core.table_changes import tables_reading_note, tables_tokens_keys, tables_tokens_read
from deploy.models import Deployment, DeploymentState
from deploy.predict import PredictRefused, predict_forward, rate_limit_of, rate_who
from deploy.ratelimit import Verdict, rate_take_reading
from deploy.remote_endpoint import endpoint_for_weights
from deploy.selectors import collection_rules_on, model_public_access, models_for_predict
from deploy.supervisor import endpoint_route
from training.models import TrainedModel
from training.platform_files import weights_filename
from workspaces.api import SessionAuth
from workspaces.permissions import Perm
from workspaces.selectors import (
    KeyRefused,
    PresentedKey,
    WorkspaceAccess,
    row_for_caller,
    statement_first,
)

router = Router(tags=["inference"])


class PredictKeyAuth(HttpBearer):
    """Takes a token shaped like a Kestrel key and leaves its check to the call's one query
    (workspaces.selectors.row_for_caller); anything else falls through to the browser session."""

    def authenticate(self, request: HttpRequest, token: str) -> PresentedKey | None:
        key = PresentedKey(token)
        return key if key.prefix else None


# A caller's lookup (a key or a browser session, its membership, the model) kept by this
# process: a busy caller's calls skip the database. Kept while no table it read has changed,
# which each call checks in the Redis round trip that counts it against the rate limit (the
# tables' tokens, core.table_changes, moved by every write to them once it commits, from any
# process): a key revoked, a member removed, a role or a scope, the plan, the model's state, a
# session signed out or a password changed reach the very next call in every process. And at
# most PREDICT_KEY_KEPT_SECONDS (settings: a change made outside Django, or one whose
# announcement Redis missed; a session that expires meanwhile), never past the key's expiry.
KEY_KEPT_MAX = 4096
# (caller, what) → (until when, the tables' tokens read before the lookup, what it found)
_kept: dict[tuple, tuple[float, tuple, tuple[WorkspaceAccess, TrainedModel, object]]] = {}
_sessions_kept: dict[str, float] = {}  # a session's fingerprint → until when it has a lookup kept


def _session_fingerprint(session_key: str) -> str:
    return "s:" + hashlib.sha256(session_key.encode()).hexdigest()


class KeptSession:
    """A browser session (CSRF-checked) whose caller lookup this process kept a moment ago: the
    session and its person are loaded only if the lookup has to run again."""

    def __init__(self, session_key: str):
        self.fingerprint = _session_fingerprint(session_key)


class PredictSessionAuth(SessionAuth):
    """SessionAuth, without loading the session and its person (two queries) for a session
    whose lookup this process keeps (nothing changed since); CSRF is checked all the same."""

    def _get_key(self, request: HttpRequest) -> str | None:
        if _session_kept(request.COOKIES.get(self.param_name)):
            return super(SessionAuth, self)._get_key(request)  # the CSRF check, then the cookie
        return super()._get_key(request)

    def authenticate(self, request: HttpRequest, key: str | None):
        if _session_kept(key):
            return KeptSession(key)
        return super().authenticate(request, key)


def _session_kept(session_key: str | None) -> bool:
    if not session_key:
        return False
    until = _sessions_kept.get(_session_fingerprint(session_key))
    return until is not None and time.monotonic() < until


PREDICT_AUTH = [PredictKeyAuth(), PredictSessionAuth()]


def _caller_fingerprint(request: HttpRequest) -> str | None:
    auth = request.auth
    if isinstance(auth, PresentedKey):
        return "k:" + auth.hash
    if isinstance(auth, KeptSession):
        return auth.fingerprint
    session_key = request.COOKIES.get(settings.SESSION_COOKIE_NAME)
    return _session_fingerprint(session_key) if session_key else None


def _caller_kept(
    caller: str, what: tuple
) -> tuple[tuple[WorkspaceAccess, TrainedModel, object] | None, Verdict | None, tuple | None]:
    """What this process kept for the caller (a fingerprint, _caller_fingerprint) and `what`
    it called, checked as the call is counted against the plan's rate limit: ((access, model,
    extra), verdict, tokens) when it still holds; (None, verdict, tokens) when a table it read
    has changed since (the call is counted: the caller is looked up again); (None, None, None)
    when nothing is kept."""
    kept = _kept.get((caller, what))
    if kept is None or time.monotonic() >= kept[0]:
        return None, None, None
    _, tokens, found = kept
    access, model, _ = found
    verdict, seen = rate_take_reading(
        who=rate_who(access), limit=rate_limit_of(model.workspace.plan), read=tables_tokens_keys()
    )
    tables_reading_note(seen)
    if seen == tokens:
        return found, verdict, seen
    _kept.pop((caller, what), None)
    return None, verdict, seen


def _kept_or(
    request: HttpRequest,
    what: tuple,
    lookup: Callable[[], tuple[WorkspaceAccess, TrainedModel, object]],
) -> tuple[WorkspaceAccess, TrainedModel, object, Verdict | None]:
    """`lookup()` (the caller's access, the model and what else the call needs, all read from
    the database), kept for this caller and `what` while nothing it read changes (an API key or
    a browser session); and the rate limit's verdict when the call was counted with the check
    that what was kept still holds."""
    caller = _caller_fingerprint(request)
    seconds = settings.PREDICT_KEY_KEPT_SECONDS
    if caller is None or seconds <= 0:
        return (*lookup(), None)
    found, verdict, seen = _caller_kept(caller, what)
    if found is not None:
        request.predict_kept = True  # said in its Server-Timing (bench/predict.py counts them)
        return (*found, verdict)
    if verdict is None:
        seen = tables_tokens_read()  # before the lookup: a change committed after it shows
        tables_reading_note(seen)
    found = lookup()
    access = found[0]
    if len(_kept) >= KEY_KEPT_MAX:
        _kept.clear()
        _sessions_kept.clear()
    expires_at = access.api_key.expires_at if access.api_key is not None else None
    if expires_at is not None:
        seconds = min(seconds, (expires_at - timezone.now()).total_seconds())
    until = time.monotonic() + seconds
    _kept[(caller, what)] = (until, seen, found)
    if caller.startswith("s:"):
        _sessions_kept[caller] = max(until, _sessions_kept.get(caller, 0.0))
    return (*found, verdict)


def _caller_lookup(
    request: HttpRequest, model_id: int, *, public: bool = False
) -> tuple[WorkspaceAccess, TrainedModel]:
    """Who is calling, and the model, in one query (a key checked in it, or the session's
    membership). `public`: a session outside the model's workspace may call it if it is public."""
    auth = request.auth
    if isinstance(auth, KeptSession):
        # What was kept for this session is gone or was for another model: look it up again,
        # from the session itself (one that has since signed out is refused as ever).
        if not request.user.is_authenticated:
            raise AuthenticationError
        auth = request.user
    try:
        access, model = row_for_caller(
            models_for_predict,
            pk=model_id,
            auth=auth,
            user=request.user,
            not_found="No such model.",
        )
    except KeyRefused:
        raise AuthenticationError from None
    except Http404:
        if not public or isinstance(request.auth, PresentedKey):
            raise
        model = statement_first(_public_models, probes=(_PROBE_PK,), values=(model_id,))
        if model is None:
            raise
        access = model_public_access(user=request.user, model=model)
    if public and model.is_public and not access.can(Perm.PREDICT):
        access = model_public_access(user=request.user, model=model)  # a viewer of its team
    access.require(Perm.PREDICT)
    return access, model


_PROBE_PK = -(2**62)


def _public_models(pk: int):
    return models_for_predict().filter(pk=pk, is_public=True)


@router.post("/models/{model_id}/predict", auth=PREDICT_AUTH)
def model_predict(request: HttpRequest, model_id: int):
    """Run a model of your workspace on one image: multipart `file` (or JSON base64 `image`),
    with `conf` (0.25), `iou` (0.7), `imgsz` (32–1280, default the model's) and `max_det`.
    A semantic segmentation model answers each class's mask (RLE) and pixel share, and with
    `mask=png` its class mask as one PNG too; a depth model a 16-bit PNG of metres × `scale`
    with min, median and max (deploy.inference.formats).
    A public model (the demo) answers anyone signed in, from the browser session.

    Your image is not kept: collection is off by default. When the model's owner turns on a
    collection rule (on the try-it page for this API, on a deployment's page for its
    endpoint), an answered call whose predictions fall in the rule's confidence band (and
    classes, sampling rate and daily cap) has its image stored in one of the owner's
    datasets, with these predictions as suggestions for a person to label."""
    started = time.perf_counter()
    access, model, _, verdict = _kept_or(
        request,
        ("model", model_id),
        lambda: (*_caller_lookup(request, model_id, public=True), None),
    )
    return predict_forward(
        request=request,
        access=access,
        model=model,
        server_url=settings.INFERENCE_URL,
        collect_rule_id=model.collect_rule_id,
        started=started,
        verdict=verdict,
    )


# Dedicated endpoints: their own URL space, the same authentication as the API.
endpoints = NinjaAPI(
    title="Kestrel dedicated endpoints",
    version="1",
    auth=PREDICT_AUTH,
    urls_namespace="endpoints",
    docs_url=None,
    openapi_url=None,
)  # its error answers are the API's, installed by config.api


def predict_kept_forget() -> None:
    """Forget every lookup this process keeps for predict calls (tests: ids repeat)."""
    _kept.clear()
    _sessions_kept.clear()


@endpoints.post("/{slug}/predict")
def deployment_predict(request: HttpRequest, slug: str):
    """The deployment's model on one image; the URL stays when the model behind it changes.
    As the shared API, it keeps no image unless the deployment's collection rule is on."""
    started = time.perf_counter()

    def lookup() -> tuple[WorkspaceAccess, TrainedModel, Deployment]:
        deployment = _deployment_row(slug)
        if deployment is None:
            raise Http404("No such deployment.")
        try:
            access, model = _caller_lookup(request, deployment.model_id)
        except Http404:
            # Another team's endpoint is answered as an unknown one, not by its model's lookup.
            raise Http404("No such deployment.") from None
        if access.workspace.pk != deployment.workspace_id:
            raise Http404("No such deployment.")
        return access, model, deployment

    # The row kept with the caller's lookup: a restart on a new port, a swap or a stop moves
    # the deployments table's token, and the very next call reads it again.
    access, model, deployment, verdict = _kept_or(request, ("deployment", slug), lookup)
    server_url, server_secret = endpoint_route(deployment)  # from the row: any web process
    if deployment.state != DeploymentState.RUNNING or not server_url:
        return PredictRefused(
            503,
            f"The deployment is {deployment.get_state_display().lower()}; "
            + ("start it on its page." if not deployment.desired_running else "try shortly."),
        ).response()
    return predict_forward(
        request=request,
        access=access,
        model=model,
        server_url=server_url,
        server_secret=server_secret,
        server_name=deployment.server_name,
        deployment_id=deployment.pk,
        collect_rule_id=deployment.collect_rule_id,
        started=started,
        verdict=verdict,
    )


def _deployment_row(slug: str) -> Deployment | None:
    """The deployment behind /d/<slug>/, by a statement compiled once and prepared, as the
    caller lookup; kept with it (deployment_predict)."""
    return statement_first(_deployment_rows, probes=(_PROBE_SLUG,), values=(slug,))


_PROBE_SLUG = "/probe-slug/"  # no slug has a slash


def _deployment_rows(slug: str):
    return (
        Deployment.objects.only(
            *("id", "slug", "state", "port", "url", "placement", "desired_running"),
            *("model_id", "workspace_id"),
        )
        .annotate(
            collect_rule_id=Subquery(
                collection_rules_on().filter(deployment=OuterRef("pk")).values("pk")[:1]
            )
        )
        .filter(slug=slug)
    )


@endpoints.get("/{slug}/weights", auth=None, url_name="deployment_weights", include_in_schema=False)
def deployment_weights(request: HttpRequest, slug: str):
    """The model's weights, for a replica of this rented endpoint that is starting: the token it
    minted with its endpoint's secret (deploy/weights_fetch.py) is its only key. Whatever is
    wrong with the token or the endpoint, the answer is an unknown endpoint's."""
    scheme, _, token = request.headers.get("Authorization", "").partition(" ")
    deployment = endpoint_for_weights(slug=slug, token=token if scheme == "Bearer" else "")
    if deployment is None:
        raise Http404("No such deployment.")
    model = deployment.model
    return stored_file_response(
        key=model.weights_key, filename=weights_filename(model), size=model.weights_size
    )


@endpoints.exception_handler(Http404)
def _not_found(request, exc):
    return endpoints.create_response(request, {"detail": str(exc) or "Not found."}, status=404)


@endpoints.exception_handler(PermissionDenied)
def _denied(request, exc):
    return endpoints.create_response(request, {"detail": str(exc) or "Forbidden."}, status=403)
