"""The job page while things fail: its event stream rides out Redis going away (and coming back
empty), a web server killed and started again, and it says when nobody is watching the run."""

import asyncio
import json
import time
import urllib.request
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.test import Client, override_settings
from django.utils import timezone

from tests.servers import WebProcess, free_port
from tests.training.helpers import emit, parse, submit
from training.live import event_stream
from training.models import JobState, TrainingJob
from training.streams import beat_key, state_rev_key, training_redis

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def running(team, project, detect_version, gpu_local):
    job = submit(team, project, detect_version, gpu_local, epochs=20)
    TrainingJob.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING, attempts=1, heartbeat_at=timezone.now()
    )
    training_redis().delete(f"training:job:{job.pk}:events", beat_key(job.pk))
    return TrainingJob.objects.get(pk=job.pk)


async def until(stream, wanted, timeout: float = 20) -> list[dict]:
    """Events the stream sends until one satisfies `wanted`; fails after `timeout` s."""
    events: list[dict] = []

    async def read():
        async for chunk in stream:
            for event in parse(chunk):
                events.append(event)
                if wanted(event):
                    return

    try:
        await asyncio.wait_for(read(), timeout)
    except TimeoutError:
        raise AssertionError(f"not seen in {timeout} s; got {events}") from None
    return events


def test_the_live_feed_waits_out_redis_and_goes_on_when_it_is_back_empty(
    running, own_redis, settings
):
    """Fault: the Redis the job page's stream reads is killed, then started again empty.
    Before: the view's generator raised (an unhandled ASGI exception per open page) and the
    page lost its feed. Now: it says live updates are paused, and follows the new stream."""
    settings.TRAINING_REDIS_URL = own_redis.url
    emit(running, "log", {"lines": ["before"]}, seq=1)

    async def scenario():
        stream = event_stream(running.pk)
        snapshot = parse(await stream.__anext__())
        await asyncio.to_thread(own_redis.kill)
        paused = await until(stream, lambda e: e["event"] == "feed")
        await asyncio.to_thread(own_redis.start)  # empty: the stream is gone
        await asyncio.to_thread(emit, running, "log", {"lines": ["after"]}, 2)
        back = await until(stream, lambda e: e["event"] == "log")
        await stream.aclose()
        return snapshot, paused, back

    snapshot, paused, back = async_to_sync(scenario)()
    assert snapshot[0]["data"]["logs"] == ["before"]
    assert paused[-1]["data"]["live"] is False and "paused" in paused[-1]["data"]["text"]
    kinds = [e["event"] for e in back]
    assert "feed" in kinds and back[kinds.index("feed")]["data"]["live"] is True
    assert back[-1]["data"]["lines"] == ["after"]


def test_the_header_says_when_the_heartbeat_is_late_and_when_the_run_is_resumed(running, team):
    """Fault: the training worker is silent (dead) while the page is open. Before: the page
    said "Running · Epoch 11 of 150" with no notice. Now: the header says how long the machine
    has been quiet and what Kestrel will do, then that the run is being resumed."""
    quiet = timezone.now() - timedelta(seconds=2 * settings.TRAINING_HEARTBEAT_SECONDS + 23)
    TrainingJob.objects.filter(pk=running.pk).update(heartbeat_at=quiet, checkpoint_epoch=10)
    client = Client()
    client.force_login(team.viewer)
    page = client.get(f"/w/acme/training/jobs/{running.pk}/").content.decode()
    assert "No word from the machine for 2" in page  # 25 s with 1 s heartbeats
    assert "Kestrel will resume it from its epoch 10 checkpoint if it does not come back" in page

    async def scenario():
        stream = event_stream(running.pk)
        first = parse(await stream.__anext__())

        def reaped():  # what jobs_reap does: requeued as lost
            TrainingJob.objects.filter(pk=running.pk).update(
                state=JobState.QUEUED, lost_attempts=1, lease_owner=""
            )
            training_redis().incr(state_rev_key(running.pk))

        await asyncio.to_thread(reaped)
        resumed = await until(stream, lambda e: e["event"] == "watch")

        def beat():  # the new attempt's supervisor, beating as it does
            TrainingJob.objects.filter(pk=running.pk).update(heartbeat_at=timezone.now())
            training_redis().set(beat_key(running.pk), f"{time.time():.3f}")

        async def beating():
            while True:
                await asyncio.to_thread(beat)
                await asyncio.sleep(0.3)

        await asyncio.to_thread(beat)
        await asyncio.to_thread(
            lambda: TrainingJob.objects.filter(pk=running.pk).update(
                state=JobState.RUNNING, attempts=2
            )
        )
        await asyncio.to_thread(training_redis().incr, state_rev_key(running.pk))
        beater = asyncio.ensure_future(beating())
        try:
            cleared = await until(stream, lambda e: e["event"] == "watch" and not e["data"]["text"])
        finally:
            beater.cancel()
        await stream.aclose()
        return first, resumed, cleared

    first, resumed, cleared = async_to_sync(scenario)()
    watch = first[0]["data"]["job"]["watch"]
    assert watch["late"] is True and watch["silent_seconds"] >= 25
    assert resumed[-1]["data"]["text"] == (
        "Attempt 1 was lost; Kestrel is resuming the run from its epoch 10 checkpoint."
    )
    assert cleared[-1]["data"] == {"late": False, "silent_seconds": None, "text": ""}


