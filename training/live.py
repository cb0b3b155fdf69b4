"""The job page's live feed: server-sent events from `/w/<ws>/jobs/<id>/events`.

An async view (served by the ASGI server: an open page holds no thread) that first sends a
snapshot from PostgreSQL (every epoch, the last log lines, recent system samples) merged with
what the job's Redis stream holds that is not persisted yet, then follows the stream with a
blocking read. Each stream event carries its stream id as the SSE id, so a browser that
reconnects with Last-Event-ID resumes where it was; a finished job gets its snapshot and `end`.
A client that stops reading suspends the generator: nothing queues up in the server.
"""

import asyncio
import json
import re
import time
from contextlib import asynccontextmanager

import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.views import redirect_to_login
from django.db import connection
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse

from training.models import EpochMetric, LogChunk, SystemSample, TrainingJob
from training.selectors import job_state_dict
from training.streams import beat_key, progress_key, state_rev_key, stream_id, stream_key
from workspaces.selectors import workspace_access_for_user

SNAPSHOT_LOG_LINES = 2000
SNAPSHOT_SYSTEM_SAMPLES = 300
STATE_CHECK_SECONDS = 1.0
KEEPALIVE_SECONDS = 15.0
READ_BLOCK_MS = 1000
# Entries read at once: what one page that stops reading can hold in this process, at most.
READ_COUNT = 50
# While the supervisor's heartbeat is late, or Redis is away, the job is read this often.
WATCH_CHECK_SECONDS = 5.0
REDIS_RETRY_SECONDS = 0.5
REDIS_RETRY_MAX_SECONDS = 5.0
FEED_PAUSED = (
    "Live updates paused: Kestrel cannot reach Redis. The run goes on; this page catches up "
    "once it is back."
)
FORWARDED = {"batch", "epoch", "log", "system"}
_STREAM_ID = re.compile(r"^\d+-\d+$")
_JOB_FIELDS = (  # what job_state_dict reads
    "id",
    "name",
    "state",
    "epochs",
    "epochs_done",
    "checkpoint_epoch",
    "device",
    "started_at",
    "finished_at",
    "error",
    "failure_kind",
    "attempts",
    "stop_requested_at",
    "cancel_requested_at",
    "heartbeat_at",
    "lost_attempts",
    "progress_at",
    "stall_seconds",
    "notice",
)


# At most this many open pages read PostgreSQL at once (its connections are few: 100 by default);
# the others wait their turn for a moment instead of failing when hundreds open together.
DB_CONCURRENCY = 16
_db_gates: dict[asyncio.AbstractEventLoop, asyncio.Semaphore] = {}


@asynccontextmanager
async def _db_turn():
    loop = asyncio.get_running_loop()
    gate = _db_gates.setdefault(loop, asyncio.Semaphore(DB_CONCURRENCY))
    async with gate:
        try:
            yield
        finally:
            await _release_db()


async def _release_db() -> None:
    """Give this request's database connection back between reads: an open page holds a Redis
    read, never one of PostgreSQL's (few) connections."""
    await sync_to_async(_close_connection)()


def _close_connection() -> None:
    # Looked up here, in the thread that holds the connection. Never inside a transaction
    # (a test's, or a caller's that still needs it).
    if not connection.in_atomic_block:
        connection.close()


def sse(event: str, data, event_id: str | None = None) -> str:
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, default=str)}\n\n"


async def job_state(job_id: int) -> dict | None:
    return await sync_to_async(_job_state)(job_id)


def _job_state(job_id: int) -> dict | None:
    # In a thread: job_state_dict reads the job's credits from the ledger.
    job = (
        TrainingJob.objects.filter(pk=job_id)
        .select_related("gpu_type")
        .only(*_JOB_FIELDS, "gpu_type__hourly_price", "gpu_type__provider")
        .first()
    )
    return None if job is None else job_state_dict(job)


