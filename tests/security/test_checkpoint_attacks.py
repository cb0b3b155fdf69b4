"""Issue 14, item 1: code execution from a model upload.

Before this issue the weights check let through every name under `ultralytics.nn.`, which
includes plain functions that open *another* file with the full unpickler
(`ultralytics.nn.tasks.torch_safe_load`, `torch_load`, `load_checkpoint`) and classes that do in
their constructor (`ultralytics.nn.autobackend.AutoBackend`). A refused upload stayed in storage,
so a second upload whose pickle called one of them on the first one's path ran the first one's
payload in the worker. Model classes could also be *called* from a pickle (their constructor
runs `eval` on a model recipe the file supplies), and a checkpoint made only of allowed classes
could carry a recipe that the trainer evaluates when it trains from it.

Every hostile file here is written opcode by opcode (protocol 2, as torch.save writes), so the
test never needs the attacker's Python objects; each payload creates a marker file, and the
tests assert it never appears, whichever process opens the file.
"""

import io
import json
import os
import shutil
import struct
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path

import pytest
from django.conf import settings
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import SimpleUploadedFile

from tests.training.conftest import project  # noqa: F401 (fixtures)
from training.models import TrainedModel

ROOT = Path(__file__).resolve().parents[2]
COCO8 = ROOT.parent / "shared" / "datasets" / "coco8"
IMAGE = COCO8 / "images" / "val" / "000000000036.jpg"

# Callables that, in today's Ultralytics, open the file they are given with the full unpickler.
LOADERS = [
    "ultralytics.nn.tasks.torch_safe_load",
    "ultralytics.nn.tasks.torch_load",
    "ultralytics.nn.tasks.load_checkpoint",
    "ultralytics.nn.autobackend.AutoBackend",
]


# ---------------------------------------------------------------- hostile checkpoints


def _global(dotted: str) -> bytes:
    module, name = dotted.rsplit(".", 1)
    return b"c" + f"{module}\n{name}\n".encode()


def _text(value: str) -> bytes:
    data = value.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _call(func: bytes, *args: bytes) -> bytes:
    """func(*args) when unpickled: MARK args TUPLE REDUCE."""
    return func + b"(" + b"".join(args) + b"tR"


def _dict(items: dict[str, bytes]) -> bytes:
    return b"}(" + b"".join(_text(k) + v for k, v in items.items()) + b"u"


def checkpoint_write(path: Path, body: bytes) -> Path:
    """A .pt as torch.save lays it out (a zip holding archive/data.pkl) whose pickle is `body`."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        zf.writestr("archive/data.pkl", b"\x80\x02" + body + b".")
        zf.writestr("archive/version", "3\n")
        zf.writestr("archive/byteorder", "little")
    path.write_bytes(buffer.getvalue())
    return path


def shell_checkpoint(path: Path, marker: Path) -> Path:
    """Stage one: runs `touch marker` through os.system when fully unpickled."""
    return checkpoint_write(path, _call(_global("posix.system"), _text(f"touch {marker}")))


def loader_checkpoint(path: Path, loader: str, target: Path) -> Path:
    """Stage two: calls `loader` on the first file's path when unpickled."""
    return checkpoint_write(path, _dict({"model": _call(_global(loader), _text(str(target)))}))


def constructor_checkpoint(path: Path, marker: Path) -> Path:
    """Calls DetectionModel(cfg) with a recipe whose activation Ultralytics would eval()."""
    recipe = _dict(
        {
            "activation": _text(f"__import__('os').system('touch {marker}')"),
            "nc": b"K\x01",
            "backbone": b"]",
            "head": b"]",
        }
    )
    return checkpoint_write(
        path, _dict({"model": _call(_global("ultralytics.nn.tasks.DetectionModel"), recipe)})
    )


@pytest.fixture
def marker(tmp_path) -> Path:
    path = tmp_path / f"pwned-{uuid.uuid4().hex[:8]}"
    yield path
    assert not path.exists(), "the attacker's code ran"


@pytest.fixture
def two_stages(tmp_path, marker) -> Path:
    """The second stage, calling torch_safe_load on a first stage that is still on disk."""
    first = shell_checkpoint(tmp_path / "first.pt", marker)
    return loader_checkpoint(tmp_path / "second.pt", LOADERS[0], first)


