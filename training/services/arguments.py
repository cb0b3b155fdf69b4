"""Training arguments, checked against the installed Ultralytics' own configuration.

What Ultralytics accepts is read from the library at run time (ultralytics.cfg), in a child
process (ultralytics_probe.py): importing it pulls in torch (~1 s and ~900 MB), which the web
process must not pay to validate a form. The answer is kept for the process and in the cache,
keyed by the installed version, so the child runs once per Ultralytics release.
"""

import difflib
import functools
import importlib.metadata
import importlib.util
import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml
from django.conf import settings
from django.core.cache import cache

from core.errors import ServiceError
from datasets.models import Task
from training.models import ModelFamily, ModelSize, WeightsSource
from training.pretrained_fetch import ultralytics_cached_weights
from training.services.version_cache import version_cache_get, version_cache_set

EXTRA_ARGS_MAX_BYTES = 10 * 1024

# Arguments Kestrel derives from the job, the dataset version and its own storage.
KESTREL_KEYS = frozenset(
    {
        "data",
        "model",
        "project",
        "name",
        "exist_ok",
        "resume",
        "device",
        "save_dir",
        "mode",
        "task",
        "pretrained",
        "save",  # checkpoints are how a stopped or lost job resumes
    }
)
# Arguments with a field of their own in the job form.
FORM_KEYS = frozenset({"epochs", "imgsz", "batch", "patience", "optimizer", "seed"})
# Arguments that name files on the server: a person must not point training at them.
FILE_KEYS = frozenset({"cfg", "distill_model"})
# default.yaml's sections whose arguments only predicting, exporting or tracking read.
NOT_TRAINING_SECTIONS = {
    "Predict settings": "a prediction setting",
    "Visualize settings": "a prediction setting",
    "Export settings": "an export setting",
    "Tracker settings": "a tracking setting",
}
# Val/Test settings that training's own validation does not read, and the precision flags that
# ultralytics.cfg._handle_deprecation folds into `quantize` (export settings before that).
NOT_TRAINING_KEYS = {
    "split": "a validation setting",
    "dnn": "a prediction setting",
    "nms": "an export setting",
    "int8": "an export setting",
    "half": "an export setting",
}

FAMILY_FOLDERS = {"yolo26": "26", "yolo11": "11", "yolov8": "v8"}
TASK_SUFFIXES = {
    "detect": "",
    "segment": "-seg",
    "pose": "-pose",
    "obb": "-obb",
    "classify": "-cls",
    "semantic": "-sem",
    "depth": "-depth",
}

EPOCHS_MAX = 10_000
IMGSZ_MIN, IMGSZ_MAX, IMGSZ_STRIDE = 32, 4096, 32
BATCH_MAX = 1024
PATIENCE_MAX = 10_000
SEED_MAX = 2**31 - 1


# --- what the installed Ultralytics accepts ----------------------------------------------------


@dataclass(frozen=True)
class UltralyticsConfig:
    version: str
    defaults: dict
    not_training: dict[str, str]  # key → what it is instead
    float_keys: frozenset[str]
    fraction_keys: frozenset[str]
    int_keys: frozenset[str]
    int_min: dict[str, int]
    bool_keys: frozenset[str]
    str_keys: frozenset[str]
    quantize_aliases: dict
    optimizers: tuple[str, ...]  # "auto" first, then as Ultralytics spells them


PROBE = Path(__file__).with_name("ultralytics_probe.py")
PROBE_TIMEOUT_S = 120


def ultralytics_root() -> Path:
    spec = importlib.util.find_spec("ultralytics")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("Ultralytics is not installed.")
    return Path(spec.submodule_search_locations[0])


def _not_training_keys(default_yaml: str) -> dict[str, str]:
    """Keys under default.yaml's predict, visualize, export and tracker section headers."""
    keys = dict(NOT_TRAINING_KEYS)
    what = None
    for line in default_yaml.splitlines():
        header = re.match(r"#\s+(\w[\w/ .]*?)\s*-*\s*$", line)
        if header:
            what = NOT_TRAINING_SECTIONS.get(header.group(1))
            continue
        key = re.match(r"(\w+):", line)
        if key and what:
            keys[key.group(1)] = what
    return keys


def ultralytics_probe_run() -> dict:
    """What ultralytics_probe.py prints. -P: its folder is not put on sys.path, where this
    package's modules (inspect.py) would shadow the standard library's."""
    result = subprocess.run(  # noqa: S603 (this interpreter, Kestrel's own file)
        [sys.executable, "-P", str(PROBE)],
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
        check=False,
    )
    if result.returncode:
        raise RuntimeError(f"Reading Ultralytics' configuration failed: {result.stderr}")
    return json.loads(result.stdout)


