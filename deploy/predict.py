"""A prediction request, from the caller to the model server and back.

Web processes check the caller, the plan's rate limit, the image's header and the parameters,
then forward the image to a model server process (deploy.inference): the shared one, or a
deployment's own, which decodes its every pixel and refuses a file an import would refuse,
with the import's reason. Torch never loads here."""

import base64
import binascii
import json
import logging
import time
from dataclasses import dataclass
from urllib.parse import quote

import httpx
from django.conf import settings
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse

from datasets.models import Task
from datasets.services.images import ImageRejected, image_check, image_header_check
from deploy.collection.decide import collection_offer
from deploy.fetch import FetchRefused, fetch_image
from deploy.inference.tokens import inference_token
from deploy.model_link import LinkError, model_server_post
from deploy.ratelimit import Verdict, rate_take
from deploy.usage import usage_count
from training.models import InspectState, JobState, TrainedModel
from training.services.models import model_local_path
from workspaces.models import ApiKey
from workspaces.selectors import WorkspaceAccess

IMGSZ_RANGE = (32, 1280)
logger = logging.getLogger(__name__)


class PredictRefused(Exception):
    def __init__(self, status: int, detail: str, headers: dict | None = None):
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers or {}

    def response(self) -> JsonResponse:
        response = JsonResponse({"detail": self.detail}, status=self.status)
        for name, value in self.headers.items():
            response[name] = value
        return response


@dataclass(frozen=True)
class Params:
    conf: float
    iou: float
    imgsz: int
    max_det: int
    mask: str = ""  # "png": a semantic model's class mask as one PNG too

    def query(self) -> dict:
        query = {"conf": self.conf, "iou": self.iou, "imgsz": self.imgsz, "max_det": self.max_det}
        return query | ({"mask": self.mask} if self.mask else {})


def _number(raw, name: str, cast, low, high, default):
    if raw in (None, ""):
        return default
    try:
        value = cast(raw)
    except (TypeError, ValueError):
        raise PredictRefused(400, f"{name} must be a number.") from None
    if isinstance(raw, bool) or not low <= value <= high:
        raise PredictRefused(400, f"{name} must be between {low} and {high}, not {raw}.")
    return value


def params_parse(values, model: TrainedModel) -> Params:
    mask = str(values.get("mask") or "").lower()
    if mask not in ("", "rle", "png"):
        raise PredictRefused(400, "mask must be rle or png.")
    if mask == "png" and model.task != Task.SEMANTIC:
        raise PredictRefused(
            400, "mask=png is for semantic segmentation models; this one answers per object."
        )
    return Params(
        conf=_number(values.get("conf"), "conf", float, 0.0001, 1.0, 0.25),
        iou=_number(values.get("iou"), "iou", float, 0.0001, 1.0, 0.7),
        imgsz=_number(values.get("imgsz"), "imgsz", int, *IMGSZ_RANGE, model.imgsz or 640),
        max_det=_number(values.get("max_det"), "max_det", int, 1, 1000, 300),
        mask="png" if mask == "png" else "",
    )


