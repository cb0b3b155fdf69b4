"""The job page as a live monitor, in Debian chromium, without a worker: the test appends events
to the job's Redis stream the way the trainer does (training.process.events.Events.emit), and
the page, fed by training.live's server-sent events, follows them without reloading: charts gain
points, the progress bar moves, the console shows coloured lines and can be searched, the title
shows the epoch; when the job ends the stream closes and the results appear.

The event stream is an async view that never ends while the job runs: pages that follow a job
are served by uvicorn (the asgi_server fixture), not by the WSGI live_server.
"""

import json
import re
import time
from datetime import timedelta

import pytest
from django.core.cache import cache
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.utils import timezone

from tests.browser.helpers import log_in
from tests.training.factories import (
    ANSI_LOG,
    JPG,
    PNG,
    job_row,
    job_with_results,
    local_gpu,
    metrics_of,
    small_version,
)
from training.models import EpochMetric, JobState, LogChunk, TrainingJob
from training.services.jobs import job_state_bump
from training.streams import stream_key, training_redis
from workspaces.models import Project

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


class Trainer:
    """Appends events to the job's stream as training.process.events.Events.emit does."""

    def __init__(self, job: TrainingJob, attempt: int = 1):
        self.job, self.attempt, self.seq = job, attempt, 0
        self.redis = training_redis()
        self.redis.delete(stream_key(job.pk))

    def emit(self, kind: str, data: dict) -> None:
        self.seq += 1
        fields = {
            "j": str(self.job.pk),
            "a": str(self.attempt),
            "s": str(self.seq),
            "t": kind,
            "d": json.dumps(data),
        }
        self.redis.xadd(stream_key(self.job.pk), fields)

    def batch(self, epoch: int, batch: int, epochs: int = 5, batches: int = 10) -> None:
        self.emit(
            "batch",
            {
                "epoch": epoch,
                "epochs": epochs,
                "batch": batch,
                "batches": batches,
                "batch_size": 4,
                "loss": [1.25, 2.5, 1.0],
            },
        )

    def close(self) -> None:
        self.redis.delete(stream_key(self.job.pk))


def _points(page, chart: str) -> list[int]:
    """How many points each dataset of one of the page's charts has (Chart.js' own data)."""
    return page.evaluate(
        """(key) => {
            const canvas = document.querySelector(`[data-chart="${key}"] canvas`);
            const chart = canvas && Chart.getChart(canvas);
            return chart ? chart.data.datasets.map((d) => d.data.filter((v) => v !== null).length)
                         : [];
        }""",
        chart,
    )


def _wait_points(page, chart: str, n: int) -> None:
    page.wait_for_function(
        """([key, n]) => {
            const canvas = document.querySelector(`[data-chart="${key}"] canvas`);
            const chart = canvas && Chart.getChart(canvas);
            return chart && chart.data.labels.length === n;
        }""",
        arg=[chart, n],
    )


def _tab(page, name: str) -> None:
    page.click(f"[role=tab][data-tab={name}]")
    page.locator(f"#panel-{name}").wait_for(state="visible")


def _system(gpu: bool, i: int) -> dict:
    values = {
        "cpu_percent": 40 + i,
        "ram_percent": 30 + i,
        "ram_used_gb": 9.5 + i / 10,
        "disk_percent": 55,
        "process_rss_gb": 2.1,
    }
    if gpu:
        values["gpus"] = [
            {
                "util_percent": 90 - i,
                "memory_used_gb": 20 + i,
                "memory_total_gb": 80,
                "temperature_c": 60 + i,
                "power_w": 280 + i,
            }
        ]
    return values


def _running_job(team, name: str, **fields) -> TrainingJob:
    """A job row of the team's, running its first attempt on the local machine, batch 4."""
    access = team.access("owner")
    project = Project.objects.create(workspace=team.workspace, name="Birds", created_by=team.owner)
    return job_row(
        project=project,
        version=small_version(access=access),
        gpu=local_gpu(),
        user=team.owner,
        name=name,
        state=JobState.RUNNING,
        attempts=1,
        batch=4,
        **fields,
    )