def _probe() -> dict:
    key = f"ultralytics-config:1:{importlib.metadata.version('ultralytics')}:{ultralytics_root()}"
    found = cache.get(key)
    if found is None:
        found = version_cache_get(key)
        if found is None:
            found = ultralytics_probe_run()
            version_cache_set(key, found)
        cache.set(key, found, timeout=None)
    return found


@functools.cache
def ultralytics_config() -> UltralyticsConfig:
    found = _probe()
    default_yaml = Path(found["default_cfg_path"]).read_text(encoding="utf-8")
    optimizers = found["optimizers"]
    return UltralyticsConfig(
        version=found["version"],
        defaults=found["defaults"],
        not_training=_not_training_keys(default_yaml),
        float_keys=frozenset(found["float_keys"]),
        fraction_keys=frozenset(found["fraction_keys"]),
        int_keys=frozenset(found["int_keys"]),
        int_min=found["int_min"],
        bool_keys=frozenset(found["bool_keys"]),
        str_keys=frozenset(found["str_keys"]),
        quantize_aliases=found["quantize_aliases"],
        optimizers=("auto", *(name for name in optimizers if name != "auto")),
    )


def trainable_keys() -> frozenset[str]:
    """The arguments a person may set in the advanced box."""
    config = ultralytics_config()
    return (
        frozenset(config.defaults) - KESTREL_KEYS - FORM_KEYS - FILE_KEYS - set(config.not_training)
    )


# --- one value ---------------------------------------------------------------------------------


def _choices(labels: list[str]) -> str:
    return labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} or {labels[-1]}"


