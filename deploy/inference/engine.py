"""The inference engine: loaded models, micro-batching, and the numbers the endpoint pages show.

A few models stay loaded (least recently used goes first). Each loaded model has one runner: a
task on the event loop that takes the requests waiting for that model, predicts them as one
Ultralytics call in a worker thread, and hands each request its own image's answer. Only one
prediction per model runs at a time; batching is where throughput comes from. A lone request
never waits: the runner waits (at most `batch_wait_s`) only while other requests for the same
model are being read and decoded. Requests whose parameters or image sizes differ never share
a call, so an answer never depends on what else was asked at the same time (Ultralytics pads
a batch of equal-shaped images less than a mixed one).
"""

import asyncio
import importlib.util
import logging
import math
import os
import threading
import time
from collections import OrderedDict, deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from deploy.inference.formats import image_json
from deploy.inference.inputs import InferenceError, OutputParams, PredictParams, image_decode

logger = logging.getLogger("deploy.inference")

TASKS = ("detect", "segment", "pose", "obb", "classify", "semantic", "depth")
MODEL_SUFFIXES = (".pt", ".onnx")
LATENCY_WINDOW = 1000
STATS_MAX_MODELS = 256


def device_default() -> str:
    import torch

    return "cuda:0" if torch.cuda.is_available() else "cpu"


def _ultralytics_import() -> None:
    from annotation.assist.predict import _ultralytics_env

    _ultralytics_env()  # offline, quiet, restricted loading, before Ultralytics is imported
    import ultralytics  # noqa: F401


def model_load(path: Path, task: str | None, device: str) -> tuple[Any, str]:
    """A YOLO model from a local .pt (opened only through torch's restricted unpickler) or
    .onnx file, warmed up, and the device it predicts on; InferenceError(500) with a reason
    when it cannot be."""
    from training.weights_check import UnsafeWeights, weights_check

    _ultralytics_import()  # restricted loading first, for every .pt this process opens
    suffix = path.suffix.lower()
    if suffix == ".pt":
        try:
            weights_check(path)  # names what a refused file needs
        except UnsafeWeights as e:
            raise InferenceError(500, f"The weights file was refused: {e}.") from None
    elif importlib.util.find_spec("onnxruntime") is None:
        raise InferenceError(
            500, "ONNX models need onnxruntime, which this inference server has not installed."
        )
    else:
        import onnxruntime

        if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
            device = "cpu"
    from ultralytics import YOLO

    try:
        model = YOLO(str(path), task=task)
        # Builds the predictor now, so the first caller does not pay for it, and a model that
        # cannot predict fails here, once, with a reason.
        model.predict(
            np.zeros((64, 64, 3), np.uint8), imgsz=64, device=device, verbose=False, save=False
        )
    except Exception as e:  # noqa: BLE001 - any unloadable file gets one short answer
        logger.warning("model %s failed to load", path, exc_info=True)
        raise InferenceError(
            500, f"{path.name} could not be loaded as a YOLO model ({type(e).__name__}: {e})"
        ) from None
    return model, device


@dataclass
class ModelStats:
    """Counts and recent latencies of one model key, for as long as this process lives."""

    name: str = ""
    requests: int = 0
    errors: int = 0
    images: int = 0
    batches: int = 0
    latencies_ms: deque = field(default_factory=lambda: deque(maxlen=LATENCY_WINDOW))

    def snapshot(self, *, loaded: bool) -> dict[str, Any]:
        return {
            "name": self.name,
            "loaded": loaded,
            "requests": self.requests,
            "errors": self.errors,
            "images": self.images,
            "batches": self.batches,
            **latency_percentiles(self.latencies_ms),
        }


def latency_percentiles(latencies_ms) -> dict[str, float | None]:
    """p50_ms and p95_ms (nearest rank) of recent requests; None before the first."""
    ordered = sorted(latencies_ms)

    def percentile(p: float) -> float | None:
        if not ordered:
            return None
        return round(ordered[min(len(ordered) - 1, math.ceil(p * len(ordered)) - 1)], 2)

    return {"p50_ms": percentile(0.50), "p95_ms": percentile(0.95)}


@dataclass
class _Item:
    params: PredictParams
    output: OutputParams
    image: np.ndarray
    future: asyncio.Future


