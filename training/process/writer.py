"""The one writer of what a run reports as it goes: its epochs, console, system samples and
latest batch, in the rows (and Redis keys) the job page, the live feed, comparisons and sweeps
read. Both kinds of run write through it: one Kestrel supervises (training.process.handlers,
from its trainer's stream) and one the stock `ultralytics` client reports
(training.services.external_runs, from the platform webhooks), so a page never needs to know
who ran the job.

Each write is idempotent by the row's key (an epoch by its number, a console chunk and a system
sample by attempt and sequence number): an event that arrives twice changes nothing. What it is
given is already checked (the trainer's events against training.event_schema, the client's by
external_runs); the caller holds the transaction, and a supervisor its lease's fence. Checkpoints
are not here: a supervised run's are copied from its machine and inspected
(training.process.checkpoints), an external run's arrive as signed uploads
(training.services.external_uploads)."""

import json
import logging

import redis
from django.db import transaction

from training.event_schema import Batch
from training.models import EpochMetric, LogChunk, SystemSample
from training.process.events import STREAM_MAXLEN
from training.streams import PROGRESS_TTL, progress_key, stream_key, training_redis

logger = logging.getLogger(__name__)


def epoch_write(
    *, job_id: int, attempt: int, epoch: int, metrics: dict, seconds: float | None = None
) -> bool:
    """Epoch `epoch`'s (1-based) metrics, once per epoch: a resumed or resent epoch replaces its
    row. True when the row is new."""
    _, created = EpochMetric.objects.update_or_create(
        job_id=job_id,
        epoch=epoch,
        defaults={"attempt": attempt, "values": metrics, "seconds": seconds},
    )
    return created


def console_written(*, job_id: int, attempt: int, seq: int) -> bool:
    """Whether the console chunk `seq` of `attempt` is stored already (a client that says how
    many it resent asks first)."""
    return LogChunk.objects.filter(job_id=job_id, attempt=attempt, seq=seq).exists()


def console_write(*, job_id: int, attempt: int, seq: int, lines: list[str]) -> None:
    """A chunk of console lines, once by (attempt, seq): the same chunk written twice, even at
    the same moment, is one row."""
    LogChunk.objects.bulk_create(
        [LogChunk(job_id=job_id, attempt=attempt, seq=seq, text="\n".join(lines))],
        ignore_conflicts=True,
    )


def system_write(*, job_id: int, attempt: int, seq: int, values: dict) -> None:
    """A sample of the machine in event_schema.System's shape, once by (attempt, seq)."""
    SystemSample.objects.bulk_create(
        [SystemSample(job_id=job_id, attempt=attempt, seq=seq, values=values)],
        ignore_conflicts=True,
    )


def progress_write(job_id: int, batch: Batch, *, client: redis.Redis | None = None) -> None:
    """The run's latest batch, what the page shows between epochs; progress only: with Redis
    away it is lost until the next batch says it again."""
    try:
        (client or training_redis()).set(
            progress_key(job_id), batch.model_dump_json(), ex=PROGRESS_TTL
        )
    except redis.RedisError:
        pass


def stream_append(*, job_id: int, attempt: int, kind: str, seq: int, data: dict) -> None:
    """For a run whose trainer writes no stream of its own (an external one): the event on the
    job's stream once the rows are committed, so a live page (training.live) draws it as it
    draws a supervised run's. PostgreSQL has it already, so a Redis away only makes the page
    wait for its next reload."""

    def add() -> None:
        fields = {"j": str(job_id), "a": str(attempt), "s": str(seq), "t": kind}
        fields["d"] = json.dumps(data)
        try:
            training_redis().xadd(stream_key(job_id), fields, maxlen=STREAM_MAXLEN)
        except redis.RedisError:
            logger.info("job %s: the live stream is away; the page reads PostgreSQL", job_id)

    transaction.on_commit(add)