@pytest.fixture
def ultralytics_ready():
    from annotation.assist import _ultralytics_env

    _ultralytics_env()  # this process's own setup: offline, restricted loading


def _refusal(text: str, name: str) -> None:
    assert "refused" in text and name in text, text


# ---------------------------------------------------------------- the upload, end to end


@pytest.mark.django_db(transaction=True)
@pytest.mark.same_on_any_database("the restricted loader is what is tested, in the worker")
def test_two_stage_upload_runs_nothing_and_keeps_no_refused_file(
    team,
    project,  # noqa: F811 - the fixture imported above
    celery_worker_process,
    marker,
):
    """Both uploads go through the upload service and a real Celery worker's inspection (the
    worker subprocess that opens user weights), in the uploader's own project."""
    from training.services.models import model_upload
    from workspaces.selectors import workspace_access_for_user

    access = workspace_access_for_user(user=team.editor, slug=team.workspace.slug)
    work = Path(settings.TRAINING_DIR) / f"attack-{uuid.uuid4().hex[:8]}"
    work.mkdir(parents=True)

    def upload(path: Path) -> TrainedModel:
        data = SimpleUploadedFile(path.name, path.read_bytes())
        model = model_upload(access=access, project=project, name="", task="detect", upload=data)
        return model

    def inspected(model: TrainedModel) -> TrainedModel:
        import time

        deadline = time.monotonic() + 180
        while model.inspect_state == "pending":
            assert time.monotonic() < deadline, "the upload was never inspected"
            time.sleep(0.5)
            model.refresh_from_db()
        return model

    first = inspected(upload(shell_checkpoint(work / "first.pt", marker)))
    first_path = Path(default_storage.path(first.weights_key))
    second = inspected(upload(loader_checkpoint(work / "second.pt", LOADERS[0], first_path)))

    assert not marker.exists(), "the second upload ran the first one's payload"
    assert first.inspect_state == second.inspect_state == "failed"
    _refusal(first.inspect_error, "posix.system")
    _refusal(second.inspect_error, "ultralytics.nn.tasks.torch_safe_load")
    for model in (first, second):
        assert "deleted" in model.inspect_error
        assert not default_storage.exists(model.weights_key)


# ---------------------------------------------------------------- every place a .pt is opened


def _trainer_run(weights: Path, work: Path) -> str:
    """The trainer process (`python -m training.process.runner`) training from `weights`, as the
    supervisor starts it; the message of its last event."""
    import redis

    from training.ultralytics_env import ultralytics_env

    data = work / "coco8"
    shutil.copytree(COCO8, data)
    (data / "data.yaml").write_text(
        (data / "coco8.yaml").read_text().replace("path: #", f"path: {data} #", 1)
    )
    job = uuid.uuid4().hex[:12]
    spec = {
        "job_id": job,
        "attempt": 1,
        "task": "detect",
        "model": str(weights),
        "resume": None,
        "train_args": {
            "data": str(data / "data.yaml"),
            "epochs": 1,
            "imgsz": 64,
            "batch": 4,
            "device": "cpu",
            "workers": 0,
            "amp": False,
            "plots": False,
            "project": str(work / "runs"),
            "name": "run",
            "exist_ok": True,
        },
        "redis_url": settings.TRAINING_REDIS_URL,
        "stream": f"test-attack:{job}",
        "control_key": f"test-attack:{job}:control",
        "fence_key": f"test-attack:{job}:fence",
        "checkpoint_dir": str(work / "checkpoints"),
        "workdir": str(work),
        "system_sample_seconds": 60,
        "spool_drain_seconds": 0,  # no supervisor confirms what it stored: do not wait for one
        "env": ultralytics_env(work / "ultralytics-config", offline=True),
    }
    spec_path = work / "spec.json"
    spec_path.write_text(json.dumps(spec))
    # Outside pytest, as in production: Ultralytics behaves differently under pytest and CI.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_CURRENT_TEST", "CI")}
    subprocess.run(  # noqa: S603 - our own module
        [sys.executable, "-m", "training.process.runner", str(spec_path)],
        cwd=ROOT,
        env={**env, "CUDA_VISIBLE_DEVICES": ""},
        timeout=300,
        check=False,
        capture_output=True,
    )
    client = redis.Redis.from_url(settings.TRAINING_REDIS_URL)
    try:
        events = client.xrange(spec["stream"])
    finally:
        client.delete(spec["stream"])
    kind, data = events[-1][1][b"t"].decode(), json.loads(events[-1][1][b"d"])
    assert kind == "error", (kind, data)
    return data["message"]