def _json_body(request: HttpRequest) -> dict:
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        raise PredictRefused(400, "The body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise PredictRefused(400, "Send a JSON object.")
    return body


def request_image(request: HttpRequest) -> tuple[bytes, dict]:
    """The image bytes and the parameters, from multipart `file`, JSON base64 `image`, or (when
    enabled) a `url`. Refuses a body over the size cap with 413."""
    cap = settings.PREDICT_MAX_BODY_BYTES
    length = request.headers.get("Content-Length")
    if length and length.isdigit() and int(length) > cap + 64 * 1024:
        raise PredictRefused(413, f"The request is over {cap // (1024 * 1024)} MB.")
    content_type = request.content_type or ""
    if content_type.startswith("multipart/form-data"):
        upload = request.FILES.get("file")
        values = {**request.GET.dict(), **request.POST.dict()}
        if upload is None:
            if values.get("url"):
                return _from_url(values["url"]), values
            raise PredictRefused(400, "Send the image as a multipart field named file.")
        if upload.size > cap:
            raise PredictRefused(413, f"The image is over {cap // (1024 * 1024)} MB.")
        return upload.read(), values
    if content_type == "application/json":
        body = _json_body(request)
        values = {**request.GET.dict(), **body}
        if body.get("image"):
            try:
                data = base64.b64decode(str(body["image"]), validate=True)
            except (binascii.Error, ValueError):
                raise PredictRefused(400, "image must be base64-encoded bytes.") from None
            if len(data) > cap:
                raise PredictRefused(413, f"The image is over {cap // (1024 * 1024)} MB.")
            return data, values
        if body.get("url"):
            return _from_url(body["url"]), values
        raise PredictRefused(400, "Send the image as base64 in image, or as a file.")
    raise PredictRefused(
        415, "Send multipart/form-data with a file field, or JSON with a base64 image."
    )


def _from_url(url) -> bytes:
    if not settings.PREDICT_URL_SOURCES:
        raise PredictRefused(
            400, "Image URLs are turned off on this server; send the image itself."
        )
    try:
        return fetch_image(str(url), max_bytes=settings.PREDICT_MAX_BODY_BYTES)
    except FetchRefused as exc:
        raise PredictRefused(400, str(exc)) from None
    except httpx.HTTPError as exc:
        raise PredictRefused(400, f"The image URL could not be fetched ({exc}).") from None


def model_ready(model: TrainedModel) -> None:
    if model.job_id and model.job.state not in (JobState.SUCCEEDED, JobState.STOPPED):
        raise PredictRefused(409, f"“{model.name}” is still training; try when its run ends.")
    if model.inspect_state == InspectState.PENDING:
        raise PredictRefused(409, f"“{model.name}” is still being checked; try in a minute.")
    if model.inspect_state == InspectState.FAILED:
        raise PredictRefused(
            400, f"“{model.name}” could not be loaded: {model.inspect_error or 'unknown error'}"
        )


def model_file(model: TrainedModel) -> tuple[str, str]:
    """The file a server loads (an ONNX export when there is one: ONNX Runtime is the faster
    runtime on a CPU) and its cache key. `model` comes from selectors.models_for_predict (found by
    workspaces.selectors.row_for_caller)."""
    weights = (model.weights_sha256 or "pt")[:16]
    # The weights' hash is in both keys: SQLite gives a deleted newest row's id to the next
    # row, and a server must never answer with the model that id named before.
    if model.onnx_id is not None:
        return (
            str(model_local_path(model, model.onnx_key)),
            f"{model.pk}:onnx:{model.onnx_id}:{weights}",
        )
    return str(model_local_path(model)), f"{model.pk}:{weights}"


def rate_who(access: WorkspaceAccess) -> str:
    """Whose calls the plan's limit counts: the key's, or the person's from the browser."""
    return f"key{access.api_key.pk}" if access.api_key else f"user{access.user.pk}"


def rate_limit_of(plan) -> int:
    return getattr(plan, "predict_requests_per_minute", 20) or 20


def rate_limited(access: WorkspaceAccess, plan, verdict: Verdict | None = None) -> None:
    """Count the call against the plan's limit (unless `verdict` says it was counted already,
    deploy.api's kept key lookup); PredictRefused(429) past it."""
    limit = rate_limit_of(plan)
    if verdict is None:
        verdict = rate_take(who=rate_who(access), limit=limit)
    if not verdict.allowed:
        raise PredictRefused(
            429,
            f"Rate limit: the {plan.name if plan else 'current'} plan allows {limit} calls a "
            f"minute per {'key' if access.api_key else 'person'}. "
            f"Try again in {verdict.retry_after} s.",
            {"Retry-After": str(verdict.retry_after)},
        )


class _CountedResponse(HttpResponse):
    """The model server's JSON passed through as it came (not decoded and encoded again), with
    the call counted once the answer has gone out: Django closes a response after sending it.
    `after`: the collection decision (deploy.collection), made then too, so it never slows the
    answer; it fails alone, logged."""

    def __init__(self, content: bytes, *, status: int, count, after=None):
        super().__init__(content, status=status, content_type="application/json")
        self._count, self._after = count, after

    def close(self) -> None:
        try:
            self._count()
            if self._after is not None:
                try:
                    self._after()
                except Exception:
                    logger.exception("collecting a prediction's image failed")
        finally:
            super().close()


class _Hops:
    """Milliseconds per hop of one call, as a Server-Timing header (browsers' developer tools
    show it; bench/predict.py adds them up): `auth` the caller lookup, then each `mark`."""

    def __init__(self, started: float, forward: float):
        self._last = forward
        self._parts = [("auth", forward - started)]
        self._started = started

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self._parts.append((name, now - self._last))
        self._last = now

    def header(self, request: HttpRequest) -> str:
        """`kept` at the end when the caller's lookup was one this process kept (deploy.api)."""
        total = time.perf_counter() - self._started
        parts = (*self._parts, ("view", total))
        kept = ", kept" if getattr(request, "predict_kept", False) else ""
        return ", ".join(f"{n};dur={s * 1000:.2f}" for n, s in parts) + kept


def _image_refused(check, data: bytes) -> None:
    """`check` (datasets.services.images) refusing `data`: a 400 with the import's reason."""
    try:
        check(data)
    except ImageRejected as exc:
        raise PredictRefused(400, f"The file is not a usable image: {exc}.") from None


def _database_release() -> None:
    """Give the request's pooled PostgreSQL connection back while the model works: a call needs
    the database only for its lookup, and holding a connection through the model's time made
    32 concurrent callers queue for a pool of 24 (bench/predict.py). Only with a pool: closing
    a persistent connection would make the next request connect afresh."""
    if connection.settings_dict.get("OPTIONS", {}).get("pool") and not connection.in_atomic_block:
        connection.close()


def predict_forward(
    *,
    request: HttpRequest,
    access: WorkspaceAccess,
    model: TrainedModel,
    server_url: str,
    server_name: str = "shared",
    server_secret: str = "",
    deployment_id: int | None = None,
    collect_rule_id: int | None = None,
    started: float | None = None,
    verdict: Verdict | None = None,
) -> HttpResponse:
    """The whole call: limits, image, parameters, the model server, usage. Errors are JSON
    `{"detail": ...}` with the right status; every call is counted, after its answer is sent.
    `model` comes from selectors.models_for_predict, found by
    workspaces.selectors.row_for_caller. `collect_rule_id`: the deployment's collection rule,
    when it is on (deploy.collection decides, after the answer, whether the image is kept).
    `verdict`: the rate limit's, when the call was counted with its caller's lookup.
    `started`: when the view began (its caller lookup is then timed too). The answer's
    Server-Timing header gives each hop's milliseconds (bench/predict.py reads them)."""
    forward = time.perf_counter()
    started = forward if started is None else started
    hops = _Hops(started, forward)
    key: ApiKey | None = access.api_key

    def count(ok: bool) -> None:
        usage_count(
            workspace_id=access.workspace.pk,
            api_key_id=key.pk if key else None,
            model_id=model.pk,
            deployment_id=deployment_id,
            ok=ok,
            ms=(time.perf_counter() - started) * 1000,
            images=1 if ok else 0,  # one image per call
        )

    try:
        rate_limited(access, model.workspace.plan, verdict)
        hops.mark("limit")
        model_ready(model)
        data, values = request_image(request)
        params = params_parse(values, model)
        hops.mark("body")
        # Its header here: not an image, a format not accepted, a bomb are never sent. Its every
        # pixel the model server decodes as an import would, and refuses a damaged file with
        # the import's reason (deploy.inference.inputs): not decoded here a second time.
        _image_refused(image_header_check, data)
        hops.mark("image")
        path, cache_key = model_file(model)
        _database_release()
        try:
            answer = model_server_post(
                f"{server_url}/predict",
                params=params.query(),
                content=data,
                headers={
                    "Authorization": "Bearer "
                    + inference_token(
                        # A rented endpoint's own secret (deploy.remote_endpoint)
                        secret=server_secret or settings.INFERENCE_TOKEN,
                        server=server_name,
                        action="predict",
                        model_key=cache_key,
                        model_path=path,
                    ),
                    "X-Model-Path": path,
                    "X-Model-Key": cache_key,
                    "X-Model-Name": quote(model.name),
                    "X-Model-Task": model.task,
                    "Content-Type": "application/octet-stream",
                },
            )
        except LinkError as exc:
            _image_refused(image_check, data)  # a bad image's reason before a server away
            logger.warning("model server %s: %s", server_url, exc)
            raise PredictRefused(
                503, "The model server is not answering; it may be starting. Try again shortly."
            ) from None
        hops.mark("model")
        if answer.status_code != 200 or not answer.headers.get("content-type", "").startswith(
            "application/json"
        ):
            try:
                detail = answer.json().get("detail")
            except (ValueError, AttributeError):
                raise PredictRefused(502, "The model server gave an unreadable answer.") from None
            raise PredictRefused(answer.status_code, detail or "The model failed.")
        after = None
        if collect_rule_id is not None:
            image, content = data, answer.content

            def after() -> None:
                collection_offer(
                    rule_id=collect_rule_id,
                    model=model,
                    deployment_id=deployment_id,
                    image=image,
                    answer=content,
                )

        response = _CountedResponse(
            answer.content, status=200, count=lambda: count(True), after=after
        )
        response["Server-Timing"] = hops.header(request)
        return response
    except PredictRefused as refused:
        response = refused.response()
        response["Server-Timing"] = hops.header(request)
        # Counted at once: a refusal is cheap, and its response is not ours to subclass.
        count(False)
        return response
