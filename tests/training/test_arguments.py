import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from core.errors import ServiceError
from training.services import arguments
from training.services.arguments import (
    TrainParams,
    check_value,
    extra_args_parse,
    model_yaml_name,
    pretrained_weights,
    train_params_validate,
    trainable_keys,
    ultralytics_config,
)

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ["yolo26", "yolo11", "yolov8"]
TASKS = ["detect", "segment", "pose", "obb", "classify"]


def refused(text: str) -> str:
    with pytest.raises(ServiceError) as caught:
        extra_args_parse(text)
    return str(caught.value)


# --- reading Ultralytics in a child process, not importing it ----------------------------------


def test_importing_the_module_and_checking_arguments_does_not_import_torch():
    code = (
        "import sys, django; django.setup();"
        "from training.services import arguments as a;"
        "a.extra_args_parse('lr0: 0.001\\nmosaic: 0.5');"
        "a.train_params_validate(a.TrainParams(task='segment', model_family='yolo11',"
        " model_size='n'), train_images=10);"
        "loaded = [m for m in ('torch', 'ultralytics') if m in sys.modules];"
        "assert not loaded, loaded"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.test_settings"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )

    assert result.returncode == 0, result.stderr


def test_the_child_process_reads_the_installed_ultralytics():
    import ultralytics
    from ultralytics import cfg

    found = arguments.ultralytics_probe_run()  # not the cached answer

    assert found["version"] == ultralytics.__version__
    assert found["defaults"] == cfg.DEFAULT_CFG_DICT
    assert set(found["bool_keys"]) == cfg.CFG_BOOL_KEYS
    assert {"auto", "SGD", "MuSGD"} <= set(found["optimizers"])


def test_key_sets_match_ultralytics():
    import ultralytics
    from ultralytics import cfg

    config = ultralytics_config()

    assert config.version == ultralytics.__version__
    assert config.float_keys == cfg.CFG_FLOAT_KEYS
    assert config.fraction_keys == cfg.CFG_FRACTION_KEYS
    assert config.int_keys == cfg.CFG_INT_KEYS
    assert config.bool_keys == cfg.CFG_BOOL_KEYS
    assert config.str_keys == cfg.CFG_STR_KEYS
    assert config.int_min == cfg.CFG_INT_MIN
    assert config.quantize_aliases == cfg.QUANTIZE_ALIASES
    assert set(config.defaults) == set(cfg.DEFAULT_CFG_DICT)
    assert config.defaults["lr0"] == cfg.DEFAULT_CFG_DICT["lr0"]


def test_optimizers_are_the_ones_ultralytics_builds():
    import torch
    from ultralytics.engine.trainer import BaseTrainer

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))

    optimizers = ultralytics_config().optimizers
    assert optimizers[0] == "auto"
    assert {"SGD", "AdamW", "MuSGD", "RMSprop"} <= set(optimizers)
    for name in optimizers[1:]:
        BaseTrainer.build_optimizer(None, Tiny(), name=name)  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError):
        BaseTrainer.build_optimizer(None, Tiny(), name="Lion")  # type: ignore[arg-type]


def test_every_training_argument_of_ultralytics_is_accepted_at_its_default():
    import yaml
    from ultralytics import cfg

    trainable = {
        key: value for key, value in cfg.DEFAULT_CFG_DICT.items() if key in trainable_keys()
    }
    owned = arguments.KESTREL_KEYS | arguments.FORM_KEYS | arguments.FILE_KEYS
    not_training = set(ultralytics_config().not_training)

    assert set(cfg.DEFAULT_CFG_DICT) - set(trainable) - owned - not_training == set()
    assert extra_args_parse(yaml.safe_dump(trainable)) == trainable


