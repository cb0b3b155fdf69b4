"""The job page's event stream: an async view against the real Redis and PostgreSQL."""

import asyncio

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from tests.training.helpers import emit, parse, submit
from training.live import event_stream
from training.models import EpochMetric, JobState, LogChunk, TrainingJob
from training.streams import state_rev_key, stream_key, training_redis

pytestmark = pytest.mark.django_db(transaction=True)


async def take(stream, n: int, timeout: float = 10) -> list[dict]:
    """The first n events a connection sends (keep-alives aside)."""
    events = []

    async def read():
        async for chunk in stream:
            events.extend(parse(chunk))
            if len(events) >= n:
                return

    await asyncio.wait_for(read(), timeout)
    await stream.aclose()
    return events


@pytest.fixture
def running(team, project, detect_version, gpu_local):
    job = submit(team, project, detect_version, gpu_local, epochs=5)
    TrainingJob.objects.filter(pk=job.pk).update(state=JobState.RUNNING, attempts=1)
    training_redis().delete(stream_key(job.pk))
    return TrainingJob.objects.get(pk=job.pk)


def test_snapshot_merges_postgres_with_the_stream_then_follows_it(running):
    EpochMetric.objects.create(job=running, epoch=1, attempt=1, values={"m": 0.1}, seconds=2)
    LogChunk.objects.create(job=running, attempt=1, seq=1, text="first\nsecond")
    emit(running, "log", {"lines": ["first", "second"]}, seq=1)  # persisted already
    emit(running, "epoch", {"epoch": 2, "epochs": 5, "metrics": {"m": 0.2}, "seconds": 2}, seq=2)
    emit(running, "log", {"lines": ["\x1b[34mthird\x1b[0m"]}, seq=3)  # not persisted yet

    async def scenario():
        stream = event_stream(running.pk)
        first = await stream.__anext__()
        new_id = await asyncio.to_thread(emit, running, "batch", {"epoch": 3, "batch": 1}, 4)
        rest = await take(stream, 1)
        return parse(first), rest, new_id

    (snapshot,), (batch,), new_id = async_to_sync(scenario)()
    assert snapshot["event"] == "snapshot"
    data = snapshot["data"]
    assert [e["epoch"] for e in data["epochs"]] == [1, 2]
    assert data["logs"] == ["first", "second", "\x1b[34mthird\x1b[0m"]  # once each, in order
    assert data["job"]["state"] == "running" and data["job"]["epochs"] == 5
    assert batch["event"] == "batch" and batch["id"] == new_id
    assert batch["data"]["epoch"] == 3 and batch["data"]["t"] > 0


def test_reconnecting_with_last_event_id_resumes_without_a_snapshot(running):
    emit(running, "log", {"lines": ["a"]}, seq=1)
    seen = emit(running, "log", {"lines": ["b"]}, seq=2)
    emit(running, "log", {"lines": ["c"]}, seq=3)
    events = async_to_sync(take)(event_stream(running.pk, last_event_id=seen), 2)
    assert [e["event"] for e in events] == ["state", "log"]
    assert events[1]["data"]["lines"] == ["c"]


def test_malformed_and_other_attempts_events_are_not_shown(running):
    client = training_redis()
    client.xadd(stream_key(running.pk), {"t": "log", "a": "1", "s": "x", "d": "{}"})
    client.xadd(stream_key(running.pk), {"t": "log", "a": "1", "s": "2", "d": "not json"})
    emit(running, "log", {"lines": ["old attempt"]}, seq=3, attempt=0)
    emit(running, "log", {"lines": ["shown"]}, seq=4)
    (snapshot,) = async_to_sync(take)(event_stream(running.pk), 1)
    assert snapshot["data"]["logs"] == ["shown"]


def test_a_finished_job_gets_its_history_from_postgres_and_the_end(running):
    TrainingJob.objects.filter(pk=running.pk).update(state=JobState.SUCCEEDED)
    EpochMetric.objects.create(job=running, epoch=1, attempt=1, values={"m": 0.5})
    events = async_to_sync(take)(event_stream(running.pk), 2)
    assert [e["event"] for e in events] == ["snapshot", "end"]
    assert events[0]["data"]["epochs"][0]["values"] == {"m": 0.5}
    assert events[1]["data"]["is_final"] is True


def test_a_state_change_is_sent_and_the_end_closes_the_stream(running):
    async def scenario():
        stream = event_stream(running.pk)
        await stream.__anext__()  # snapshot

        def finish():
            TrainingJob.objects.filter(pk=running.pk).update(state=JobState.SUCCEEDED)
            training_redis().incr(state_rev_key(running.pk))  # what job_transition does

        await asyncio.to_thread(finish)
        events = []
        async for chunk in stream:  # ends by itself after `end`
            events.extend(parse(chunk))
        return events

    events = async_to_sync(scenario)()
    assert [e["event"] for e in events] == ["state", "end"]


def test_the_view_streams_to_members_and_hides_the_job_from_strangers(running, team, stranger):
    async def get(user):
        client = AsyncClient()
        await client.aforce_login(user)
        return await client.get(f"/w/acme/jobs/{running.pk}/events")

    response = async_to_sync(get)(stranger)
    assert response.status_code == 404
    response = async_to_sync(get)(team.viewer)
    assert response.status_code == 200
    assert response["Content-Type"] == "text/event-stream"

    async def first(resp):
        chunk = await resp.streaming_content.__anext__()
        await resp.streaming_content.aclose()
        return chunk

    assert b"event: snapshot" in async_to_sync(first)(response)