def _show(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "empty"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_plain(value) -> bool:
    """What JSON (and so the job row) can hold: no dates, no NaN."""
    if value is None or isinstance(value, bool | int | str):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_is_plain(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(key, str) and _is_plain(item) for key, item in value.items())
    return False


def _check_fraction_share(key: str, value) -> None:
    if key == "fraction":
        if isinstance(value, list):
            parts_ok = len(value) in (2, 3) and all(value[:2])
            parts_ok = parts_ok and all(
                (type(x) is int and x >= 0) or (type(x) is float and 0.0 <= x <= 1.0) for x in value
            )
            if not parts_ok:
                raise ServiceError(
                    "fraction as a list must be [train, val] or [train, val, test] counts or "
                    f"shares (0.0 to 1.0), got {value}."
                )
            return
        if not _is_number(value):
            raise ServiceError(f"fraction must be a number, not {_show(value)}.")
        if not (0.0 < value <= 1.0 or (isinstance(value, int) and value > 1)):
            raise ServiceError(
                "fraction must be a share of the images above 0.0 and at most 1.0, "
                f"or a count above 1, got {value}."
            )
        return
    if not _is_number(value):
        raise ServiceError(f"{key} must be a number, not {_show(value)}.")
    if not 0.0 <= value <= 1.0:
        raise ServiceError(f"{key} must be between 0.0 and 1.0, got {value}.")


def check_value(key: str, value) -> None:
    """Raise ServiceError unless ultralytics.cfg.check_cfg(hard=True) would accept key=value.

    Slightly stricter than Ultralytics: true/false is not a number here (Python counts it as 1/0),
    and values must be plain JSON (no dates, NaN or infinity) to be stored on the job.
    """
    config = ultralytics_config()
    typed = (
        config.float_keys
        | config.fraction_keys
        | config.int_keys
        | config.bool_keys
        | config.str_keys
        | {"scale", "compile"}
    )
    default = config.defaults.get(key)
    if value is None:
        if key == "amp" or (default is not None and key in typed and key != "auto_augment"):
            raise ServiceError(
                f"{key} needs a value; leave it out to use the default ({_show(default)})."
            )
        return
    if not _is_plain(value):
        if isinstance(value, float):
            raise ServiceError(f"{key} must be a finite number, not {value}.")
        raise ServiceError(f"{key} must be a number, text, true/false or a list, not {value}.")
    if key in config.float_keys:
        if not _is_number(value):
            raise ServiceError(f"{key} must be a number, not {_show(value)}.")
    elif key == "scale":
        if isinstance(value, list):
            if len(value) != 2 or not all(_is_number(x) for x in value):
                raise ServiceError(f"scale as a list must be [min, max] numbers, got {value}.")
        elif not _is_number(value):
            raise ServiceError(f"scale must be a number, not {_show(value)}.")
        elif not 0.0 <= value <= 1.0:
            raise ServiceError(f"scale must be between 0.0 and 1.0, got {value}.")
    elif key in config.fraction_keys:
        _check_fraction_share(key, value)
    elif key in config.int_keys:
        whole = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
        if not whole:
            raise ServiceError(f"{key} must be a whole number, not {_show(value)}.")
        if key in config.int_min and value < config.int_min[key]:
            raise ServiceError(f"{key} must be at least {config.int_min[key]}, got {int(value)}.")
    elif key in config.bool_keys:
        if not isinstance(value, bool):
            raise ServiceError(f"{key} must be true or false, not {_show(value)}.")
    elif key in config.str_keys:
        if not isinstance(value, str):
            raise ServiceError(f"{key} must be text, not {_show(value)}.")
        if key == "optimizer" and _optimizer_name(value) is None:
            raise ServiceError(_optimizer_reason(value))
    elif key == "compile":
        if not isinstance(value, bool | str):
            raise ServiceError(
                f"compile must be true, false or a mode such as 'max-autotune', not {_show(value)}."
            )
    elif key == "amp":
        if not isinstance(value, bool) and str(value).lower() not in ("fp16", "bf16", "fp32"):
            raise ServiceError(
                f"amp must be true, false, 'fp16', 'bf16' or 'fp32', not {_show(value)}."
            )
    elif key == "quantize":
        if isinstance(value, bool) or str(value).lower() not in config.quantize_aliases:
            choices = ", ".join(str(alias) for alias in config.quantize_aliases)
            raise ServiceError(f"quantize must be one of {choices}; not {_show(value)}.")


def _optimizer_name(value: str) -> str | None:
    return {name.lower(): name for name in ultralytics_config().optimizers}.get(value.lower())


def _optimizer_reason(value) -> str:
    return f"Optimizer must be {_choices(ultralytics_config().optimizers)}, not {_show(value)}."


# --- the advanced box --------------------------------------------------------------------------


def _key_reason(key) -> str | None:
    config = ultralytics_config()
    if not isinstance(key, str):
        return f"Argument names are words such as lr0, not {_show(key)}."
    if key in KESTREL_KEYS:
        return f"Kestrel sets {key} itself."
    if key in FORM_KEYS:
        return f"Set {key} in the form, not here."
    if key in FILE_KEYS:
        return f"{key} names a file on the server, so it cannot be set here."
    if key in config.not_training:
        return f"{key} is {config.not_training[key]}, not a training argument."
    if key not in config.defaults:
        close = difflib.get_close_matches(key, sorted(trainable_keys()), n=3)
        best = [name for name in close if _likeness(name, key) == _likeness(close[0], key)]
        hint = f"; did you mean {_choices([repr(name) for name in sorted(best)])}?" if best else "."
        return f"Unknown argument '{key}'{hint}"
    return None


def _likeness(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a, b).ratio()


def _extra_args_reasons(args: dict) -> list[str]:
    reasons = []
    for key, value in args.items():
        reason = _key_reason(key)
        if reason is None:
            try:
                check_value(key, value)
            except ServiceError as error:
                reason = str(error)
        if reason:
            reasons.append(reason)
    return reasons


def yaml_mapping_load(text: str, *, what: str, shape: str, too_long: str) -> dict:
    """A person's YAML box read as one mapping ({} when empty), refused with a sentence that
    starts with `what`: over EXTRA_ARGS_MAX_BYTES (`too_long` says what to do), aliases (which
    grow a small text into a huge structure), not YAML (the line and the problem), or not a
    mapping (`shape`: how it should look)."""
    if not text or not text.strip():
        return {}
    if len(text.encode("utf-8")) > EXTRA_ARGS_MAX_BYTES:
        raise ServiceError(f"{what} are over {EXTRA_ARGS_MAX_BYTES // 1024} KB; {too_long}.")
    try:
        if any(isinstance(token, yaml.AliasToken) for token in yaml.scan(text)):
            raise ServiceError(f"{what} cannot use YAML aliases (*name).")
        found = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        problem = getattr(error, "problem", None) or "not valid YAML"
        where = f"line {mark.line + 1}: " if mark is not None else ""
        raise ServiceError(f"{what} are not valid YAML ({where}{problem}).") from None
    if found is None:
        return {}
    if not isinstance(found, dict):
        raise ServiceError(f"{what} {shape}.")
    return found


def extra_args_parse(text: str) -> dict:
    """The advanced box: a YAML mapping of train arguments, checked as Ultralytics would."""
    args = yaml_mapping_load(
        text,
        what="The advanced arguments",
        shape="must be one 'name: value' per line, e.g. 'lr0: 0.001'",
        too_long="keep only the ones you change",
    )
    reasons = _extra_args_reasons(args)
    if reasons:
        raise ServiceError(" ".join(reasons))
    return args


# --- the form ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrainParams:
    task: str
    model_family: str
    model_size: str
    weights: str = WeightsSource.SCRATCH
    epochs: int = 100
    imgsz: int = 640
    batch: int = -1  # -1: Ultralytics' AutoBatch
    patience: int = 100
    optimizer: str = "auto"
    seed: int = 0
    extra_args: dict = field(default_factory=dict)


def model_yaml_name(family: str, size: str, task: str) -> str:
    """Ultralytics builds scale n of yolo11-seg.yaml from the name yolo11n-seg.yaml."""
    return f"{family}{size}{TASK_SUFFIXES[task]}.yaml"


def _model_yaml_path(family: str, task: str) -> Path:
    folder = FAMILY_FOLDERS[family]
    return ultralytics_root() / "cfg" / "models" / folder / f"{family}{TASK_SUFFIXES[task]}.yaml"


@functools.cache
def _model_scales(path: Path) -> frozenset[str]:
    scales = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}).get("scales") or {}
    return frozenset(scales)


