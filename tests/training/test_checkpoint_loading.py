"""Real checkpoints of every task and family Kestrel trains still open under the restricted
loader: trained for real (tests/training/checkpoint_matrix.py, one process, all of it under
`checkpoint_loading_restrict`), then checked, loaded and used here. The list of classes is
exactly what those checkpoints hold, no more."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.training.checkpoint_matrix import TASKS, families

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT.parent / "shared" / "datasets" / "coco8" / "images" / "val" / "000000000036.jpg"
RUNS = [f"{family}{suffix}" for task, (_, suffix) in TASKS.items() for family in families(task)]
ASSIST_TASKS = ("detect", "segment", "classify", "pose", "obb")  # what labelling assist offers
KINDS = ("last_optimizer", "best")


@pytest.fixture(scope="session")
def matrix(tmp_path_factory) -> dict:
    """17 tiny runs and a resume, trained once per test session in a process of their own."""
    work = tmp_path_factory.mktemp("checkpoint-matrix")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_CURRENT_TEST", "CI")}
    env.update(YOLO_OFFLINE="1", YOLO_AUTOINSTALL="0", YOLO_CONFIG_DIR=str(work / "config"))
    done = subprocess.run(  # noqa: S603 - our own module
        [sys.executable, "-m", "tests.training.checkpoint_matrix", str(work)],
        cwd=ROOT,
        env={**env, "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads((work / "manifest.json").read_text())


@pytest.fixture(scope="module")
def restricted():
    from annotation.assist import _ultralytics_env

    _ultralytics_env()  # this process: offline, restricted loading


def test_every_task_and_family_trained_and_resumed_under_the_restricted_loader(matrix):
    from training.weights_check import (
        CHECKPOINT_CLASSES,
        CHECKPOINT_GETATTR,
        NUMPY_DTYPE,
        NUMPY_SCALAR,
    )

    assert sorted(matrix["runs"]) == sorted(RUNS)
    for run in matrix["runs"].values():
        assert Path(run["last_optimizer"]).is_file() and Path(run["best"]).is_file()
    resume = matrix["resume"]
    assert resume["start_epoch"] == 1 and resume["epochs"] == [2]  # it went on from epoch 1
    assert Path(resume["best"]).is_file()
    # Ultralytics registers more classes for a checkpoint that names more; nothing was added
    # beyond Kestrel's list but what torch's own modules register when imported.
    ours = {*CHECKPOINT_CLASSES, CHECKPOINT_GETATTR, NUMPY_DTYPE, *NUMPY_SCALAR}
    added = set(matrix["safe_globals"]) - ours
    theirs = ("torch.", "builtins.", "traceback.", "numpy.dtypes.")  # numpy.dtypes: ours too
    assert all(name.startswith(theirs) for name in added), added


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("run", RUNS)
def test_each_checkpoint_passes_the_check_and_loads(matrix, restricted, run, kind):
    import torch
    from ultralytics import YOLO

    from training.weights_check import weights_check

    path = Path(matrix["runs"][run][kind])
    weights_check(path)
    checkpoint = torch.load(path, weights_only=False)  # restricted all the same
    assert (checkpoint["optimizer"] is not None) == (kind == "last_optimizer")
    yolo = YOLO(str(path))
    assert yolo.task == matrix["runs"][run]["task"]
    (result,) = yolo.predict(str(IMAGE), imgsz=64, device="cpu", verbose=False)
    assert result.names


def test_the_list_is_what_real_checkpoints_hold(matrix, restricted):
    """Every listed class is held by at least one real checkpoint: nothing is on the list
    "just in case"."""
    import zipfile

    from training.weights_check import CHECKPOINT_CLASSES, pickle_globals

    held: set[str] = set()
    for run in matrix["runs"].values():
        for kind in KINDS:
            with zipfile.ZipFile(run[kind]) as zf:
                data = zf.read(next(n for n in zf.namelist() if n.endswith("/data.pkl")))
            held |= {f"{module}.{name}" for module, name in pickle_globals(data)}
    assert set(CHECKPOINT_CLASSES) <= held, set(CHECKPOINT_CLASSES) - held


@pytest.mark.parametrize("task", ASSIST_TASKS)
def test_assist_suggests_from_each_task(matrix, restricted, task):
    from annotation.assist import model_predict

    run = next(r for r in matrix["runs"].values() if r["task"] == task)
    (answer,) = model_predict(run["best"], [IMAGE], conf=1e-6, imgsz=64)
    assert answer.predictions or task != "classify"


def test_inspection_reads_a_trained_classifier_and_a_resumable_checkpoint(matrix):
    from training.weights_process import worker_run

    for path, task in (
        (matrix["runs"]["yolo26n-cls"]["best"], "classify"),
        (matrix["runs"]["yolo11n"]["last_optimizer"], "detect"),
    ):
        answer = worker_run(["inspect", path], timeout=300)
        assert answer.error == "" and answer.result["task"] == task, answer.error
        assert answer.result["class_names"]