def test_the_job_page_follows_a_run_without_reloading(
    new_page, screenshot, browser_problems, asgi_server, team
):
    cache.clear()
    access = team.access("owner")
    project = Project.objects.create(workspace=team.workspace, name="Birds", created_by=team.owner)
    version = small_version(access=access)
    job = job_row(
        project=project,
        version=version,
        gpu=local_gpu(),
        user=team.owner,
        name="live run",
        state=JobState.RUNNING,
        attempts=1,
        epochs=5,
        batch=4,
        device="CPU (test machine)",
        started_at=timezone.now() - timedelta(seconds=75),
    )
    # What the supervisor has already written: epoch 1 and the first lines.
    EpochMetric.objects.create(job=job, epoch=1, attempt=1, values=metrics_of(1), seconds=4.0)
    TrainingJob.objects.filter(pk=job.pk).update(epochs_done=1, latest_metrics=metrics_of(1))
    LogChunk.objects.create(job=job, attempt=1, seq=1, text="Starting training for 5 epochs...")
    trainer = Trainer(job)
    trainer.seq = 1  # the chunk above was the trainer's first event

    page = new_page("editor")
    base = asgi_server
    log_in(page, team.editor.email, base)
    page.goto(f"{base}/w/acme/training/jobs/{job.pk}/")
    page.evaluate("window.__samePage = true")
    # The stream opens (its headers) before the server has taken the snapshot: a batch sent in
    # between would come inside the snapshot, not as the event the steps below watch for.
    page.locator("#job-live[data-stream=open][data-snapshot=applied]").wait_for()

    # The snapshot: epoch 1 on the charts, one line in the console.
    _wait_points(page, "quality", 1)
    assert page.inner_text("[data-testid=job-state]") == "Running"
    assert page.inner_text("[data-testid=job-device]") == "CPU (test machine)"
    elapsed = page.inner_text("[data-testid=job-elapsed]")
    assert re.fullmatch(r"1:[0-5]\d", elapsed), elapsed  # from its start 75 s ago, not from 0

    # Batches: the progress bar moves, images/s and the ETAs appear, the title shows the epoch.
    trainer.batch(2, 1)
    page.wait_for_function(
        "() => document.querySelector('[data-testid=job-epoch-bar]').value === 1"
    )
    time.sleep(0.6)
    trainer.batch(2, 3)
    page.wait_for_function(
        "() => document.querySelector('[data-testid=job-epoch-bar]').value === 3"
    )
    progress = page.inner_text("[data-testid=job-progress]")
    assert progress == "Epoch 2 of 5 · batch 3 of 10 · loss 1.250 / 2.500 / 1.000"
    assert page.get_attribute("[data-testid=job-epoch-bar]", "max") == "10"
    assert "images/s" in page.inner_text("[data-testid=job-speed]")
    eta = page.inner_text("[data-testid=job-eta]")
    assert "this epoch" in eta and "the run" in eta, eta
    assert page.title() == "Epoch 2/5 · live run · Kestrel"

    # An epoch ends: every chart gains a point; the same epoch again (a resume) replaces it.
    trainer.emit("epoch", {"epoch": 2, "epochs": 5, "metrics": metrics_of(2), "seconds": 4.2})
    _wait_points(page, "quality", 2)
    assert _points(page, "quality") == [2, 2, 2, 2]  # mAP50, mAP50-95, precision, recall
    assert _points(page, "loss:box_loss") == [2, 2]  # train and val
    assert _points(page, "loss:cls_loss") == [2, 2]
    assert _points(page, "lr") == [2]
    assert "epoch 2" in page.inner_text("[data-testid=job-metrics]")
    again = {**metrics_of(2), "metrics/mAP50(B)": 0.99}
    trainer.emit("epoch", {"epoch": 2, "epochs": 5, "metrics": again, "seconds": 4.2})
    trainer.emit("epoch", {"epoch": 3, "epochs": 5, "metrics": metrics_of(3), "seconds": 4.1})
    _wait_points(page, "quality", 3)
    assert _points(page, "quality") == [3, 3, 3, 3]
    assert "0.9900" in page.evaluate(
        """() => {
            const chart = Chart.getChart(document.querySelector('[data-chart=quality] canvas'));
            const ds = chart.data.datasets.find((d) => d.key === 'metrics/mAP50(B)');
            return ds.data[1].toFixed(4);
        }"""
    )
    trainer.batch(4, 6)
    page.wait_for_function("() => document.title.startsWith('Epoch 4/5 ')")
    page.locator("[data-testid=job-metrics]").scroll_into_view_if_needed()
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "charts")

    # The console: coloured lines, a traceback marked, a search that filters and highlights.
    trainer.emit("log", {"lines": ANSI_LOG})
    _tab(page, "console")
    lines = page.locator("#console-lines .line")
    lines.nth(len(ANSI_LOG)).wait_for()
    assert lines.count() == 1 + len(ANSI_LOG)
    blue = page.locator("#console-lines span.ansi-fg-4.ansi-b")
    assert blue.inner_text() == "train:"
    assert page.locator("#console-lines span.ansi-fg-2").inner_text() == "all good"
    assert "\x1b" not in page.inner_text("#console-lines")
    assert page.locator("#console-lines .line.tb").count() == 3
    assert page.locator("#console-lines .line.tb-exc").inner_text() == (
        "ValueError: not really, a test"
    )
    screenshot(page, "console")
    page.fill("[data-testid=console-search]", "scanning")
    page.wait_for_function(
        "() => document.querySelectorAll('#console-lines .line:not([hidden])').length === 1"
    )
    assert page.locator("#console-lines mark").inner_text() == "Scanning"
    assert page.inner_text("[data-testid=console-count]") == "1 matching line"
    screenshot(page, "console-search")
    page.fill("[data-testid=console-search]", "")
    page.wait_for_function(
        "() => document.querySelectorAll('#console-lines .line:not([hidden])').length === 7"
    )
    assert page.locator("#console-lines mark").count() == 0

    # System samples, with a GPU: the CPU/RAM/disk chart and one per GPU measure.
    _tab(page, "system")
    for i in range(4):
        trainer.emit("system", _system(True, i))
    _wait_points(page, "sys:percent", 4)
    for key in ("sys:memory", "sys:util_percent", "sys:temperature_c", "sys:power_w"):
        assert _points(page, key)[-1] == 4, key
    assert "GPU 0: 87 %" in page.inner_text("[data-testid=system-latest]")
    screenshot(page, "system")

    # The job ends: the page shows it, stops listening, and fetches the results.
    done = job_with_results(project=project, version=version, gpu=local_gpu())
    TrainingJob.objects.filter(pk=job.pk).update(
        state=JobState.SUCCEEDED,
        epochs_done=5,
        checkpoint_epoch=5,
        finished_at=timezone.now(),
        final_metrics=done.final_metrics,
        results=done.results,
        artifacts={
            name: default_storage.save(
                f"training/jobs/{job.pk}/plots/{name}",
                ContentFile(JPG if name.endswith(".jpg") else PNG),
            )
            for name in done.artifacts
            if name.endswith((".png", ".jpg"))
        },
    )
    job_state_bump(job.pk)  # what job_transition does: live pages re-read the job
    page.locator("#job-live[data-stream=ended]").wait_for()
    assert page.inner_text("[data-testid=job-state]") == "Succeeded"
    assert page.locator("[data-testid=job-status][data-state=succeeded]").count() == 1
    assert page.title() == "Succeeded · live run · Kestrel"
    assert page.locator("[data-testid=job-stop-form]").is_hidden()
    assert page.locator("[data-testid=job-cancel]").is_hidden()
    assert page.inner_text("[data-testid=job-progress]") == "Epoch 5 of 5 · checkpoint at epoch 5."
    assert page.inner_text("[data-testid=job-speed]") == ""
    _tab(page, "results")
    page.locator("[data-testid=results-confusion]").wait_for()
    assert page.locator("[data-testid=results-per-class] tbody tr").count() == 2
    page.wait_for_function(
        "() => [...document.querySelectorAll('#panel-results img')]"
        ".every((img) => img.complete && img.naturalWidth > 0)"
    )
    screenshot(page, "results")
    assert page.evaluate("window.__samePage") is True  # never reloaded
    trainer.close()

    assert not browser_problems.page_errors, browser_problems.page_errors
    assert not browser_problems.console_errors, browser_problems.console_errors
    # The page closes the stream at `end` (or EventSource would reconnect), maybe before the
    # server has: that request shows as aborted, and only that one.
    failed = [f for f in browser_problems.failed_requests if f"/jobs/{job.pk}/events:" not in f]
    assert not failed, failed
    assert not browser_problems.bad_responses, browser_problems.bad_responses