def _model_reason(family: str, size: str, task: str) -> str | None:
    label = ModelFamily(family).label
    version = ultralytics_config().version
    path = _model_yaml_path(family, task)
    if not path.is_file():
        return f"{label} has no {task} model in this Ultralytics version ({version})."
    if size not in _model_scales(path):
        return f"{label} has no size {size} for {task} in this Ultralytics version ({version})."
    return None


@dataclass(frozen=True)
class PretrainedWeights:
    """A job's pretrained checkpoint: on this server (TRAINING_WEIGHTS_DIR, or the weights folder
    of the server's own Ultralytics settings), to be downloaded while the job prepares
    (TRAINING_ALLOW_DOWNLOADS), or not to be had. The training form, the submit and the
    supervisor all ask pretrained_weights_find, so a job is never started for
    weights it cannot have."""

    name: str  # yolo11n-seg.pt
    path: Path  # where it is, or where a download puts it
    present: bool
    downloadable: bool
    # Whether the installed Ultralytics builds this family for this task at all (YOLO11 has no
    # semantic or depth model): weights of one it cannot build are neither offered nor fetched.
    model_exists: bool = True

    @property
    def available(self) -> bool:
        return self.present or self.downloadable

    @property
    def folder(self) -> str:
        """TRAINING_WEIGHTS_DIR as an operator wrote it: relative to the project when in it."""
        folder = self.path.parent
        try:
            shown = folder.relative_to(Path(settings.BASE_DIR))
        except ValueError:
            shown = folder
        return f"{shown}/"

    @property
    def reason(self) -> str:
        """Why these weights cannot be had ("" when they can)."""
        if self.available:
            return ""
        if not self.model_exists:
            return f"this Ultralytics has no {self.name.removesuffix('.pt')} model"
        return f"{self.name} is not in {self.folder} and downloads are off"

    @property
    def note(self) -> str:
        """What the form says of them."""
        if self.present:
            return f"{self.name}, from {self.folder}"
        if self.downloadable:
            return (
                f"{self.name} is downloaded from Ultralytics when the job starts; a worker "
                "without internet access fails it at once"
            )
        if not self.model_exists:
            return f"{self.reason}: pick another model family"
        return (
            f"{self.reason} (TRAINING_ALLOW_DOWNLOADS): train from scratch, or ask whoever "
            f"runs this server to put {self.name} there"
        )


def pretrained_weights_find(family: str, size: str, task: str) -> PretrainedWeights:
    name = f"{family}{size}{TASK_SUFFIXES[task]}.pt"
    path = Path(settings.TRAINING_WEIGHTS_DIR) / name
    exists = _model_yaml_exists(family, task)
    if exists and not path.is_file():
        # One the person's own Ultralytics downloaded before is used where it is.
        path = ultralytics_cached_weights(name) or path
    present = exists and path.is_file()
    return PretrainedWeights(
        name=name,
        path=path,
        present=present,
        downloadable=exists and not present and bool(settings.TRAINING_ALLOW_DOWNLOADS),
        model_exists=exists,
    )


