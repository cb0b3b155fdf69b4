"""The inference server: one process, one event loop, serving YOLO predictions over HTTP to
Kestrel's web processes (the shared API) or to one deployment's callers (a dedicated endpoint).

    python -m deploy.inference --host 127.0.0.1 --port 8765 [--name shared|deployment-<slug>]

Routes (JSON; errors are {"detail": "..."}, never a traceback):
  GET  /health   no auth. {"ok", "pid", "name", "models": [loaded keys], "device"}
  GET  /stats    auth. requests, errors, error_rate, p50_ms, p95_ms of the whole process, then
                 per model key: requests, errors, images, batches, p50_ms, p95_ms.
  POST /predict  auth. Body: the image's bytes. Query: conf, iou, imgsz, max_det (and the
                 Platform's normalize, decimals; mask=png for a semantic model's class mask
                 as one PNG besides its RLE, see formats). Headers: X-Model-Path (absolute
                 .pt/.onnx), X-Model-Key (cache key), X-Model-Name (shown in the answer; may be
                 percent-encoded), optional X-Model-Task (needed for an .onnx without metadata).
                 400 bad parameters or image, 401 bad token, 404 model file missing, 413 body
                 too large, 500 the model cannot be loaded or fails to predict.
Auth: `Authorization: Bearer <token>`, a token minted for this one call by
deploy.inference.tokens (this server's name, the action, the model; a minute's life), signed
with the secret web processes and model servers share (settings.INFERENCE_TOKEN).

A plain ASGI app under uvicorn: three routes need no framework, and nothing else is imported
into a process whose memory belongs to models.
"""

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote

from deploy.inference.engine import Engine
from deploy.inference.formats import response_json
from deploy.inference.inputs import InferenceError, params_parse
from deploy.inference.tokens import inference_token_refusal

logger = logging.getLogger("deploy.inference")

MAX_BODY_BYTES = 20 * 1024 * 1024


class InferenceApp:
    """The ASGI application. The engine is made at startup, on the server's own loop."""

    def __init__(
        self,
        *,
        token: str,
        name: str,
        engine_options: dict[str, Any] | None = None,
        preload: dict[str, Any] | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
    ):
        if not token:
            raise ValueError("The inference server needs a token (INFERENCE_TOKEN).")
        self.secret = token
        self.name = name
        self.engine_options = engine_options or {}
        self.preload = preload
        self.max_body_bytes = max_body_bytes
        self.engine: Engine | None = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        try:
            status, body = await self._route(scope, receive)
        except InferenceError as e:
            status, body = e.status, {"detail": e.detail}
        except Exception:  # noqa: BLE001 - logged here; the caller gets a short answer
            logger.exception("inference request failed")
            status, body = 500, {"detail": "The inference server failed on this request."}
        await _respond(send, status, body)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    self.engine = Engine.from_env(**self.engine_options)
                    await self.engine.start()
                    if self.preload:
                        await self.engine.load(**self.preload)
                except Exception as e:  # noqa: BLE001 - the process must stop, saying why
                    detail = e.detail if isinstance(e, InferenceError) else repr(e)
                    logger.error("inference server %s could not start: %s", self.name, detail)
                    await send({"type": "lifespan.startup.failed", "message": detail})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.engine is not None:
                    await self.engine.close()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _route(self, scope, receive) -> tuple[int, dict[str, Any]]:
        method, path = scope["method"], scope["path"]
        if path == "/health" and method in ("GET", "HEAD"):
            return 200, self._health()
        if path not in ("/stats", "/predict"):
            return 404, {"detail": "Not found."}
        expected = "POST" if path == "/predict" else "GET"
        if method != expected:
            return 405, {"detail": f"Use {expected}."}
        headers = _headers(scope)
        if path == "/stats":
            self._authorise(headers, action="stats")
            return 200, {"name": self.name, "pid": os.getpid(), **self.engine.stats()}
        return 200, await self._predict(scope, receive, headers)

    def _health(self) -> dict[str, Any]:
        engine = self.engine
        return {
            "ok": engine is not None,
            "pid": os.getpid(),
            "name": self.name,
            "models": engine.models if engine else [],
            "device": engine.device if engine else "",
        }

    def _authorise(self, headers: dict[str, str], *, action: str, **model) -> None:
        scheme, _, credentials = headers.get("authorization", "").partition(" ")
        refusal = inference_token_refusal(
            credentials.strip() if scheme.lower() == "bearer" else "",
            secret=self.secret,
            server=self.name,
            action=action,
            **model,
        )
        if refusal:
            raise InferenceError(401, refusal)

    async def _predict(self, scope, receive, headers: dict[str, str]) -> dict[str, Any]:
        started = time.perf_counter()
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        params, output = params_parse(query)
        key = headers.get("x-model-key", "").strip()
        raw_path = headers.get("x-model-path", "").strip()
        if not key or len(key) > 200:
            raise InferenceError(400, "X-Model-Key is required (at most 200 characters).")
        if not raw_path:
            raise InferenceError(400, "X-Model-Path is required.")
        self._authorise(headers, action="predict", model_key=key, model_path=raw_path)
        path = Path(raw_path)
        name = unquote(headers.get("x-model-name", "")) or path.name
        task = headers.get("x-model-task", "").strip().lower() or None
        data = await _body(receive, self.max_body_bytes)
        image = await self.engine.predict(
            key=key, path=path, data=data, params=params, output=output, name=name, task=task
        )
        return response_json([image], model_name=name, seconds=time.perf_counter() - started)