class _Runner:
    """One loaded model and the task that predicts its waiting requests, a batch at a time."""

    def __init__(self, engine: "Engine", key: str, model: Any, device: str):
        self.engine = engine
        self.key = key
        self.model = model
        self.device = device
        self.lock = threading.Lock()  # one prediction at a time, whoever calls
        self.queue: asyncio.Queue[_Item | None] = asyncio.Queue()
        self.incoming = 0  # requests for this model still being decoded
        self.closing = False
        self._arrival = asyncio.Event()
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"runner {key}")

    # Requests call these three.
    def expect(self) -> None:
        self.incoming += 1

    def cancel_expected(self) -> None:
        self.incoming -= 1
        self._arrival.set()
        if self.closing:
            self.queue.put_nowait(None)  # wake an idle runner so it can finish

    def submit(self, item: _Item) -> None:
        self.incoming -= 1
        self.queue.put_nowait(item)
        self._arrival.set()

    def close(self) -> None:
        """Evicted: answer what is queued or on its way, then let the model go."""
        self.closing = True
        self.queue.put_nowait(None)

    def _finished(self) -> bool:
        return self.closing and self.incoming == 0 and self.queue.empty()

    async def _run(self) -> None:
        try:
            while True:
                item = await self.queue.get()
                if item is None:
                    if self._finished():
                        break
                    continue
                batch = [item]
                try:
                    await self._gather(batch)
                    groups: dict[tuple, list[_Item]] = {}
                    for each in batch:
                        groups.setdefault((each.params, each.image.shape), []).append(each)
                    for items in groups.values():
                        await self._predict(items)
                except Exception:  # noqa: BLE001 - no caller may wait forever
                    logger.exception("runner of model %s failed", self.key)
                    for each in batch:
                        if not each.future.done():
                            each.future.set_exception(InferenceError(500, "The model failed."))
                if self._finished():
                    break
        finally:
            self.model = None

    async def _gather(self, batch: list[_Item]) -> None:
        """Add what is waiting, and what is being decoded for this model if it comes in time."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.engine.batch_wait_s
        while len(batch) < self.engine.batch_max:
            while len(batch) < self.engine.batch_max and not self.queue.empty():
                waiting = self.queue.get_nowait()
                if waiting is not None:
                    batch.append(waiting)
            if len(batch) >= self.engine.batch_max or self.incoming <= 0:
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._arrival.clear()
            try:
                await asyncio.wait_for(self._arrival.wait(), remaining)
            except TimeoutError:
                return

    async def _predict(self, items: list[_Item]) -> None:
        loop = asyncio.get_running_loop()
        stats = self.engine.stats_for(self.key)
        stats.batches += 1
        stats.images += len(items)
        self.engine.batches += 1
        self.engine.images += len(items)
        try:
            answers = await loop.run_in_executor(
                self.engine.pool, self._predict_sync, items[0].params, items
            )
        except Exception as e:  # noqa: BLE001 - each caller gets a short reason, never a traceback
            logger.warning("prediction failed for model %s", self.key, exc_info=True)
            error = InferenceError(500, f"The model could not predict ({type(e).__name__}: {e})")
            for item in items:
                if not item.future.done():
                    item.future.set_exception(error)
            return
        for item, answer in zip(items, answers, strict=True):
            if not item.future.done():  # the caller may have gone
                item.future.set_result(answer)

    def _predict_sync(self, params: PredictParams, items: list[_Item]) -> list[dict[str, Any]]:
        with self.lock:
            results = self.model.predict(
                [item.image for item in items],
                conf=params.conf,
                iou=params.iou,
                imgsz=params.imgsz,
                max_det=params.max_det,
                device=self.device,
                verbose=False,
                save=False,
            )
        return [
            image_json(
                result,
                normalize=item.output.normalize,
                decimals=item.output.decimals,
                mask_png=item.output.mask_png,
            )
            for item, result in zip(items, results, strict=True)
        ]


class Engine:
    """Loaded models, their runners and stats. Create and use it on one running event loop."""

    def __init__(
        self,
        *,
        max_models: int = 4,
        batch_max: int = 8,
        batch_wait_s: float = 0.005,
        device: str | None = None,
        max_pixels: int = 64_000_000,
    ):
        self.max_models = max(1, max_models)
        self.batch_max = max(1, batch_max)
        self.batch_wait_s = max(0.0, batch_wait_s)
        self.device = device or device_default()
        self.max_pixels = max_pixels
        # Predictions (one per model at a time) and loads; decoding has its own threads.
        self.pool = ThreadPoolExecutor(self.max_models + 2, thread_name_prefix="inference")
        self.decode_pool = ThreadPoolExecutor(
            min(8, (os.cpu_count() or 2) + 2), thread_name_prefix="decode"
        )
        self._runners: OrderedDict[str, _Runner] = OrderedDict()
        self._loading: dict[str, asyncio.Task] = {}
        self._stats: OrderedDict[str, ModelStats] = OrderedDict()
        self.batches = 0
        self.images = 0
        self.started = time.monotonic()

    @classmethod
    def from_env(cls, **overrides: Any) -> "Engine":
        """Limits from INFERENCE_MAX_MODELS, INFERENCE_BATCH_MAX, INFERENCE_BATCH_WAIT_MS;
        `overrides` that are not None win."""
        options: dict[str, Any] = {
            "max_models": int(os.environ.get("INFERENCE_MAX_MODELS") or 4),
            "batch_max": int(os.environ.get("INFERENCE_BATCH_MAX") or 8),
            "batch_wait_s": float(os.environ.get("INFERENCE_BATCH_WAIT_MS") or 5) / 1000,
        }
        options.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**options)

    def stats_for(self, key: str, name: str = "") -> ModelStats:
        stats = self._stats.get(key)
        if stats is None:
            stats = self._stats[key] = ModelStats(name=name)
            unloaded = [k for k in self._stats if k not in self._runners]
            for oldest in unloaded[: max(0, len(self._stats) - STATS_MAX_MODELS)]:
                del self._stats[oldest]
        elif name:
            stats.name = name
        self._stats.move_to_end(key)
        return stats

    async def start(self) -> None:
        """Import Ultralytics (seconds) before the first request needs it."""
        await asyncio.get_running_loop().run_in_executor(self.pool, _ultralytics_import)

    @property
    def models(self) -> list[str]:
        """Loaded model keys, least recently used first."""
        return list(self._runners)

    async def predict(
        self,
        *,
        key: str,
        path: Path,
        data: bytes,
        params: PredictParams,
        output: OutputParams,
        name: str = "",
        task: str | None = None,
    ) -> dict[str, Any]:
        """One image's answer (see formats.image_json), or InferenceError."""
        stats = self.stats_for(key, name)
        started = time.perf_counter()
        ok = False
        try:
            runner = await self._runner(key, path, task)
            while runner.closing:  # evicted by another load while this request waited
                runner = await self._runner(key, path, task)
            runner.expect()
            try:
                image = await asyncio.get_running_loop().run_in_executor(
                    self.decode_pool, image_decode, data, self.max_pixels
                )
            except BaseException:
                runner.cancel_expected()
                raise
            future = asyncio.get_running_loop().create_future()
            runner.submit(_Item(params, output, image, future))
            answer = await future
            ok = True
            return answer
        finally:
            stats.requests += 1
            stats.errors += 0 if ok else 1
            stats.latencies_ms.append((time.perf_counter() - started) * 1000)

    async def load(self, *, key: str, path: Path, task: str | None = None, name: str = "") -> None:
        """Load a model ahead of its first request (a dedicated endpoint's start)."""
        self.stats_for(key, name)
        await self._runner(key, path, task)

    async def _runner(self, key: str, path: Path, task: str | None) -> _Runner:
        runner = self._runners.get(key)
        if runner is not None:
            self._runners.move_to_end(key)
            return runner
        loading = self._loading.get(key)
        if loading is None:
            if not path.is_absolute():
                raise InferenceError(400, "X-Model-Path must be an absolute path.")
            if path.suffix.lower() not in MODEL_SUFFIXES:
                raise InferenceError(400, "X-Model-Path must name a .pt or .onnx file.")
            if not path.is_file():
                raise InferenceError(404, f"The model file {path.name} does not exist here.")
            if task is not None and task not in TASKS:
                raise InferenceError(400, f"X-Model-Task must be one of {', '.join(TASKS)}.")
            loading = asyncio.get_running_loop().create_task(self._load(key, path, task))
            self._loading[key] = loading
            loading.add_done_callback(lambda _: self._loading.pop(key, None))
        return await asyncio.shield(loading)

    async def _load(self, key: str, path: Path, task: str | None) -> _Runner:
        model, device = await asyncio.get_running_loop().run_in_executor(
            self.pool, model_load, path, task, self.device
        )
        runner = _Runner(self, key, model, device)
        self._runners[key] = runner
        while len(self._runners) > self.max_models:
            _, evicted = self._runners.popitem(last=False)
            evicted.close()
        return runner

    def stats(self) -> dict[str, Any]:
        """The process's counts and latency (all its models together: what a dedicated
        endpoint's page shows), then each model key's own."""
        loaded = set(self._runners)
        requests = sum(s.requests for s in self._stats.values())
        errors = sum(s.errors for s in self._stats.values())
        return {
            "requests": requests,
            "errors": errors,
            "error_rate": round(errors / requests, 4) if requests else None,
            **latency_percentiles(ms for s in self._stats.values() for ms in s.latencies_ms),
            "batches": self.batches,
            "images": self.images,
            "uptime_s": round(time.monotonic() - self.started, 1),
            "models": {
                key: stats.snapshot(loaded=key in loaded) for key, stats in self._stats.items()
            },
        }

    async def close(self) -> None:
        for runner in self._runners.values():
            runner.close()
        tasks = [runner.task for runner in self._runners.values()]
        self._runners.clear()
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.decode_pool.shutdown(wait=False, cancel_futures=True)