def _model_server_load(weights: Path) -> str:
    """What the model server process answers when asked to load `weights`."""
    script = (
        "import django, json, sys\n"
        "django.setup()\n"
        "from pathlib import Path\n"
        "from deploy.inference.engine import model_load\n"
        "from deploy.inference.inputs import InferenceError\n"
        "try:\n"
        "    model_load(Path(sys.argv[1]), None, 'cpu')\n"
        "except InferenceError as e:\n"
        "    print(json.dumps({'detail': e.detail}))\n"
    )
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", script, str(weights)],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.test_settings"},
        timeout=300,
        check=False,
        capture_output=True,
        text=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])["detail"]


def _worker(*args: str) -> str:
    from training.weights_process import worker_run

    return worker_run(list(args), timeout=300).error


def _assist(weights: Path) -> str:
    from annotation.assist import AssistError, model_predict

    with pytest.raises(AssistError) as refused:
        model_predict(weights, [IMAGE])
    return str(refused.value)


def _sam(weights: Path) -> str:
    from annotation.assist import AssistError, sam_polygon

    named = weights.with_name("mobile_sam.pt")
    shutil.copyfile(weights, named)
    with pytest.raises(AssistError) as refused:
        sam_polygon(named, IMAGE, points=[[0.5, 0.5]])
    return str(refused.value)


@pytest.mark.parametrize("where", ["trainer", "model server", "export", "inspection", "assist"])
def test_a_second_stage_runs_nothing_wherever_weights_are_opened(where, two_stages, tmp_path):
    answer = {
        "trainer": lambda: _trainer_run(two_stages, tmp_path),
        "model server": lambda: _model_server_load(two_stages),
        "export": lambda: _worker("export", str(two_stages), "onnx", str(tmp_path / "out"), "64"),
        "inspection": lambda: _worker("inspect", str(two_stages)),
        "assist": lambda: _assist(two_stages),
    }[where]()
    _refusal(answer, "ultralytics.nn.tasks.torch_safe_load")


def test_sam_assist_refuses_a_second_stage(two_stages, ultralytics_ready):
    _refusal(_sam(two_stages), "ultralytics.nn.tasks.torch_safe_load")


@pytest.mark.parametrize("loader", LOADERS)
def test_no_loader_is_admitted_by_the_inspection(loader, tmp_path, marker):
    first = shell_checkpoint(tmp_path / "first.pt", marker)
    second = loader_checkpoint(tmp_path / "second.pt", loader, first)
    _refusal(_worker("inspect", str(second)), loader)


def test_a_model_class_is_never_called_from_a_pickle(tmp_path, marker):
    """DetectionModel is on the list (every detect checkpoint holds one), but a checkpoint only
    ever restores it from saved state; calling it would run its constructor on a recipe the
    file supplies, whose activation Ultralytics evaluates."""
    hostile = constructor_checkpoint(tmp_path / "recipe.pt", marker)
    answer = _worker("inspect", str(hostile))
    _refusal(answer, "ultralytics.nn.tasks.DetectionModel")
    assert "constructor" in answer


def test_the_restricted_loader_alone_stops_them(tmp_path, marker):
    """Without Kestrel's pre-check: torch's restricted unpickler, forced for every torch.load of
    the process (Ultralytics' own loader asks for weights_only=False), opens none of them, and
    a model class called with a recipe builds no code from it."""
    first = shell_checkpoint(tmp_path / "first.pt", marker)
    files = [first, constructor_checkpoint(tmp_path / "recipe.pt", marker)]
    files += [loader_checkpoint(tmp_path / f"{i}.pt", x, first) for i, x in enumerate(LOADERS)]
    script = (
        "import json, sys\n"
        "from training.weights_check import checkpoint_loading_restrict\n"
        "checkpoint_loading_restrict()\n"
        "import torch\n"
        "from ultralytics.nn.tasks import torch_safe_load\n"
        "out = []\n"
        "for path in sys.argv[1:]:\n"
        "    for load in (lambda p: torch.load(p, weights_only=False), torch_safe_load):\n"
        "        try:\n"
        "            load(path)\n"
        "            out.append('loaded')\n"
        "        except Exception as e:\n"
        "            out.append(type(e).__name__)\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", script, *map(str, files)],
        cwd=ROOT,
        env={**os.environ, "YOLO_CONFIG_DIR": str(tmp_path / "config"), "YOLO_OFFLINE": "1"},
        timeout=300,
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcomes = json.loads(done.stdout.strip().splitlines()[-1])
    assert "loaded" not in outcomes, outcomes