def test_trainable_keys_exclude_everything_kestrel_or_predicting_owns():
    keys = trainable_keys()

    assert {"lr0", "mosaic", "close_mosaic", "cos_lr", "freeze", "amp", "fraction"} <= keys
    assert not keys & {"data", "model", "device", "epochs", "imgsz", "batch", "optimizer", "seed"}
    assert not keys & {"source", "show", "format", "stream_buffer", "tracker", "opset", "embed"}
    assert not keys & {"cfg", "distill_model", "save", "resume", "project", "name"}
    assert keys <= set(ultralytics_config().defaults)


# --- one value, as ultralytics.cfg.check_cfg judges it -----------------------------------------

VALUES = [
    ("lr0", 0.001),
    ("lr0", 1),
    ("lr0", 1.5),
    ("lr0", -0.1),
    ("lr0", "fast"),
    ("mosaic", 1.5),
    ("mosaic", 0),
    ("box", 7),
    ("box", "big"),
    ("degrees", -10.0),
    ("close_mosaic", 5),
    ("close_mosaic", 5.0),
    ("close_mosaic", 5.5),
    ("close_mosaic", "5"),
    ("nbs", 0),
    ("nbs", 64),
    ("mask_ratio", 0),
    ("cos_lr", True),
    ("cos_lr", "yes"),
    ("cos_lr", 1),
    ("copy_paste_mode", "mixup"),
    ("copy_paste_mode", 3),
    ("scale", 0.5),
    ("scale", 1.5),
    ("scale", [0.5, 1.5]),
    ("scale", [0.5]),
    ("fraction", 0.5),
    ("fraction", 0),
    ("fraction", 200),
    ("fraction", [0.7, 0.2, 0.1]),
    ("fraction", [0.7, 0]),
    ("fraction", [0.7, 0.2, 0.1, 0.0]),
    ("compile", "max-autotune"),
    ("compile", True),
    ("compile", 3),
    ("amp", "bf16"),
    ("amp", "BF16"),
    ("amp", False),
    ("amp", "fp8"),
    ("amp", None),
    ("quantize", 8),
    ("quantize", "int8"),
    ("quantize", "w8a16"),
    ("quantize", 4),
    ("momentum", None),
    ("freeze", None),
    ("time", None),
    ("cache", "disk"),
]


@pytest.mark.parametrize(("key", "value"), VALUES)
def test_check_value_agrees_with_ultralytics_check_cfg(key, value):
    from ultralytics.cfg import check_cfg

    try:
        check_cfg({key: value}, hard=True)
        ultralytics_accepts = True
    except (TypeError, ValueError):
        ultralytics_accepts = False
    try:
        check_value(key, value)
        kestrel_accepts = True
    except ServiceError:
        kestrel_accepts = False

    assert kestrel_accepts == ultralytics_accepts


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("lr0", "fast", "lr0 must be a number, not 'fast'."),
        ("mosaic", 1.5, "mosaic must be between 0.0 and 1.0, got 1.5."),
        ("close_mosaic", 2.5, "close_mosaic must be a whole number, not 2.5."),
        ("nbs", 0, "nbs must be at least 1, got 0."),
        ("cos_lr", "yes", "cos_lr must be true or false, not 'yes'."),
        ("amp", "fp8", "amp must be true, false, 'fp16', 'bf16' or 'fp32', not 'fp8'."),
        ("momentum", None, "momentum needs a value; leave it out to use the default (0.937)."),
        # Stricter than Ultralytics, which counts true as 1: nobody means lr0=1.
        ("lr0", True, "lr0 must be a number, not true."),
        ("box", float("inf"), "box must be a finite number, not inf."),
    ],
)
def test_check_value_says_what_is_wrong(key, value, reason):
    with pytest.raises(ServiceError) as caught:
        check_value(key, value)

    assert str(caught.value) == reason


# --- the advanced box --------------------------------------------------------------------------


