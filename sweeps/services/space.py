"""A sweep's search space: Ultralytics training arguments, each a range (low, high, log) or a
list, checked as the training form checks one value (training.services.arguments), and a trial's
point turned into the job's parameters.

The space as stored (Sweep.space): {name: {"low": x, "high": y, "log": bool}} or
{name: {"choices": [...]}}."""

import dataclasses
import difflib
import math

from core.errors import ServiceError
from training.models import ModelSize
from training.services.arguments import (
    EPOCHS_MAX,
    IMGSZ_MAX,
    IMGSZ_MIN,
    IMGSZ_STRIDE,
    TrainParams,
    check_value,
    trainable_keys,
    ultralytics_config,
    yaml_mapping_load,
)

MAX_ARGUMENTS = 16
MAX_CHOICES = 32
# Arguments with a field of their own in a job (TrainParams), searchable too.
JOB_FIELDS = ("model_size", "epochs", "imgsz", "batch", "patience", "optimizer")
SIZE_ORDER = list(ModelSize.values)  # n < s < m < l < x: the last costs the most


@dataclasses.dataclass(frozen=True)
class Dimension:
    name: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: int | None = None  # imgsz: a multiple of 32
    is_int: bool = False
    choices: tuple = ()

    @property
    def is_range(self) -> bool:
        return not self.choices


def _kind(name: str) -> str:
    """ "float" or "int" (a range or a list), else "size", "list" or "other" (a list only)."""
    if name == "model_size":
        return "size"
    if name in ("optimizer", "batch"):  # batch: -1 (auto) and sizes, never what lies between
        return "list"
    if name in ("epochs", "imgsz", "patience"):
        return "int"
    config = ultralytics_config()
    if name in config.float_keys or name in config.fraction_keys:
        return "float"
    if name in config.int_keys:
        return "int"
    return "other"


def _unknown(name) -> str | None:
    if not isinstance(name, str):
        return f"Argument names are words such as lr0, not {name!r}."
    if name in JOB_FIELDS or name in trainable_keys():
        return None
    known = sorted({*trainable_keys(), *JOB_FIELDS})
    close = difflib.get_close_matches(name, known, n=3)
    ratio = lambda other: difflib.SequenceMatcher(None, name, other).ratio()  # noqa: E731
    best = sorted(f"'{c}'" for c in close if ratio(c) == ratio(close[0]))
    hint = f"; did you mean {' or '.join(best)}?" if best else "."
    return f"Unknown argument '{name}'{hint}"


def _number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _check_one(name: str, value):
    """One value of `name` as a trial would pass it, or ServiceError; returns it cleaned."""
    kind = _kind(name)
    if kind == "size":
        if value not in SIZE_ORDER:
            raise ServiceError(f"model_size: {value!r} is not a size ({', '.join(SIZE_ORDER)}).")
        return value
    if name == "imgsz":
        if not isinstance(value, int) or isinstance(value, bool) or value % IMGSZ_STRIDE:
            raise ServiceError(f"imgsz: {value!r} is not a multiple of {IMGSZ_STRIDE}.")
        if not IMGSZ_MIN <= value <= IMGSZ_MAX:
            raise ServiceError(f"imgsz: {value} is outside {IMGSZ_MIN} to {IMGSZ_MAX}.")
        return value
    if name == "epochs":
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= EPOCHS_MAX:
            raise ServiceError(f"epochs: {value!r} is not a whole number from 1 to {EPOCHS_MAX}.")
        return value
    if name == "batch":
        if not isinstance(value, int) or isinstance(value, bool) or not (value == -1 or value >= 1):
            raise ServiceError(f"batch: {value!r} is not -1 (auto) or a whole number from 1.")
        return value
    if name == "patience":
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ServiceError(f"patience: {value!r} is not a whole number from 0.")
        return value
    try:
        check_value(name, value)
    except ServiceError as e:
        raise ServiceError(f"{name}: {e}") from None
    if name == "optimizer":
        return {n.lower(): n for n in ultralytics_config().optimizers}[value.lower()]
    return value