def test_training_from_a_model_whose_recipe_runs_code_runs_nothing(tmp_path, ultralytics_ready):
    """A checkpoint made only of listed classes passes every pickle check, yet it carries the
    recipe (model.yaml) the trainer rebuilds the model from; its activation must not be
    evaluated."""
    from ultralytics import YOLO

    marker = tmp_path / "pwned-by-recipe"
    yolo = YOLO("yolo11n.yaml")
    yolo.model.yaml["activation"] = f"__import__('os').system('touch {marker}')"
    weights = tmp_path / "recipe.pt"
    yolo.save(weights)
    from training.weights_check import weights_check

    weights_check(weights)  # nothing in its pickle is forbidden
    message = _trainer_run(weights, tmp_path)
    assert not marker.exists(), "the trainer evaluated the checkpoint's recipe"
    assert "activation" in message, message


# ---------------------------------------------------------------- the list itself


@pytest.mark.parametrize(
    "name",
    [
        # Functions of modules whose classes are listed: a module admits nothing by itself.
        "ultralytics.nn.tasks.torch_safe_load",
        "ultralytics.nn.tasks.yaml_model_load",
        "ultralytics.nn.modules.conv.autopad",
        "torch.nn.modules.module.register_module_forward_hook",
        # Classes of those modules that are not on the list: they load, download or import.
        "ultralytics.nn.autobackend.AutoBackend",
        "ultralytics.nn.modules.block.TorchVision",
        "ultralytics.nn.tasks.WorldModel",
        "ultralytics.nn.text_model.MobileCLIP",
        "torch.nn.modules.module.Module",
        # Loaders and evaluators elsewhere.
        "torch.load",
        "torch.jit.load",
        "torch.hub.load",
        "torch.hub.load_state_dict_from_url",
        "builtins.exec",
        "builtins.getattr",
        "importlib.import_module",
        "numpy.load",
        "ultralytics.utils.checks.check_requirements",
    ],
)
def test_a_name_off_the_list_is_refused_and_named(name, tmp_path, ultralytics_ready):
    from training.weights_check import UnsafeWeights, weights_check

    path = checkpoint_write(tmp_path / "named.pt", _dict({"model": _call(_global(name))}))
    with pytest.raises(UnsafeWeights) as refused:
        weights_check(path)
    assert name in str(refused.value)


def test_what_torch_allows_for_its_own_modules_is_refused_too(tmp_path, ultralytics_ready):
    """torch.distributed adds the builtin exceptions and DTensor to torch's safe globals when
    imported (the trainer imports it); no YOLO checkpoint holds them, and a file passes or
    not whatever the process imported."""
    import torch.distributed.tensor  # noqa: F401

    from training.weights_check import UnsafeWeights, weights_check

    for name in ("builtins.ValueError", "torch.distributed.device_mesh.DeviceMesh"):
        path = checkpoint_write(tmp_path / "torch.pt", _dict({"model": _call(_global(name))}))
        with pytest.raises(UnsafeWeights, match=name.replace(".", r"\.")):
            weights_check(path)


def test_a_listed_class_held_as_a_value_is_refused(tmp_path, ultralytics_ready):
    """A class is only ever the type of an object restored from the file; held bare (as a
    layer's activation, a transform, a hook), whatever calls it would run its constructor."""
    from training.weights_check import UnsafeWeights, weights_check

    path = checkpoint_write(
        tmp_path / "bare.pt", _dict({"model": _global("ultralytics.nn.tasks.DetectionModel")})
    )
    with pytest.raises(UnsafeWeights, match=r"ultralytics\.nn\.tasks\.DetectionModel"):
        weights_check(path)