def test_a_finished_job_draws_its_charts_and_results_without_a_stream(
    new_page, screenshot, browser_problems, live_server, team
):
    cache.clear()
    access = team.access("owner")
    project = Project.objects.create(workspace=team.workspace, name="Birds", created_by=team.owner)
    job = job_with_results(project=project, version=small_version(access=access), gpu=local_gpu())
    page = new_page("viewer")
    log_in(page, team.viewer.email, live_server.url)
    page.goto(f"/w/acme/training/jobs/{job.pk}/")
    # Results first for a finished run; no stream is opened.
    assert page.get_attribute("#tab-results", "aria-selected") == "true"
    assert page.locator("#panel-charts").is_hidden()
    assert page.get_attribute("#job-live", "data-stream") is None
    page.wait_for_function(
        "() => [...document.querySelectorAll('#panel-results img')]"
        ".every((img) => img.complete && img.naturalWidth > 0)"
    )
    screenshot(page, "results")
    # Keyboard: arrows move between the tabs.
    page.focus("#tab-results")
    page.keyboard.press("Home")
    assert page.get_attribute("#tab-charts", "aria-selected") == "true"
    _wait_points(page, "quality", 3)
    assert _points(page, "loss:box_loss") == [3, 3]
    screenshot(page, "charts")
    page.keyboard.press("ArrowRight")
    assert page.locator("#panel-console").is_visible()
    assert page.locator("#console-lines .line").count() == 3 + len(ANSI_LOG)
    assert page.title() == "Succeeded · Finished run · Kestrel"
    assert not browser_problems.page_errors, browser_problems.page_errors
    assert not browser_problems.console_errors, browser_problems.console_errors
    assert not browser_problems.bad_responses, browser_problems.bad_responses


