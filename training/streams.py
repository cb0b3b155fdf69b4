"""What a training job keeps in Redis while it runs, and how to reach it: the trainer's event
stream, the stop/cancel word, the fence of its attempt, how far its events are stored, the
supervisor's heartbeat, the latest batch, and the counter live pages watch.

The supervisor (training.process.supervisor) writes most of these, the trainer
(training.process.runner, told the keys in its spec) the rest; web code (the live feed, the job
page, the API, the trainer events endpoint) reads them from here. A finished job needs nothing
from Redis."""

import json

import redis
from django.conf import settings

from training.models import TrainingJob

PROGRESS_TTL = 3600


def stream_key(job_id: int) -> str:
    return f"training:job:{job_id}:events"


def kept_key(job_id: int) -> str:
    """The sequence number up to which the supervisor stored the trainer's events: the trainer
    keeps each event on its disk until then (training.process.spool.Spool)."""
    return f"training:job:{job_id}:kept"


def sent_key(job_id: int, attempt: int) -> str:
    """The highest sequence number the HTTP ingest took from this attempt's trainer."""
    return f"training:job:{job_id}:attempt:{attempt}:sent"


def control_key(job_id: int) -> str:
    return f"training:job:{job_id}:control"


def fence_key(job_id: int) -> str:
    return f"training:job:{job_id}:attempt"


def state_rev_key(job_id: int) -> str:
    """Bumped at every change of the job's state: live pages re-read the job only then."""
    return f"training:job:{job_id}:rev"


def beat_key(job_id: int) -> str:
    """The supervisor's latest heartbeat (Unix time): live pages notice a late one from it."""
    return f"training:job:{job_id}:beat"


def progress_key(job_id: int) -> str:
    return f"training:job:{job_id}:progress"


def training_redis() -> redis.Redis:
    # Timeouts: a Redis that stops answering (not only one that refuses) is noticed, and waited
    # out by whoever called (a stream read blocks for at most a second).
    return redis.Redis.from_url(
        settings.TRAINING_REDIS_URL, socket_timeout=10, socket_connect_timeout=3
    )


def job_progress(job: TrainingJob) -> dict | None:
    """The running job's latest batch (epoch, batch of batches, loss), or None."""
    if job.is_final:
        return None
    try:
        raw = training_redis().get(progress_key(job.pk))
    except redis.RedisError:
        return None
    return json.loads(raw) if raw else None


def stream_id(entry_id: bytes | str) -> tuple[int, int]:
    """A stream entry's id as (ms, n), to compare ids across a Redis restart."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, n = text.partition("-")
    return int(ms), int(n or 0)