def _headers(scope) -> dict[str, str]:
    headers = {}
    for raw_name, raw_value in scope.get("headers", []):
        try:
            value = raw_value.decode("utf-8")
        except UnicodeDecodeError:
            value = raw_value.decode("latin-1")
        headers[raw_name.decode("latin-1").lower()] = value
    return headers


async def _body(receive, limit: int) -> bytes:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise InferenceError(400, "The caller went away before sending the whole image.")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise InferenceError(413, f"The image is larger than {limit // (1024 * 1024)} MB.")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _respond(send, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body, separators=(",", ":")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m deploy.inference", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--name", default="shared", help="shared, or deployment-<slug>")
    parser.add_argument("--device", help="cpu or cuda:N (default: cuda:0 when there is one)")
    parser.add_argument("--max-models", type=int, help="models kept loaded (default 4)")
    parser.add_argument("--batch-max", type=int, help="images per prediction (1: no batching)")
    parser.add_argument("--batch-wait-ms", type=float, help="longest wait for a batch to fill")
    parser.add_argument("--model-path", help="load this model at start (a dedicated endpoint)")
    parser.add_argument("--model-key", help="its X-Model-Key")
    parser.add_argument("--model-name", default="")
    parser.add_argument(
        "--model-task", help="detect, segment, pose, obb, classify, semantic or depth"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()  # settings only: this process never touches the database
    import uvicorn
    from django.conf import settings

    token = settings.INFERENCE_TOKEN or os.environ.get("INFERENCE_TOKEN", "")
    preload = None
    if args.model_path:
        if not args.model_key:
            sys.exit("--model-path needs --model-key")
        preload = {
            "key": args.model_key,
            "path": Path(args.model_path),
            "task": args.model_task,
            "name": args.model_name,
        }
    app = InferenceApp(
        token=token,
        name=args.name,
        engine_options={
            "device": args.device,
            "max_models": args.max_models,
            "batch_max": args.batch_max,
            "batch_wait_s": None if args.batch_wait_ms is None else args.batch_wait_ms / 1000,
            "max_pixels": getattr(settings, "DATASET_MAX_IMAGE_PIXELS", 64_000_000),
        },
        preload=preload,
        max_body_bytes=getattr(settings, "PREDICT_MAX_BODY_BYTES", MAX_BODY_BYTES),
    )
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)
    logger.info("inference server %s starting on %s:%s", args.name, args.host, args.port)
    server.run()
    if not server.started:
        sys.exit(1)


if __name__ == "__main__":
    main()