def test_the_header_says_when_nobody_is_watching_the_run(
    new_page, screenshot, browser_problems, asgi_server, team
):
    """A run whose machine went quiet (its training worker died): the header says for how long
    and what Kestrel will do, then that the run is being resumed, then nothing once the new
    attempt beats; the page is never reloaded."""
    from django.conf import settings

    from training.streams import beat_key

    cache.clear()
    quiet = timezone.now() - timedelta(seconds=2 * settings.TRAINING_HEARTBEAT_SECONDS + 23)
    job = _running_job(
        team, "quiet run", epochs=150, started_at=timezone.now() - timedelta(minutes=5)
    )
    TrainingJob.objects.filter(pk=job.pk).update(
        epochs_done=11, checkpoint_epoch=10, heartbeat_at=quiet
    )
    Trainer(job)  # an empty stream
    page = new_page("editor")
    log_in(page, team.editor.email, asgi_server)
    page.goto(f"{asgi_server}/w/acme/training/jobs/{job.pk}/")
    page.evaluate("window.__samePage = true")
    watch = page.locator("[data-testid=job-watch]")
    assert watch.is_visible()
    assert watch.inner_text().startswith("No word from the machine for 2")
    assert "resume it from its epoch 10 checkpoint if it does not come back" in watch.inner_text()
    page.locator("#job-live[data-stream=open][data-snapshot=applied]").wait_for()
    screenshot(page, "late-heartbeat")

    # The reaper gives the attempt up: the job is queued again, as lost.
    TrainingJob.objects.filter(pk=job.pk).update(
        state=JobState.QUEUED, lost_attempts=1, lease_owner=""
    )
    job_state_bump(job.pk)
    page.wait_for_function(
        "() => document.querySelector('[data-testid=job-watch]').textContent.startsWith("
        "'Attempt 1 was lost')"
    )
    # The state badge follows from the same bump, by its own event: it may come a moment later.
    page.wait_for_function(
        "() => document.querySelector('[data-testid=job-state]').textContent.trim() === 'Queued'"
    )
    screenshot(page, "resuming")

    # The new attempt runs and beats: the notice goes.
    redis = training_redis()
    TrainingJob.objects.filter(pk=job.pk).update(
        state=JobState.RUNNING, attempts=2, heartbeat_at=timezone.now()
    )
    job_state_bump(job.pk)
    deadline = time.monotonic() + 20
    while not page.locator("[data-testid=job-watch]").is_hidden():
        assert time.monotonic() < deadline, page.inner_text("[data-testid=job-watch]")
        TrainingJob.objects.filter(pk=job.pk).update(heartbeat_at=timezone.now())
        redis.set(beat_key(job.pk), f"{time.time():.3f}")
        time.sleep(0.3)
    assert page.evaluate("window.__samePage") is True
    assert not browser_problems.page_errors, browser_problems.page_errors
    assert not browser_problems.console_errors, browser_problems.console_errors


def test_a_stream_refused_by_a_proxy_is_asked_again_and_the_page_follows_on(
    new_page, asgi_server, team
):
    """A browser gives an event stream up for good when an answer is not the stream (a 502 from
    a proxy in front, a 500 from a server under load): the page says so, asks again a few
    seconds later, and follows the run from there, never reloaded."""
    cache.clear()
    job = _running_job(team, "proxied run", epochs=5)
    trainer = Trainer(job)
    page = new_page("editor")
    log_in(page, team.editor.email, asgi_server)
    asked = []

    def proxy(route):  # the first two asks get the proxy's error page, the rest go through
        asked.append(time.monotonic())
        if len(asked) <= 2:
            route.fulfill(status=502, content_type="text/html", body="<h1>502 Bad Gateway</h1>")
        else:
            route.continue_()

    page.route(f"**/jobs/{job.pk}/events", proxy)
    page.goto(f"{asgi_server}/w/acme/training/jobs/{job.pk}/")
    page.evaluate("window.__samePage = true")
    page.locator("#job-live[data-stream=closed]").wait_for()
    paused = page.inner_text("[data-testid=job-live-note]")
    assert paused == "Live updates paused: trying again in 5 s."
    page.locator("#job-live[data-stream=open][data-snapshot=applied]").wait_for(timeout=30_000)
    assert len(asked) == 3
    assert 4.5 <= asked[1] - asked[0] and 9.5 <= asked[2] - asked[1]  # less and less often
    assert not page.get_by_test_id("job-live-note").is_visible()

    trainer.batch(1, 4)
    page.wait_for_function(
        "() => document.querySelector('[data-testid=job-epoch-bar]').value === 4"
    )
    assert page.evaluate("window.__samePage") is True
