"""How live the job page is: from an epoch's metrics being written by the trainer (the Redis
stream entry's time) to the chart having drawn them in chromium, for every epoch of a real run.

Runs the app under uvicorn, a Celery training worker, and Debian's chromium (Playwright); trains
yolo11n on the demo dataset's images and prints p50/p95/max of that latency (goal p95 < 1 s).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/kestrel_bench \\
        .venv/bin/python bench/live_latency.py [--epochs 30] [--imgsz 64]
"""

import argparse
import os
import signal
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    demo_setup,
    free_port,
    session_cookie,
    training_env,
    training_worker,
    web_server,
)

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
# Playwright's sync API keeps an event loop in this thread; this script's ORM reads are plain.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

# Runs in the page before its own scripts: every `epoch` listener, once it has run (the chart is
# updated synchronously, without animation), records now − the event's stream time.
MEASURE = """
window.__epochLatency = [];
const add = EventSource.prototype.addEventListener;
EventSource.prototype.addEventListener = function (type, listener, options) {
  if (type !== "epoch") return add.call(this, type, listener, options);
  return add.call(this, type, function (event) {
    listener.call(this, event);
    window.__epochLatency.push(Date.now() - JSON.parse(event.data).t);
  }, options);
};
"""
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--imgsz", type=int, default=64)
    args = parser.parse_args()

    work = training_env("live-bench")
    import django

    django.setup()
    from playwright.sync_api import sync_playwright

    from training.models import TrainingJob
    from training.services.arguments import TrainParams
    from training.services.jobs import job_submit

    demo = demo_setup(work, "bench-latency@example.com")
    cookie_name, cookie_value = session_cookie(demo.user)
    port = free_port()
    procs = [web_server(port), training_worker()]
    try:
        time.sleep(4)  # both up
        job = job_submit(
            access=demo.access,
            project=demo.project,
            version=demo.version,
            gpu_type_id=demo.gpu.pk,
            params=TrainParams(
                task="detect", model_family="yolo11", model_size="n", weights="scratch",
                epochs=args.epochs, imgsz=args.imgsz, batch=16,
            ),
        )  # fmt: skip
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
            context = browser.new_context()
            context.add_cookies(
                [{"name": cookie_name, "value": cookie_value, "domain": "127.0.0.1", "path": "/"}]
            )  # fmt: skip
            context.add_init_script(MEASURE)
            page = context.new_page()
            page.goto(f"http://127.0.0.1:{port}/w/{demo.team.slug}/training/jobs/{job.pk}/")
            while not (job := TrainingJob.objects.get(pk=job.pk)).is_final:
                time.sleep(0.5)
            time.sleep(1.5)
            latencies = page.evaluate("window.__epochLatency")
            browser.close()
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
    assert job.state == "succeeded", job.error
    latencies.sort()
    p95 = latencies[max(0, round(0.95 * len(latencies)) - 1)]
    print(f"run: {args.epochs} epochs of yolo11n at imgsz {args.imgsz}, {job.state}")
    print(f"epochs seen live on the chart   {len(latencies)} of {args.epochs}")
    print(f"trainer write → chart drawn     p50 {statistics.median(latencies):.0f} ms, "
          f"p95 {p95:.0f} ms, max {latencies[-1]:.0f} ms  (goal p95 < 1000 ms)")  # fmt: skip


if __name__ == "__main__":
    main()
