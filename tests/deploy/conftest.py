"""Deploy fixtures: real YOLO models of every task, trained here once per test session on the
shared tiny datasets, and the inference server as a real process.

`yolo_models`: task -> Path of a .pt trained 1 epoch at imgsz 64 (32 for classify) from the
task's YAML (nothing can be downloaded here), once per test run for all its workers. An
untrained-looking model finds almost nothing, so `confident_yolo_models` are the same
checkpoints with their class-0 score biased up (as tests/annotation/weights.py does): every
image gets results, computed by Ultralytics as usual.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.run_cache import run_shared
from tests.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "datasets"

# task -> (dataset folder, model YAML, imgsz)
TRAIN_SPECS = {
    "detect": ("coco8", "yolo11n.yaml", 64),
    "segment": ("coco8-seg", "yolo11n-seg.yaml", 64),
    "pose": ("coco8-pose", "yolo11n-pose.yaml", 64),
    "obb": ("dota8", "yolo11n-obb.yaml", 64),
    "classify": ("imagenet10", "yolo11n-cls.yaml", 32),
}


def tiny_model_train(task: str, work: Path) -> Path:
    """A real model of `task`, trained one epoch on CPU on a copy of its shared dataset (the
    shared folder stays untouched: Ultralytics writes label caches beside the labels)."""
    from annotation.assist.predict import _ultralytics_env

    _ultralytics_env()  # offline, before the first import of Ultralytics
    from ultralytics import YOLO

    folder, yaml_name, imgsz = TRAIN_SPECS[task]
    data_dir = work / "data" / folder
    shutil.copytree(SHARED / folder, data_dir)
    if task == "classify":
        data = data_dir
    else:
        text = (data_dir / f"{folder}.yaml").read_text()
        data = data_dir / "data.yaml"
        data.write_text(text.replace("path: #", f"path: {data_dir} #", 1))
    YOLO(yaml_name).train(
        data=str(data),
        epochs=1,
        imgsz=imgsz,
        batch=8,
        workers=0,
        amp=False,
        device="cpu",
        project=str(work / "runs"),
        name=task,
        exist_ok=True,
        plots=False,
        val=False,
        seed=0,
        verbose=False,
    )
    return work / "runs" / task / "weights" / "last.pt"


def confident_copy(weights: Path, target: Path, class_bias: float = 2.0) -> Path:
    """`weights` with every class score but class 0's pushed down and class 0's up: boxes,
    masks, keypoints and angles stay the model's own."""
    import torch
    from ultralytics import YOLO

    yolo = YOLO(str(weights))
    head = yolo.model.model[-1]
    with torch.no_grad():
        for branch in head.cv3:  # per scale: the class scores' last convolution
            branch[-1].bias.fill_(-12.0)
            branch[-1].bias[0] = class_bias
    yolo.save(target)
    return target


def tiny_model(task: str) -> Path:
    """tiny_model_train's model of `task`, trained once per test run (tests/run_cache.py)."""
    return run_shared(f"tiny-{task}.pt", lambda work: tiny_model_train(task, work))


@pytest.fixture(scope="session")
def yolo_models() -> dict[str, Path]:
    return {task: tiny_model(task) for task in TRAIN_SPECS}


@pytest.fixture(scope="session")
def confident_yolo_models(yolo_models, tmp_path_factory) -> dict[str, Path]:
    """detect, segment, pose, obb: sure of class 0 everywhere; classify as trained (its top 5
    are always answered)."""
    work = tmp_path_factory.mktemp("confident-models")
    models = {"classify": yolo_models["classify"]}
    for task in ("detect", "segment", "pose", "obb"):
        models[task] = confident_copy(yolo_models[task], work / f"{task}-confident.pt")
    return models


@dataclass
class InferenceServer:
    """A `python -m deploy.inference` process on a free port of this machine."""

    url: str
    token: str
    proc: subprocess.Popen
    log: Path
    name: str = "shared"

    def auth(self, action: str = "predict", key: str = "", path: str = "") -> dict:
        """The Authorization header a web process sends this server for one call."""
        from deploy.inference.tokens import inference_token

        token = inference_token(
            secret=self.token, server=self.name, action=action, model_key=key, model_path=path
        )
        return {"Authorization": f"Bearer {token}"}

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=5)


def inference_server_start(
    log_dir: Path, *args: str, env: dict | None = None, timeout: float = 60
) -> InferenceServer:
    """Start the server with extra command-line `args` and environment; return once /health
    answers. The token is this test run's settings.INFERENCE_TOKEN."""
    from django.conf import settings

    port = free_port()
    log = log_dir / f"inference-{port}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "deploy.inference", "--host", "127.0.0.1", "--port", str(port),
         *args],
        cwd=ROOT,
        env={**os.environ, "INFERENCE_TOKEN": settings.INFERENCE_TOKEN, **(env or {})},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    server = InferenceServer(
        url=f"http://127.0.0.1:{port}",
        token=settings.INFERENCE_TOKEN,
        proc=proc,
        log=log,
        name=args[args.index("--name") + 1] if "--name" in args else "shared",
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"inference server exited {proc.returncode}:\n{log.read_text()}")
        try:
            if httpx.get(f"{server.url}/health", timeout=1).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.stop()
    raise AssertionError(f"inference server did not answer /health:\n{log.read_text()}")


@pytest.fixture(scope="session")
def inference_server(tmp_path_factory):
    """The shared inference server, one per test session, at most 3 models loaded."""
    server = inference_server_start(
        tmp_path_factory.mktemp("inference"), "--name", "shared", env={"INFERENCE_MAX_MODELS": "3"}
    )
    yield server
    server.stop()


def predict_counters_clear() -> None:
    """No rate-limit count, pending usage or cached row left by another test."""
    from django.core.cache import cache

    from deploy.ratelimit import _redis
    from deploy.usage import PENDING

    r = _redis()
    for key in r.scan_iter("kestrel:ratelimit:*"):
        r.delete(key)
    r.delete(PENDING)
    cache.clear()