def test_advanced_yaml_is_parsed():
    text = (
        "# fine-tuning a small dataset\n"
        "lr0: 0.002\n"
        "cos_lr: true\n"
        "mosaic: 0.5\n"
        "close_mosaic: 3\n"
        "freeze: [0, 1, 2]\n"
        "fraction: [0.8, 0.2]\n"
        "amp: bf16\n"
        "cache: disk\n"
    )

    assert extra_args_parse(text) == {
        "lr0": 0.002,
        "cos_lr": True,
        "mosaic": 0.5,
        "close_mosaic": 3,
        "freeze": [0, 1, 2],
        "fraction": [0.8, 0.2],
        "amp": "bf16",
        "cache": "disk",
    }


@pytest.mark.parametrize("text", ["", "   \n", "# nothing yet\n", None])
def test_blank_advanced_box_means_no_arguments(text):
    assert extra_args_parse(text) == {}


def test_not_yaml_names_the_line():
    assert refused("lr0: 0.01\nmosaic: [1, 2\ncos_lr: true\n").startswith(
        "The advanced arguments are not valid YAML (line 3:"
    )


@pytest.mark.parametrize("text", ["- lr0\n- 0.01\n", "lr0 0.01", "42"])
def test_not_a_mapping_is_refused(text):
    assert refused(text) == (
        "The advanced arguments must be one 'name: value' per line, e.g. 'lr0: 0.001'."
    )


def test_over_10_kb_is_refused():
    text = "# " + "x" * (10 * 1024) + "\nlr0: 0.01\n"

    assert refused(text).startswith("The advanced arguments are over 10 KB")


def test_yaml_aliases_are_refused():
    text = "a: &a [1, 1, 1]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n"

    assert refused(text) == "The advanced arguments cannot use YAML aliases (*name)."


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("mosiac: 0.5", "Unknown argument 'mosiac'; did you mean 'mosaic'?"),
        ("lr_0: 0.1", "Unknown argument 'lr_0'; did you mean 'lr0'?"),
        ("lr: 0.1", "Unknown argument 'lr'; did you mean 'lr0' or 'lrf'?"),
        ("zzzz: 1", "Unknown argument 'zzzz'."),
        ("1: 2", "Argument names are words such as lr0, not 1."),
    ],
)
def test_unknown_arguments_are_refused_with_a_suggestion(text, reason):
    assert refused(text) == reason


@pytest.mark.parametrize(
    ("key", "what"),
    [
        ("source", "a prediction setting"),
        ("show", "a prediction setting"),
        ("stream_buffer", "a prediction setting"),
        ("format", "an export setting"),
        ("int8", "an export setting"),
        ("opset", "an export setting"),
        ("tracker", "a tracking setting"),
        ("split", "a validation setting"),
    ],
)
def test_arguments_that_are_not_for_training_are_refused(key, what):
    assert refused(f"{key}: x") == f"{key} is {what}, not a training argument."


@pytest.mark.parametrize(
    "key",
    ["data", "model", "project", "name", "exist_ok", "resume", "device", "save_dir", "mode"]
    + ["task", "pretrained", "save"],
)
def test_arguments_kestrel_sets_are_refused(key):
    assert refused(f"{key}: x") == f"Kestrel sets {key} itself."


@pytest.mark.parametrize("key", ["epochs", "imgsz", "batch", "patience", "optimizer", "seed"])
def test_arguments_of_the_form_are_refused(key):
    assert refused(f"{key}: 1") == f"Set {key} in the form, not here."


@pytest.mark.parametrize("key", ["cfg", "distill_model"])
def test_arguments_naming_server_files_are_refused(key):
    assert refused(f"{key}: /etc/passwd") == (
        f"{key} names a file on the server, so it cannot be set here."
    )


def test_bad_values_are_refused_all_at_once():
    reason = refused("lr0: fast\nmosaic: 1.5\ncos_lr: true\nsource: cam\n")

    assert reason == (
        "lr0 must be a number, not 'fast'. mosaic must be between 0.0 and 1.0, got 1.5. "
        "source is a prediction setting, not a training argument."
    )


