"""The one schema of what a trainer may say, read wherever its events arrive: the HTTP ingest
(`training.trainer_events`), the supervisor reading the job's Redis stream (a local trainer
writes there directly), and the trainer itself before it sends.

An event names files by what they are (a checkpoint's epoch, whether a best was written, plot
names), never by path: the supervisor finds each file itself in folders it made
(`training.run_files`). Every field has a type, strings and lists a length, numbers a range, and
no event may carry a field this schema does not know. Plain pydantic, no Django: the trainer
process imports it too.
"""

import json
import re
from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, create_model

MAX_BODY_BYTES = 2 * 2**20  # one HTTP request of events; under Django's 2.5 MB body limit
MAX_EVENT_BYTES = MAX_BODY_BYTES  # one event's data, as JSON, in the Redis stream
MAX_EVENTS = 1000  # events in one HTTP request
MAX_LOG_LINES = 500
MAX_LINE_CHARS = 2000
MAX_CLASSES = 5000
MAX_MATRIX_CLASSES = 201  # the confusion matrix the results tab draws, background included
MAX_PLOTS = 100
MAX_EPOCHS = 100_000
# Ultralytics' plots at the top of its run folder: results.png, confusion_matrix.png,
# BoxPR_curve.png, ..., and the validation batches val_batch0_labels.jpg / val_batch0_pred.jpg.
PLOT_NAME = r"^(?:[A-Za-z0-9][A-Za-z0-9_]{0,63}\.png|val_batch\d{1,3}_(?:labels|pred)\.jpg)$"
PLOT_NAME_RE = re.compile(PLOT_NAME)


class EventRefused(ValueError):
    """An event, or a body of events, outside the schema; the message says where and why."""