@functools.cache
def _model_yaml_exists(family: str, task: str) -> bool:
    """A file check, no import: the form asks for every family and task."""
    return _model_yaml_path(family, task).is_file()


def pretrained_weights(family: str, size: str, task: str) -> PretrainedWeights:
    """The pretrained checkpoint to start from, or ServiceError saying why there is none."""
    weights = pretrained_weights_find(family, size, task)
    if not weights.available:
        raise ServiceError(
            f"No pretrained weights for {family}{size}{TASK_SUFFIXES[task]}: {weights.reason} "
            "(TRAINING_ALLOW_DOWNLOADS). Train from scratch, or put the file there."
        )
    return weights


def architecture_family_size(architecture: str) -> tuple[str, str] | None:
    """(family, size) of a Kestrel model's architecture (TrainingJob.model_name, e.g.
    yolo11n-seg → ("yolo11", "n")); None for one Kestrel did not train (an upload)."""
    for family in ModelFamily.values:
        for size in ModelSize.values:
            if architecture in {f"{family}{size}{suffix}" for suffix in TASK_SUFFIXES.values()}:
                return family, size
    return None


def _is_whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def train_params_validate(params: TrainParams, *, train_images: int) -> TrainParams:
    """The parameters as Ultralytics will take them, or ServiceError saying what to change."""
    if params.task not in Task.values:
        raise ServiceError(f"Pick a task: {_choices(Task.values)}.")
    if params.model_family not in ModelFamily.values:
        raise ServiceError(f"Pick a model family: {_choices(ModelFamily.labels)}.")
    if params.model_size not in ModelSize.values:
        raise ServiceError(f"Pick a model size: {_choices(ModelSize.values)}.")
    if params.weights not in WeightsSource.values:
        raise ServiceError(f"Pick where the weights come from: {_choices(WeightsSource.labels)}.")
    reason = _model_reason(params.model_family, params.model_size, params.task)
    if reason:
        raise ServiceError(reason)

    epochs = params.epochs
    if not _is_whole(epochs):
        raise ServiceError("Epochs must be a whole number.")
    if epochs < 1:
        raise ServiceError("Epochs must be at least 1.")
    if epochs > EPOCHS_MAX:
        raise ServiceError(f"Epochs must be at most {EPOCHS_MAX}.")

    imgsz = params.imgsz
    if not _is_whole(imgsz) or imgsz % IMGSZ_STRIDE:
        raise ServiceError(
            f"Image size must be a multiple of {IMGSZ_STRIDE} (e.g. 640), not {_show(imgsz)}."
        )
    if not IMGSZ_MIN <= imgsz <= IMGSZ_MAX:
        raise ServiceError(f"Image size must be between {IMGSZ_MIN} and {IMGSZ_MAX}, not {imgsz}.")

    batch = params.batch
    if not _is_whole(batch) or not (batch == -1 or 1 <= batch <= BATCH_MAX):
        raise ServiceError(f"Batch must be -1 (auto) or 1 to {BATCH_MAX}, not {_show(batch)}.")
    if train_images < 1:
        raise ServiceError("This dataset version has no training images.")
    if batch > train_images:
        raise ServiceError(
            f"Batch {batch} is larger than the {train_images} training images; "
            f"use {train_images} or less, or auto."
        )

    if not _is_whole(params.patience) or not 0 <= params.patience <= PATIENCE_MAX:
        raise ServiceError(
            f"Patience must be 0 (never stop early) to {PATIENCE_MAX}, "
            f"not {_show(params.patience)}."
        )
    optimizer = _optimizer_name(params.optimizer) if isinstance(params.optimizer, str) else None
    if optimizer is None:
        raise ServiceError(_optimizer_reason(params.optimizer))
    if not _is_whole(params.seed) or not 0 <= params.seed <= SEED_MAX:
        raise ServiceError(f"Seed must be 0 to {SEED_MAX}, not {_show(params.seed)}.")

    if params.weights == WeightsSource.PRETRAINED:
        pretrained_weights(params.model_family, params.model_size, params.task)
    if not isinstance(params.extra_args, dict):
        raise ServiceError("The advanced arguments must be 'name: value' pairs.")
    reasons = _extra_args_reasons(params.extra_args)
    if reasons:
        raise ServiceError(" ".join(reasons))
    return replace(params, optimizer=optimizer)