def test_dates_are_refused_since_the_job_row_stores_json():
    assert refused("cache: 2026-01-01") == (
        "cache must be a number, text, true/false or a list, not 2026-01-01."
    )


# --- the form ----------------------------------------------------------------------------------

VALID = TrainParams(
    task="detect",
    model_family="yolo11",
    model_size="n",
    weights="scratch",
    epochs=10,
    imgsz=640,
    batch=16,
    patience=5,
    optimizer="auto",
    seed=0,
    extra_args={"lr0": 0.002},
)


def test_valid_params_are_returned():
    assert train_params_validate(VALID, train_images=40) == VALID


def test_optimizer_is_spelled_as_ultralytics_does():
    params = train_params_validate(replace(VALID, optimizer="adamw"), train_images=40)

    assert params.optimizer == "AdamW"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"epochs": 0}, "Epochs must be at least 1."),
        ({"epochs": 10_001}, "Epochs must be at most 10000."),
        ({"imgsz": 100}, "Image size must be a multiple of 32 (e.g. 640), not 100."),
        ({"imgsz": 0}, "Image size must be between 32 and 4096, not 0."),
        ({"imgsz": 4128}, "Image size must be between 32 and 4096, not 4128."),
        ({"batch": 0}, "Batch must be -1 (auto) or 1 to 1024, not 0."),
        ({"batch": -2}, "Batch must be -1 (auto) or 1 to 1024, not -2."),
        ({"batch": 2048}, "Batch must be -1 (auto) or 1 to 1024, not 2048."),
        (
            {"batch": 64},
            "Batch 64 is larger than the 40 training images; use 40 or less, or auto.",
        ),
        ({"patience": -1}, "Patience must be 0 (never stop early) to 10000, not -1."),
        (
            {"optimizer": "Lion"},
            "Optimizer must be auto, Adam, Adamax, AdamW, NAdam, RAdam, RMSprop, SGD or MuSGD, "
            "not 'Lion'.",
        ),
        ({"seed": -1}, "Seed must be 0 to 2147483647, not -1."),
        ({"seed": 2**31}, "Seed must be 0 to 2147483647, not 2147483648."),
        ({"model_family": "yolov5"}, "Pick a model family: YOLO26, YOLO11 or YOLOv8."),
        ({"model_size": "q"}, "Pick a model size: n, s, m, l or x."),
        (
            {"task": "keypoints"},
            "Pick a task: detect, segment, pose, obb, classify, semantic or depth.",
        ),
        ({"extra_args": {"mosaic": 1.5}}, "mosaic must be between 0.0 and 1.0, got 1.5."),
        ({"extra_args": {"data": "/etc"}}, "Kestrel sets data itself."),
    ],
)
def test_bad_params_are_refused_with_what_to_change(changes, reason):
    with pytest.raises(ServiceError) as caught:
        train_params_validate(replace(VALID, **changes), train_images=40)

    assert str(caught.value) == reason


def test_auto_batch_fits_any_dataset():
    assert train_params_validate(replace(VALID, batch=-1), train_images=3).batch == -1


def test_a_dataset_without_training_images_is_refused():
    with pytest.raises(ServiceError, match="no training images"):
        train_params_validate(VALID, train_images=0)


@pytest.fixture
def ultralytics_copy(tmp_path, monkeypatch):
    """An Ultralytics tree like the installed one, to take model files away from."""
    real = arguments.ultralytics_root()
    copy = tmp_path / "ultralytics"
    shutil.copytree(real / "cfg" / "models", copy / "cfg" / "models")
    monkeypatch.setattr(arguments, "ultralytics_root", lambda: copy)
    return copy