class _Data(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


Count = Annotated[int, Field(ge=0, le=10**9)]
EpochNumber = Annotated[int, Field(ge=1, le=MAX_EPOCHS)]
Number = Annotated[float, Field(allow_inf_nan=False)]
Name = Annotated[str, StringConstraints(max_length=200)]
Line = Annotated[str, StringConstraints(max_length=MAX_LINE_CHARS)]
Metrics = Annotated[dict[Name, Number], Field(max_length=500)]
PlotName = Annotated[str, StringConstraints(pattern=PLOT_NAME)]


class Started(_Data):
    pid: Count
    resumed: bool


class TrainStart(_Data):
    epochs: EpochNumber
    start_epoch: Annotated[int, Field(ge=0, le=MAX_EPOCHS)]
    batches: Count
    device: Name


class Batch(_Data):
    epoch: EpochNumber
    epochs: EpochNumber
    batch: Count
    batches: Count
    batch_size: Count
    loss: Annotated[list[Number | None], Field(max_length=32)]
    first: bool = False


class ValBatch(_Data):
    """A batch of a validation: the one after an epoch (`epoch`), or the final one of best.pt."""

    epoch: Annotated[int, Field(ge=0, le=MAX_EPOCHS)]
    batch: Count
    batches: Count


class Epoch(_Data):
    epoch: EpochNumber
    epochs: EpochNumber | None = None
    metrics: Metrics
    seconds: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None


class Checkpoint(_Data):
    """The trainer wrote last-<epoch>.pt (and best-<epoch>.pt when `best`) in its checkpoint
    folder."""

    epoch: EpochNumber
    best: bool


class Log(_Data):
    lines: Annotated[list[Line], Field(max_length=MAX_LOG_LINES)]


class Gpu(_Data):
    util_percent: Number | None = None
    memory_percent: Number | None = None  # what a stock client sends (issue 20)
    memory_used_gb: Number | None = None
    memory_total_gb: Number | None = None
    temperature_c: Number | None = None
    power_w: Number | None = None


class System(_Data):
    cpu_percent: Number | None = None
    ram_percent: Number | None = None
    ram_used_gb: Number | None = None
    disk_percent: Number | None = None
    process_rss_gb: Number | None = None
    gpus: Annotated[list[Gpu], Field(max_length=64)] | None = None


class Final(_Data):
    metrics: Metrics


Row = Annotated[dict[Name, Name | Number | None], Field(max_length=50)]
MatrixRow = Annotated[list[Number], Field(max_length=MAX_MATRIX_CLASSES)]


class ConfusionMatrix(_Data):
    names: Annotated[list[Name], Field(max_length=MAX_MATRIX_CLASSES)]
    matrix: Annotated[list[MatrixRow], Field(max_length=MAX_MATRIX_CLASSES)]


class Results(_Data):
    per_class: Annotated[list[Row], Field(max_length=MAX_CLASSES)] = []
    confusion_matrix: ConfusionMatrix | None = None


class TrainEnd(_Data):
    """Training is over: the class names, the final validation, whether weights/best.pt was
    written, and which plots the run folder holds (by name)."""

    names: Annotated[list[Name], Field(max_length=MAX_CLASSES)]
    results: Results
    best: bool
    plots: Annotated[list[PlotName], Field(max_length=MAX_PLOTS)] = []


class Done(_Data):
    stopped: bool


class Error(_Data):
    message: Annotated[str, StringConstraints(max_length=20_000)]
    # What failed, as training.models.FailureKind names it (whether Resume can help); a trainer
    # that does not say is taken to have failed while training.
    kind: Literal["weights", "download", "start", "oom", "crash"] | None = None


EVENT_KINDS: dict[str, type[_Data]] = {
    "started": Started,
    "train_start": TrainStart,
    "batch": Batch,
    "val_batch": ValBatch,
    "epoch": Epoch,
    "checkpoint": Checkpoint,
    "log": Log,
    "system": System,
    "final": Final,
    "train_end": TrainEnd,
    "done": Done,
    "error": Error,
}
Seq = Annotated[int, Field(ge=1, le=2**53)]
_CONFIG = ConfigDict(extra="forbid", strict=True)
_ENVELOPES = [
    create_model(f"{kind}_event", __config__=_CONFIG, s=Seq, t=Literal[kind], d=data)  # type: ignore[call-overload]
    for kind, data in EVENT_KINDS.items()
]
Envelope = Annotated[Union[tuple(_ENVELOPES)], Field(discriminator="t")]  # noqa: UP007


class EventsBody(BaseModel):
    """What the HTTP ingest takes: {"events": [{"s": seq, "t": kind, "d": {...}}, ...]}."""

    model_config = _CONFIG
    events: Annotated[list[Envelope], Field(max_length=MAX_EVENTS)]


def _reason(error: ValidationError) -> str:
    first = error.errors(include_url=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return f"{where or 'body'}: {first['msg']}{more}"


def event_parse(kind: str, raw: bytes | str) -> _Data:
    """One event's data as the Redis stream holds it (JSON), checked against its kind."""
    model = EVENT_KINDS.get(kind)
    if model is None:
        raise EventRefused(f"there is no event kind {kind[:40]!r}")
    if len(raw) > MAX_EVENT_BYTES:
        raise EventRefused(f"{kind}: larger than {MAX_EVENT_BYTES} bytes")
    try:
        return model.model_validate_json(raw)
    except ValidationError as e:
        raise EventRefused(f"{kind}.{_reason(e)}") from None


def events_body_parse(body: bytes) -> list[tuple[int, str, _Data]]:
    """A body of events from the HTTP ingest: [(seq, kind, data)], or EventRefused."""
    if len(body) > MAX_BODY_BYTES:
        raise EventRefused(f"the body is larger than {MAX_BODY_BYTES} bytes")
    try:
        parsed = EventsBody.model_validate_json(body)
    except ValidationError as e:
        raise EventRefused(_reason(e)) from None
    return [(event.s, event.t, event.d) for event in parsed.events]


def event_dumps(kind: str, data: dict) -> str:
    """The trainer's side: `data` as JSON once it fits the schema, else EventRefused."""
    raw = json.dumps(data, default=str)
    event_parse(kind, raw)
    return raw