def _dimension(name, spec) -> Dimension:
    reason = _unknown(name)
    if reason:
        raise ServiceError(reason)
    if isinstance(spec, list | tuple):
        spec = {"choices": list(spec)}
    if not isinstance(spec, dict):
        raise ServiceError(f"{name}: give a list of values or a range {{low, high, log}}.")
    if "choices" in spec:
        if set(spec) != {"choices"}:
            raise ServiceError(f"{name}: a list takes no low, high or log.")
        choices = spec["choices"]
        if not isinstance(choices, list | tuple) or not choices:
            raise ServiceError(f"{name}: the list is empty; give at least one value.")
        if len(choices) > MAX_CHOICES:
            raise ServiceError(f"{name}: at most {MAX_CHOICES} values in a list.")
        cleaned = []
        for value in choices:
            if not (value is None or isinstance(value, bool | int | float | str)):
                raise ServiceError(f"{name}: {value!r} is not a single value.")
            value = _check_one(name, value)
            if value not in cleaned:
                cleaned.append(value)
        return Dimension(name=name, choices=tuple(cleaned))
    unknown = set(spec) - {"low", "high", "log"}
    if unknown or not {"low", "high"} <= set(spec):
        raise ServiceError(f"{name}: a range is {{low, high}} and, if wanted, log: true.")
    kind = _kind(name)
    if kind not in ("float", "int"):
        raise ServiceError(f"{name} is chosen from a list, not a range.")
    low, high, log = spec["low"], spec["high"], spec.get("log", False)
    if not isinstance(log, bool):
        raise ServiceError(f"{name}: log is true or false.")
    if not (_number(low) and _number(high)):
        raise ServiceError(f"{name}: a range's low and high are numbers.")
    if kind == "int":
        if not all(isinstance(v, int) or float(v).is_integer() for v in (low, high)):
            raise ServiceError(f"{name}: a range of whole numbers, not {low} to {high}.")
        low, high = int(low), int(high)
    else:
        low, high = float(low), float(high)
    if low >= high:
        raise ServiceError(
            f"{name}: the range's low ({low}) must be below its high ({high}); "
            "for one value, fix it instead of searching it."
        )
    if log and low <= 0:
        raise ServiceError(f"{name}: a log range needs a low above 0, not {low}.")
    _check_one(name, low)
    _check_one(name, high)
    step = IMGSZ_STRIDE if name == "imgsz" else None
    if step and log:
        raise ServiceError("imgsz: a range of sizes is in steps of 32, not log.")
    return Dimension(name=name, low=low, high=high, log=log, step=step, is_int=kind == "int")


def space_dimensions(space: dict) -> list[Dimension]:
    """The space's dimensions by name, or ServiceError saying what is impossible. By name: the
    sampler draws them in this order, and PostgreSQL's jsonb keeps keys in an order of its own,
    so a sweep proposes the same points on either database."""
    if not isinstance(space, dict) or not space:
        raise ServiceError("Search at least one argument: a range or a list of values.")
    if len(space) > MAX_ARGUMENTS:
        raise ServiceError(f"Search at most {MAX_ARGUMENTS} arguments at once.")
    return [
        _dimension(name, spec) for name, spec in sorted(space.items(), key=lambda kv: str(kv[0]))
    ]


def space_clean(space: dict) -> dict:
    """The space as stored: each dimension checked and its values made plain."""
    cleaned = {}
    for d in space_dimensions(space):
        if d.choices:
            cleaned[d.name] = {"choices": list(d.choices)}
        else:
            cleaned[d.name] = {"low": d.low, "high": d.high, "log": d.log}
    return cleaned


def space_parse(text: str) -> dict:
    """The form's box of further arguments to search, YAML: `name: [a, b]` or
    `name: {low: x, high: y, log: true}` per line."""
    return yaml_mapping_load(
        text,
        what="The further arguments to search",
        shape="go one per line, e.g. 'mixup: {low: 0, high: 0.3}'",
        too_long="search fewer",
    )


def _largest(d: Dimension):
    if d.choices:
        if d.name == "model_size":
            return max(d.choices, key=SIZE_ORDER.index)
        return max(d.choices)
    if d.step:
        return d.high - d.high % d.step
    return d.high


def trial_params(base: TrainParams, point: dict) -> TrainParams:
    """The job's parameters for one point: the searched values over the fixed ones; arguments
    without a field of their own go to extra_args."""
    fields, extra = {}, dict(base.extra_args)
    for name, value in point.items():
        if name in JOB_FIELDS:
            fields[name] = value
        else:
            extra[name] = value
    return dataclasses.replace(base, **fields, extra_args=extra)


def costliest_params(base: TrainParams, space: dict) -> TrainParams:
    """The point of the space that costs the most to train: the largest model size, image
    size and number of epochs it allows (the rest does not change the estimate)."""
    point = {}
    for d in space_dimensions(space):
        if d.name in ("model_size", "imgsz", "epochs"):
            point[d.name] = _largest(d)
    return trial_params(base, point)


def corner_points(space: dict) -> list[dict]:
    """The points a submit checks as whole jobs: every value of a list of model sizes or
    optimizers with the other dimensions at their lows, and the costliest corner."""
    dims = space_dimensions(space)
    low = {d.name: (d.choices[0] if d.choices else d.low) for d in dims}
    high = {d.name: (d.choices[-1] if d.choices else _largest(d)) for d in dims}
    points = [low, high]
    for d in dims:
        if d.choices and d.name in ("model_size", "optimizer", "batch"):
            points += [{**low, d.name: value} for value in d.choices]
    return points