def _decode(entry_id: bytes, fields: dict) -> tuple[str, int, int, dict] | None:
    """(kind, attempt, seq, data) of a stream entry, or None when it is malformed."""
    try:
        kind = fields[b"t"].decode()
        attempt = int(fields[b"a"])
        seq = int(fields[b"s"])
        data = json.loads(fields[b"d"])
    except (KeyError, ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    data["t"] = int(entry_id.split(b"-")[0])  # Redis' clock at arrival, in ms
    return kind, attempt, seq, data


class _Feed:
    """What one connection has sent: the newest log and system seq per attempt (the snapshot
    and the stream overlap; nothing is sent twice)."""

    def __init__(self):
        self.sent: dict[tuple[str, int], int] = {}

    def fresh(self, kind: str, attempt: int, seq: int) -> bool:
        if kind not in ("log", "system"):
            return True
        key = (kind, attempt)
        if seq <= self.sent.get(key, 0):
            return False
        self.sent[key] = seq
        return True

    def shape(self, kind: str, data: dict) -> dict:
        if kind == "system":
            return {"t": data.pop("t"), "values": data}
        return data


async def _snapshot(client, job_id: int, state: dict, feed: _Feed) -> tuple[dict, str]:
    key = stream_key(job_id)
    top = await _or_none(client.xrevrange(key, count=1))  # Redis away: PostgreSQL's alone
    cursor = top[0][0].decode() if top else "0-0"
    epochs = {
        m["epoch"]: m
        async for m in EpochMetric.objects.filter(job_id=job_id)
        .order_by("epoch")
        .values("epoch", "values", "seconds")
    }
    chunks = []
    lines_total = 0
    async for chunk in (
        LogChunk.objects.filter(job_id=job_id)
        .order_by("-attempt", "-seq")
        .values("attempt", "seq", "text")
    ):
        chunks.append(chunk)
        lines_total += chunk["text"].count("\n") + 1
        if lines_total >= SNAPSHOT_LOG_LINES:
            break
    chunks.reverse()
    logs = [line for chunk in chunks for line in chunk["text"].split("\n")]
    for chunk in chunks:
        feed.fresh("log", chunk["attempt"], chunk["seq"])
    samples = [
        s
        async for s in SystemSample.objects.filter(job_id=job_id)
        .order_by("-attempt", "-seq")
        .values("attempt", "seq", "values", "created_at")[:SNAPSHOT_SYSTEM_SAMPLES]
    ]
    samples.reverse()
    system = []
    for sample in samples:
        feed.fresh("system", sample["attempt"], sample["seq"])
        at = int(sample["created_at"].timestamp() * 1000)
        system.append({"t": at, "values": sample["values"]})
    # What the stream holds up to the cursor and PostgreSQL may not have yet.
    if top:
        for entry_id, fields in await _or_none(client.xrange(key, max=cursor)) or []:
            decoded = _decode(entry_id, fields)
            if decoded is None or decoded[1] != state["attempts"]:
                continue
            kind, attempt, seq, data = decoded
            if kind == "epoch" and "epoch" in data:
                epochs[int(data["epoch"])] = {
                    "epoch": int(data["epoch"]),
                    "values": data.get("metrics", {}),
                    "seconds": data.get("seconds"),
                }
            elif kind == "log" and feed.fresh(kind, attempt, seq):
                logs.extend(data.get("lines", []))
            elif kind == "system" and feed.fresh(kind, attempt, seq):
                system.append(feed.shape(kind, data))
    raw = await _or_none(client.get(progress_key(job_id)))
    snapshot = {
        "job": state,
        "epochs": [epochs[n] for n in sorted(epochs)],
        "logs": logs[-SNAPSHOT_LOG_LINES:],
        "system": system[-SNAPSHOT_SYSTEM_SAMPLES:],
        "progress": json.loads(raw) if raw and not state["is_final"] else None,
    }
    return snapshot, cursor


async def _resumable(client, job_id: int, last_event_id: str | None) -> bool:
    """Whether the stream still holds what follows `last_event_id` (the same attempt's)."""
    if not last_event_id or not _STREAM_ID.match(last_event_id):
        return False
    first = await client.xrange(stream_key(job_id), count=1)
    return bool(first) and first[0][0].decode() <= last_event_id


async def event_stream(job_id: int, last_event_id: str | None = None):
    """The job's events for one page. Redis going away (restarted, perhaps empty) is waited
    out with back-off, the page told that live updates are paused; the job's state still comes
    from PostgreSQL meanwhile, and the feed goes on from where it was once Redis answers."""
    client = aioredis.Redis.from_url(
        settings.TRAINING_REDIS_URL, socket_timeout=10, socket_connect_timeout=3
    )
    feed = _Feed()
    try:
        rev = await _or_none(client.get(state_rev_key(job_id)))
        async with _db_turn():
            state = await job_state(job_id)
            if state is None:
                return
            snapshot = None
            if await _or_none(_resumable(client, job_id, last_event_id)):
                cursor = last_event_id
            else:
                snapshot, cursor = await _snapshot(client, job_id, state, feed)
        yield sse("snapshot", snapshot) if snapshot is not None else sse("state", state)
        if state["is_final"]:
            yield sse("end", state)
            return
        checked = sent = watched = time.monotonic()
        key = stream_key(job_id)
        away_since: float | None = None
        delay = REDIS_RETRY_SECONDS
        while True:
            now = time.monotonic()
            check = now - checked >= STATE_CHECK_SECONDS
            try:
                if away_since is not None:
                    cursor = await _stream_restored(client, key, cursor)
                replies = await client.xread({key: cursor}, count=READ_COUNT, block=READ_BLOCK_MS)
                fresh_rev, beat = rev, None
                if check:
                    fresh_rev, beat = await client.mget(state_rev_key(job_id), beat_key(job_id))
            except aioredis.RedisError:
                if away_since is None:
                    away_since = now
                    yield sse("feed", {"live": False, "text": FEED_PAUSED})
                    sent = now
                await asyncio.sleep(delay)
                delay = min(delay * 2, REDIS_RETRY_MAX_SECONDS)
                replies, fresh_rev, beat = None, rev, None
            else:
                if away_since is not None:
                    away_since = None
                    delay = REDIS_RETRY_SECONDS
                    yield sse("feed", {"live": True, "text": ""})
                    sent = time.monotonic()
            for _, entries in replies or []:
                for entry_id, fields in entries:
                    cursor = entry_id.decode()
                    decoded = _decode(entry_id, fields)
                    if decoded is None:
                        continue  # malformed: the supervisor counts it; the page never shows it
                    kind, attempt, seq, data = decoded
                    if kind in FORWARDED and attempt == state["attempts"]:
                        if feed.fresh(kind, attempt, seq):
                            yield sse(kind, feed.shape(kind, data), cursor)
                            sent = time.monotonic()
            now = time.monotonic()
            if check:
                checked = now
                # Every change of state bumps a counter in Redis: the database is read then,
                # and every few seconds while the supervisor's heartbeat is late (or Redis is
                # away) and while the header says so.
                late = away_since is not None or _late(beat)
                due = (late or state["watch"]["text"]) and now - watched >= WATCH_CHECK_SECONDS
            if check and (fresh_rev != rev or due):
                rev = fresh_rev
                watched = now
                async with _db_turn():
                    fresh = await job_state(job_id)
                if fresh is None:
                    return
                if fresh["watch"] != state["watch"]:
                    yield sse("watch", fresh["watch"])
                    sent = now
                if _differs(fresh, state):
                    if fresh["attempts"] != state["attempts"]:
                        cursor = "0-0"  # a new attempt starts a new stream
                    yield sse("state", fresh)
                    sent = now
                state = fresh
                if state["is_final"]:
                    yield sse("end", state)
                    return
            if now - sent >= KEEPALIVE_SECONDS:
                yield ": keep-alive\n\n"
                sent = now
    finally:
        await client.aclose()


def _differs(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k != "watch"} != {
        k: v for k, v in b.items() if k != "watch"
    }


def _late(beat: bytes | None) -> bool:
    """Whether the supervisor's last heartbeat (its time in Redis) is two beats old, or not
    there (Redis came back empty, or the attempt has not started)."""
    try:
        return time.time() - float(beat) > 2 * settings.TRAINING_HEARTBEAT_SECONDS
    except (TypeError, ValueError):
        return True


async def _or_none(awaitable):
    """The value, or None while Redis is away."""
    try:
        return await awaitable
    except aioredis.RedisError:
        return None


async def _stream_restored(client, key: str, cursor: str) -> str:
    """The cursor to read on from once Redis is back: from the stream's start when its ids went
    back in time (a Redis restarted empty; sequence numbers keep anything from showing twice)."""
    top = await client.xrevrange(key, count=1)
    if top and stream_id(top[0][0]) < stream_id(cursor):
        return "0-0"
    return cursor


async def job_events(request: HttpRequest, ws_slug: str, pk: int) -> HttpResponse:
    async with _db_turn():
        user = await request.auser()
        if not user.is_authenticated:
            return redirect_to_login(request.get_full_path())
        access = await sync_to_async(workspace_access_for_user)(user=user, slug=ws_slug)
        found = await TrainingJob.objects.filter(workspace=access.workspace, pk=pk).aexists()
    if not found:
        raise Http404("No such job.")
    response = StreamingHttpResponse(
        event_stream(pk, request.headers.get("Last-Event-ID")),
        content_type="text/event-stream",
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # a proxy in front must not hold the events back
    return response