def test_pages_are_served_while_the_cache_redis_is_away(team):
    """Fault: the Redis behind Django's cache (rate limits, import progress) is away. Before:
    every page touching the cache failed with a 500. Now: a miss, and the page is served."""
    dead = f"redis://127.0.0.1:{free_port()}/0"
    caches = {"default": {**settings.CACHES["default"], "LOCATION": dead}}
    with override_settings(CACHES=caches):
        client = Client()
        assert client.get("/accounts/login/").status_code == 200
        response = client.post(
            "/accounts/login/", {"login": team.viewer.email, "password": "wrong"}
        )
        assert response.status_code == 200 and b"not correct" in response.content
        client.force_login(team.viewer)
        assert client.get("/w/acme/").status_code == 200


def read_events(url: str, cookie: str, last_id: str | None, stop) -> list[dict]:
    """Read the event stream as a browser's EventSource does, until `stop(events)`."""
    headers = {"Cookie": f"sessionid={cookie}", "Accept": "text/event-stream"}
    if last_id:
        headers["Last-Event-ID"] = last_id
    request = urllib.request.Request(url, headers=headers)  # noqa: S310
    events, block = [], ""
    with urllib.request.urlopen(request, timeout=20) as response:  # noqa: S310
        for raw in response:
            line = raw.decode()
            if line.strip():
                block += line
                continue
            events.extend(parse(block))
            block = ""
            if stop(events):
                return events
    return events


def test_a_page_open_while_the_web_server_is_killed_catches_up_when_it_is_back(
    running, team, tmp_path
):
    """Fault: the web server killed (SIGKILL) with a job page open, events arriving while it is
    down. The page's EventSource reconnects with Last-Event-ID to the restarted server and gets
    every event it missed, once, without a new snapshot."""
    web = WebProcess()
    web.start()
    client = Client()
    client.force_login(team.viewer)
    cookie = client.cookies["sessionid"].value
    url = f"{web.url}/w/acme/jobs/{running.pk}/events"
    emit(running, "log", {"lines": ["line 1"]}, seq=1)
    try:
        seen = read_events(url, cookie, None, lambda events: events)
        assert seen[0]["event"] == "snapshot" and seen[0]["data"]["logs"] == ["line 1"]
        last_id = emit(running, "log", {"lines": ["line 2"]}, seq=2)
        web.kill()
        epoch = {"epoch": 1, "epochs": 20, "metrics": {"m": 0.5}, "seconds": 1.0}
        emit(running, "epoch", epoch, seq=3)
        emit(running, "log", {"lines": ["line 3", "line 4"]}, seq=4)
        web.start()
        caught_up = read_events(
            url,
            cookie,
            last_id,
            lambda events: any(e["event"] == "log" for e in events),
        )
    finally:
        web.kill()
    assert [e["event"] for e in caught_up] == ["state", "epoch", "log"]
    assert caught_up[1]["data"]["metrics"] == {"m": 0.5}
    assert caught_up[2]["data"]["lines"] == ["line 3", "line 4"]
    assert json.dumps(caught_up).count("line 2") == 0  # what it had is not sent again