def test_a_model_missing_from_this_ultralytics_is_refused(ultralytics_copy):
    (ultralytics_copy / "cfg" / "models" / "v8" / "yolov8-obb.yaml").unlink()
    version = ultralytics_config().version

    with pytest.raises(ServiceError) as caught:
        train_params_validate(replace(VALID, model_family="yolov8", task="obb"), train_images=40)

    assert str(caught.value) == f"YOLOv8 has no obb model in this Ultralytics version ({version})."
    yolo11 = replace(VALID, model_family="yolo11", task="obb")
    assert train_params_validate(yolo11, train_images=40) == yolo11


def test_a_size_missing_from_the_model_file_is_refused(ultralytics_copy):
    (ultralytics_copy / "cfg" / "models" / "11" / "yolo11-pose.yaml").write_text(
        "nc: 1\nscales:\n  n: [0.5, 0.25, 1024]\n  s: [0.5, 0.5, 1024]\n"
    )

    with pytest.raises(ServiceError, match="YOLO11 has no size x for pose"):
        train_params_validate(replace(VALID, task="pose", model_size="x"), train_images=40)
    train_params_validate(replace(VALID, task="pose", model_size="s"), train_images=40)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("task", TASKS)
def test_every_family_and_task_is_in_the_installed_ultralytics(family, task):
    params = replace(VALID, model_family=family, task=task, model_size="x")

    assert train_params_validate(params, train_images=40) == params


def test_model_yaml_name_is_how_ultralytics_builds_a_scale():
    from ultralytics.nn.tasks import yaml_model_load

    assert model_yaml_name("yolo11", "n", "segment") == "yolo11n-seg.yaml"
    assert model_yaml_name("yolo26", "x", "detect") == "yolo26x.yaml"
    assert model_yaml_name("yolov8", "m", "classify") == "yolov8m-cls.yaml"
    for family, size, task in [("yolo11", "n", "segment"), ("yolov8", "m", "classify")]:
        loaded = yaml_model_load(model_yaml_name(family, size, task))
        assert loaded["scale"] == size
        assert Path(loaded["yaml_file"]).name == model_yaml_name(family, size, task)


# --- pretrained weights ------------------------------------------------------------------------


def test_pretrained_weights_on_disk_are_used(settings, tmp_path):
    settings.TRAINING_WEIGHTS_DIR = tmp_path
    settings.TRAINING_ALLOW_DOWNLOADS = False
    (tmp_path / "yolo11n-seg.pt").write_bytes(b"weights")

    found = pretrained_weights("yolo11", "n", "segment")
    assert found.present and found.path == tmp_path / "yolo11n-seg.pt"


def test_pretrained_weights_are_downloaded_by_name_when_allowed(settings, tmp_path):
    settings.TRAINING_WEIGHTS_DIR = tmp_path
    settings.TRAINING_ALLOW_DOWNLOADS = True

    for family, size, task, name in [
        ("yolo26", "s", "detect", "yolo26s.pt"),
        ("yolov8", "m", "classify", "yolov8m-cls.pt"),
    ]:
        found = pretrained_weights(family, size, task)
        # Not there yet: the job's preparation downloads it to where the next job finds it.
        assert not found.present and found.downloadable
        assert found.name == name and found.path == tmp_path / name


def test_missing_pretrained_weights_without_downloads_are_refused(settings, tmp_path):
    settings.TRAINING_WEIGHTS_DIR = tmp_path
    settings.TRAINING_ALLOW_DOWNLOADS = False

    with pytest.raises(ServiceError) as caught:
        pretrained_weights("yolo11", "n", "segment")
    assert str(caught.value) == (
        f"No pretrained weights for yolo11n-seg: yolo11n-seg.pt is not in {tmp_path}/ and "
        "downloads are off (TRAINING_ALLOW_DOWNLOADS). Train from scratch, or put the file there."
    )
    with pytest.raises(ServiceError, match="No pretrained weights for yolo11n"):
        train_params_validate(replace(VALID, weights="pretrained"), train_images=40)
    assert train_params_validate(VALID, train_images=40) == VALID  # from scratch needs none