def test_the_list_holds_classes_only_and_none_that_loads(ultralytics_ready):
    from training.weights_check import CHECKPOINT_CLASSES, checkpoint_classes

    classes = checkpoint_classes()
    assert len(classes) == len(CHECKPOINT_CLASSES) == len(set(CHECKPOINT_CLASSES))
    for name, cls in zip(CHECKPOINT_CLASSES, classes, strict=True):
        assert isinstance(cls, type), name
        assert f"{cls.__module__}.{cls.__qualname__}" == name  # as a pickle names it
    names = set(CHECKPOINT_CLASSES)
    for dangerous in (
        "ultralytics.nn.autobackend.AutoBackend",
        "ultralytics.nn.modules.block.TorchVision",
        "ultralytics.nn.tasks.WorldModel",
        "ultralytics.nn.tasks.YOLOEModel",
        "torch.nn.modules.module.Module",
    ):
        assert dangerous not in names
    assert not any(name.startswith("ultralytics.nn.text_model") for name in names)


# ---------------------------------------------------------------- published weights' getattr


def test_published_weights_holding_a_heads_forward_still_load(tmp_path, ultralytics_ready):
    """Heads of older Ultralytics releases (the published YOLOv8/YOLO11 segment, pose, obb and
    classify weights) hold `Detect.forward` as an attribute: pickled as
    builtins.getattr(Detect, "forward"). Such a file passes and loads, and predicts."""
    import torch
    from ultralytics import YOLO
    from ultralytics.nn.modules.head import Detect

    from training.weights_check import pickle_globals, weights_check

    model = YOLO("yolo11n-seg.yaml").model
    model.model[-1].detect = Detect.forward
    path = tmp_path / "published-like.pt"
    torch.save({"model": model.half(), "train_args": {}, "epoch": -1}, path)
    with zipfile.ZipFile(path) as zf:
        pickled = zf.read(next(n for n in zf.namelist() if n.endswith("data.pkl")))
    assert ("__builtin__", "getattr") in pickle_globals(pickled)  # protocol 2, as published
    weights_check(path)
    loaded = YOLO(str(path))
    assert loaded.model.model[-1].detect is Detect.forward
    assert loaded.predict(str(IMAGE), imgsz=64, verbose=False)


GETATTR = "builtins.getattr"
HEAD = "ultralytics.nn.modules.head.Detect"


@pytest.mark.parametrize(
    ("what", "body"),
    [
        ("a private name", _call(_global(GETATTR), _global(HEAD), _text("__init__"))),
        (
            "another method",
            _call(_global(GETATTR), _global("ultralytics.nn.tasks.DetectionModel"), _text("load")),
        ),  # noqa: E501
        (
            "an unlisted class",
            _call(
                _global(GETATTR),
                _global("ultralytics.nn.autobackend.AutoBackend"),
                _text("forward"),
            ),
        ),  # noqa: E501
        ("not a class", _call(_global(GETATTR), _text("os"), _text("system"))),
        (
            "calling what it got",
            _call(_call(_global(GETATTR), _global(HEAD), _text("forward")), _text("x")),
        ),  # noqa: E501
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_getattr_in_a_checkpoint_reaches_nothing_but_a_listed_layers_forward(
    what, body, tmp_path, ultralytics_ready
):
    import pickle

    import torch

    from training.weights_check import UnsafeWeights, weights_check

    path = checkpoint_write(tmp_path / "getattr.pt", _dict({"model": body}))
    with pytest.raises(UnsafeWeights):
        weights_check(path)
    # torch's restricted unpickler, with Kestrel's list and getattr, refuses it by itself.
    with pytest.raises(pickle.UnpicklingError):
        torch.load(path, weights_only=True)


def test_checkpoints_keeping_numpy_figures_still_load(tmp_path, ultralytics_ready):
    """Older releases saved best_fitness and metrics as numpy scalars: a dtype and numpy's
    scalar builder, which builds the number and nothing else."""
    import numpy
    import torch
    from ultralytics import YOLO

    from training.weights_check import weights_check

    path = tmp_path / "numpy-figures.pt"
    model = YOLO("yolo11n.yaml").model.half()
    torch.save({"model": model, "best_fitness": numpy.float64(0.5), "epoch": -1}, path)
    weights_check(path)
    assert torch.load(path, weights_only=True)["best_fitness"] == 0.5
    assert YOLO(str(path)).predict(str(IMAGE), imgsz=64, verbose=False)
