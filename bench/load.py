"""Kestrel under load, as deployed, on this machine's loopback: many clients at once on the
gallery, the job page's live event stream, the predict API and the labels API.

Starts what `make run` runs, each in a process of its own (uvicorn with `--workers`, a Celery
worker, the model server `python -m deploy.inference`), on a PostgreSQL database of its own that
it creates and drops, and seeds it through Kestrel's services: a team, the demo pictures as a
dataset of a few hundred images, a YOLO model built from its YAML and uploaded as a person
would (the worker inspects it), API keys, and a running job. The job's trainer is played by this
script: it takes the job's lease as a worker would and writes batch and epoch events to the
job's Redis stream at a trainer's pace (bench.live_streams.publish), with the supervisor's
heartbeat, so open job pages follow a live run without a training process eating the CPU.

Then, for `--seconds`, closed-loop clients (each sends its next request when the last one is
answered): a quarter hold the job's event stream open and reconnect every 5-15 s with
Last-Event-ID, as a browser does (time to first event, new and resumed); the rest are split
between the gallery (keyset pages and a filter), predictions (a small JPEG, an API key with the
predict scope) and labels (read an image's labels, move a box, write them back with the revision
read; each client has images of its own, so no write is stale). Before that, one client alone
predicts for a while: its p95 is the yardstick for predictions under load, measured in the same
run. Prints requests/s, p50/p95/p99 and errors per route, and the goals, PASS or FAIL:
no errors; gallery p95 < 150 ms; predict p95 under load ≤ 2 × its single-client p95.

    .venv/bin/python bench/load.py [--seconds 60] [--clients 32] [--workers 2] [--strict]

Only 127.0.0.1 is used. Redis: REDIS_URL (and CELERY_BROKER_URL), best a database nothing else
uses (the job's stream and usage counts are keyed by ids of this run's own database).
Exits non-zero on a FAIL only with --strict; every process it started is stopped on exit,
Ctrl-C included.
"""

import argparse
import asyncio
import io
import itertools
import json
import os
import random
import secrets
import shutil
import signal
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    celery_worker,
    demo_setup,
    free_port,
    plan_unlimited_predict,
    processes_stop,
    session_cookie,
    training_env,
    web_server,
)

GALLERY_P95_MS = 150.0
PREDICT_RATIO = 2.0
STREAM_HOLD_SECONDS = (5.0, 15.0)
FIRST_EVENT_TIMEOUT = 10.0
REQUEST_TIMEOUT = 30.0
ROUTES = (
    "gallery page",
    "predict, 1 client alone",
    "predict",
    "labels GET",
    "labels PUT",
    "job events, first event (new)",
    "job events, first event (resumed)",
)


def quantile(ordered: list[float], q: float) -> float:
    """Nearest-rank quantile of sorted samples."""
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


@dataclass
class Stats:
    samples: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    error_lines: list[str] = field(default_factory=list)
    events: int = 0
    streams: int = 0
    resumed: int = 0

    def ok(self, route: str, started: float) -> None:
        self.samples[route].append((time.perf_counter() - started) * 1000)

    def error(self, route: str, what: str) -> None:
        self.errors[route] += 1
        if len(self.error_lines) < 10:
            self.error_lines.append(f"{route}: {what[:200]}")


# --- the database and the data -----------------------------------------------------------------


MARK = "made by bench/load.py"  # its comment: only such a database is ever dropped


def database_create(base: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        found = conn.execute(
            "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
            [name],
        ).fetchone()
        if found and found[0] != MARK:
            raise SystemExit(f"database {name} exists and is not this bench's: pick another")
        if found:  # left by a run that was killed
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
        conn.execute(f"COMMENT ON DATABASE \"{name}\" IS '{MARK}'")


def database_drop(base: str, name: str) -> None:
    import psycopg
    from django.db import connections

    connections.close_all()
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass
class Seeded:
    team_id: int
    team_slug: str
    gallery_urls: list[str]
    image_ids: list[int]
    model_id: int
    predict_key: str
    labels_key: str
    job_id: int
    cookie: str


def seed(work: Path, copies: int) -> Seeded:
    """Everything through Kestrel's services (after django.setup())."""
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.db import transaction
    from django.urls import reverse

    from bench.predict import weights_default
    from datasets.models import DatasetClass, Image
    from training.models import JobState
    from training.process.lease import lease_take
    from training.services.arguments import TrainParams
    from training.services.jobs import job_locked, job_submit, job_transition
    from training.services.models import model_upload
    from workspaces.services.keys import api_key_create

    demo = demo_setup(work, f"bench-load-{secrets.token_hex(3)}@example.com", copies=copies)
    plan_unlimited_predict(demo.team)
    dataset = demo.version.dataset
    slug = demo.team.slug
    _, predict_key = api_key_create(access=demo.access, name="load predict", scopes=["predict"])
    _, labels_key = api_key_create(access=demo.access, name="load labels", scopes=["read", "write"])
    weights = weights_default(work)
    model = model_upload(
        access=demo.access,
        project=demo.project,
        name="load yolo11n",
        task="detect",
        upload=SimpleUploadedFile("yolo11n.pt", weights.read_bytes()),
    )  # the worker inspects it once it runs
    # A job that no worker takes (this run's own training queue): this script plays its
    # trainer, under the lease a worker would take.
    job = job_submit(
        access=demo.access,
        project=demo.project,
        version=demo.version,
        gpu_type_id=demo.gpu.pk,
        params=TrainParams(
            task="detect", model_family="yolo11", model_size="n", epochs=100, imgsz=160, batch=16
        ),
    )
    lease_take(job.pk, "bench-load")
    with transaction.atomic():
        locked = job_locked(job.pk)
        job_transition(locked, JobState.PREPARING, device="bench trainer")
        job_transition(locked, JobState.RUNNING)

    base = reverse("dataset_gallery", kwargs={"ws_slug": slug, "pk": dataset.pk})
    ids = list(Image.objects.filter(dataset=dataset).order_by("pk").values_list("pk", flat=True))
    first_class = DatasetClass.objects.filter(dataset=dataset).order_by("index").first()
    urls = [base] + [f"{base}?after={after}" for after in ids[59::60][:-1]]
    urls += [f"{base}?split=val", f"{base}?class={first_class.pk}"]
    cookie_name, cookie_value = session_cookie(demo.user)
    return Seeded(
        team_id=demo.team.pk,
        team_slug=slug,
        gallery_urls=urls,
        image_ids=ids,
        model_id=model.pk,
        predict_key=predict_key,
        labels_key=labels_key,
        job_id=job.pk,
        cookie=f"{cookie_name}={cookie_value}",
    )


def model_inspected(model_id: int, timeout: float) -> None:
    from training.models import InspectState, TrainedModel

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        model = TrainedModel.objects.get(pk=model_id)
        if model.inspect_state == InspectState.OK:
            return
        if model.inspect_state == InspectState.FAILED:
            raise SystemExit(f"the worker refused the model: {model.inspect_error}")
        time.sleep(0.5)
    raise SystemExit("the worker did not inspect the model in time")


def thumbnails_made(image_ids: list[int], timeout: float) -> int:
    from datasets.models import Image

    deadline = time.monotonic() + timeout
    while True:
        missing = Image.objects.filter(pk__in=image_ids, blob__has_thumbnail=False).count()
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(0.5)


def small_jpeg() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.effect_noise((96, 72), 48).convert("RGB").save(out, format="JPEG", quality=85)
    return out.getvalue()


# --- the clients -------------------------------------------------------------------------------


class Routes:
    """One call of each route, timed into `stats`."""

    def __init__(self, base: str, seeded: Seeded, image: bytes, imgsz: int):
        import httpx

        self.seeded = seeded
        self.image = image
        self.imgsz = imgsz
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
        timeout = httpx.Timeout(REQUEST_TIMEOUT)
        self.browser = httpx.AsyncClient(
            base_url=base, headers={"Cookie": seeded.cookie}, limits=limits, timeout=timeout
        )
        self.predict_client = httpx.AsyncClient(
            base_url=base,
            headers={"Authorization": f"Bearer {seeded.predict_key}"},
            limits=limits,
            timeout=timeout,
        )
        self.labels_client = httpx.AsyncClient(
            base_url=base,
            headers={"Authorization": f"Bearer {seeded.labels_key}"},
            limits=limits,
            timeout=timeout,
        )

    async def close(self) -> None:
        for client in (self.browser, self.predict_client, self.labels_client):
            await client.aclose()

    async def gallery(self, stats: Stats, url: str) -> None:
        route = "gallery page"
        started = time.perf_counter()
        try:
            r = await self.browser.get(url)
        except Exception as e:  # noqa: BLE001 - every failure is counted, whatever it is
            return stats.error(route, f"{type(e).__name__}: {e}")
        if r.status_code != 200 or b"</html>" not in r.content:
            return stats.error(route, f"HTTP {r.status_code} {url}")
        stats.ok(route, started)

    async def predict(self, stats: Stats, route: str = "predict") -> None:
        started = time.perf_counter()
        try:
            r = await self.predict_client.post(
                f"/api/v1/models/{self.seeded.model_id}/predict",
                files={"file": ("load.jpg", self.image, "image/jpeg")},
                data={"imgsz": str(self.imgsz)},
            )
        except Exception as e:  # noqa: BLE001
            return stats.error(route, f"{type(e).__name__}: {e}")
        if r.status_code != 200 or "images" not in r.json():
            return stats.error(route, f"HTTP {r.status_code}: {r.text[:150]}")
        stats.ok(route, started)

    async def labels_get(self, stats: Stats, image_id: int) -> dict | None:
        started = time.perf_counter()
        try:
            r = await self.labels_client.get(f"/api/v1/images/{image_id}/labels")
        except Exception as e:  # noqa: BLE001
            return stats.error("labels GET", f"{type(e).__name__}: {e}")
        if r.status_code != 200:
            return stats.error("labels GET", f"HTTP {r.status_code}: {r.text[:150]}")
        stats.ok("labels GET", started)
        return r.json()

    async def labels(self, stats: Stats, image_id: int, step: int) -> None:
        """Read an image's labels, move its first box a little, write them back."""
        payload = await self.labels_get(stats, image_id)
        if payload is None:
            return
        labels = payload["labels"]
        for label in labels[:1]:  # a person nudges a box left and right
            if label["kind"] == "box":
                label["data"][0] = min(
                    0.9, max(0.1, label["data"][0] + (0.002 if step % 2 else -0.002))
                )
        started = time.perf_counter()
        try:
            r = await self.labels_client.put(
                f"/api/v1/images/{image_id}/labels",
                content=json.dumps({"revision": payload["revision"], "labels": labels}),
            )
        except Exception as e:  # noqa: BLE001
            return stats.error("labels PUT", f"{type(e).__name__}: {e}")
        if r.status_code != 200:
            return stats.error("labels PUT", f"HTTP {r.status_code}: {r.text[:150]}")
        stats.ok("labels PUT", started)

    async def watch(self, stats: Stats, deadline: float, rng: random.Random) -> None:
        """Hold the job's event stream for a while from its first event, drop it and resume it
        with Last-Event-ID, until `deadline` (time.perf_counter())."""
        url = f"/w/{self.seeded.team_slug}/jobs/{self.seeded.job_id}/events"
        last_id = None
        loop = asyncio.get_running_loop()
        while deadline - time.perf_counter() > 0.5:
            route = f"job events, first event ({'resumed' if last_id else 'new'})"
            headers = {"Accept": "text/event-stream"}
            if last_id:
                headers["Last-Event-ID"] = last_id
            started = time.perf_counter()
            first = False
            stats.streams += 1
            stats.resumed += bool(last_id)
            try:
                async with asyncio.timeout(FIRST_EVENT_TIMEOUT) as limit:
                    async with self.browser.stream("GET", url, headers=headers) as r:
                        if r.status_code != 200:
                            stats.error(route, f"HTTP {r.status_code}")
                            await asyncio.sleep(1)
                            continue
                        async for line in r.aiter_lines():
                            if line.startswith("id: "):
                                last_id = line[4:]
                            elif line.startswith("event: "):
                                stats.events += 1
                                if not first:
                                    first = True
                                    stats.ok(route, started)
                                    left = deadline - time.perf_counter()
                                    hold = max(0.0, min(left, rng.uniform(*STREAM_HOLD_SECONDS)))
                                    limit.reschedule(loop.time() + hold)
                                if line == "event: end":
                                    break
                        stats.error(route, "the stream ended while the job runs")
            except TimeoutError:  # the hold is over, or no event came
                if not first:
                    stats.error(route, f"no event in {FIRST_EVENT_TIMEOUT:.0f} s")
            except Exception as e:  # noqa: BLE001
                stats.error(route, f"{type(e).__name__}: {e}")


async def trainer(job_id: int, seconds: float) -> None:
    """The job's events at a trainer's pace (bench.live_streams.publish), and the supervisor's
    heartbeat, so pages see a live run and no late-machine notice."""
    from bench.live_streams import publish
    from training.streams import beat_key, training_redis

    redis = training_redis()

    async def beat() -> None:
        while True:
            redis.set(beat_key(job_id), str(time.time()), ex=600)
            await asyncio.sleep(1)

    beating = asyncio.create_task(beat())
    try:
        await publish(job_id, seconds)
    finally:
        beating.cancel()


async def load(routes: Routes, seeded: Seeded, *, clients: int, seconds: float, single: float):
    stats = Stats()
    # Every web worker's first call of a route imports and connects: not what is measured.
    warm, left = Stats(), time.perf_counter() + 1
    await asyncio.gather(
        *(
            call
            for i in range(4)
            for call in (
                routes.predict(warm),
                routes.gallery(warm, seeded.gallery_urls[i % len(seeded.gallery_urls)]),
                routes.labels_get(warm, seeded.image_ids[i]),
                routes.watch(warm, left, random.Random(i)),
            )
        )
    )
    if warm.errors:
        raise SystemExit("warming up failed: " + "; ".join(warm.error_lines))
    # One client alone first: the yardstick for predictions under load.
    for _ in range(3):
        await routes.predict(Stats())
    single_deadline = time.perf_counter() + single
    while time.perf_counter() < single_deadline:
        await routes.predict(stats, "predict, 1 client alone")

    watchers = max(1, clients // 4)
    others = clients - watchers
    roles = [("gallery", "predict", "labels")[i % 3] for i in range(others)]
    labellers = roles.count("labels")
    deadline = time.perf_counter() + seconds
    rng = random.Random(0)

    async def requester(role: str, index: int) -> None:
        urls = itertools.cycle(seeded.gallery_urls[index % len(seeded.gallery_urls) :]
                               + seeded.gallery_urls[: index % len(seeded.gallery_urls)])  # fmt: skip
        mine = seeded.image_ids[index::labellers] if role == "labels" else []
        step = 0
        while time.perf_counter() < deadline:
            if role == "gallery":
                await routes.gallery(stats, next(urls))
            elif role == "predict":
                await routes.predict(stats)
            else:
                await routes.labels(stats, mine[step % len(mine)], step // len(mine))
            step += 1

    counters: dict[str, int] = defaultdict(int)
    tasks = [asyncio.create_task(trainer(seeded.job_id, seconds + 1))]
    for role in roles:
        tasks.append(asyncio.create_task(requester(role, counters[role])))
        counters[role] += 1
    tasks += [
        asyncio.create_task(routes.watch(stats, deadline, random.Random(rng.random())))
        for _ in range(watchers)
    ]
    started = time.perf_counter()
    try:
        async with asyncio.timeout(seconds + REQUEST_TIMEOUT + 15):  # stops by itself
            await asyncio.gather(*tasks[1:])
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return stats, time.perf_counter() - started, {"watch": watchers, **counters}


# --- the report --------------------------------------------------------------------------------


def report(stats: Stats, elapsed: float, single: float) -> list[tuple[bool, str]]:
    print(f"\n{'route':36} {'requests':>8} {'req/s':>7} {'p50 ms':>8} {'p95 ms':>8} "
          f"{'p99 ms':>8} {'errors':>6}")  # fmt: skip
    total = errors = 0
    for route in ROUTES:
        samples = sorted(stats.samples.get(route, []))
        n = len(samples)
        wall = single if route == "predict, 1 client alone" else elapsed
        err = stats.errors.get(route, 0)
        if route != "predict, 1 client alone":
            total += n
            errors += err
        if not samples:
            print(f"{route:36} {n:8d} {'':>7} {'-':>8} {'-':>8} {'-':>8} {err:6d}")
            continue
        print(f"{route:36} {n:8d} {n / wall:7.1f} {quantile(samples, 0.5):8.1f} "
              f"{quantile(samples, 0.95):8.1f} {quantile(samples, 0.99):8.1f} {err:6d}")  # fmt: skip
    print(f"{'all, under load':36} {total:8d} {total / elapsed:7.1f} {'':>8} {'':>8} {'':>8} "
          f"{errors:6d}")  # fmt: skip
    print(f"job event streams: {stats.streams} opened ({stats.resumed} resumed with "
          f"Last-Event-ID), {stats.events} events received")  # fmt: skip
    for line in stats.error_lines:
        print(f"  error: {line}")

    def p95(route: str) -> float | None:
        samples = sorted(stats.samples.get(route, []))
        return quantile(samples, 0.95) if samples else None

    all_errors = sum(stats.errors.values())
    gallery, alone, loaded = p95("gallery page"), p95("predict, 1 client alone"), p95("predict")
    goals = [(all_errors == 0, f"no errors ({all_errors})")]
    goals.append(
        (gallery is not None and gallery < GALLERY_P95_MS,
         f"gallery p95 < {GALLERY_P95_MS:.0f} ms ({gallery or 0:.1f} ms)")
    )  # fmt: skip
    goals.append(
        (alone is not None and loaded is not None and loaded <= PREDICT_RATIO * alone,
         f"predict p95 under load ≤ {PREDICT_RATIO:.0f} × its single-client p95 "
         f"({loaded or 0:.1f} ms vs {alone or 0:.1f} ms: {(loaded or 0) / (alone or 1):.2f}×)")
    )  # fmt: skip
    return goals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60, help="under load (default 60)")
    parser.add_argument("--clients", type=int, default=32, help="at once (default 32, at least 4)")
    parser.add_argument("--workers", type=int, default=2, help="uvicorn worker processes")
    parser.add_argument("--images", type=int, default=360, help="in the gallery's dataset")
    parser.add_argument("--imgsz", type=int, default=320, help="of predictions")
    parser.add_argument("--device", default="cpu", help="the model server's (cpu, cuda:0)")
    parser.add_argument("--database", default="bench_load", help="created, then dropped")
    parser.add_argument("--postgres", default="postgres://postgres@127.0.0.1:5432")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a goal fails")
    args = parser.parse_args()
    if args.clients < 4:
        parser.error("--clients must be at least 4 (one per route)")
    if args.seconds <= 0:
        parser.error("--seconds must be positive")
    if not args.database.replace("_", "").isalnum():
        parser.error("--database: letters, digits and _ only")

    # A SIGTERM (or a closed terminal) unwinds like Ctrl-C: the finally below stops everything.
    # Ctrl-C too when started in the background, where a shell hands SIGINT over ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, lambda number, _frame: sys.exit(128 + number))
    work = training_env("load")  # this run's own media, training folder and training queue
    (work / "var" / "static").mkdir(parents=True)  # STATIC_ROOT: WhiteNoise warns without one
    tag = f"load-{os.getpid()}"
    os.environ.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=f"{args.postgres}/{args.database}",
        KESTREL_VAR_DIR=str(work / "var"),
        SECRET_KEY=secrets.token_urlsafe(40),
        INFERENCE_TOKEN=secrets.token_hex(16),
        DEBUG="false",  # as served: no query log, cached templates
        ALLOWED_HOSTS="127.0.0.1",
        CELERY_DEFAULT_QUEUE=f"default-{tag}",  # no other worker takes this run's tasks
        CACHE_KEY_PREFIX=f"bench-{tag}",
        YOLO_OFFLINE="1",
        YOLO_AUTOINSTALL="0",
    )
    procs = []
    created = False
    seeded = None
    try:
        database_create(args.postgres, args.database)
        created = True
        import django

        django.setup()
        import logging

        logging.getLogger("httpx").setLevel(logging.WARNING)
        from django.conf import settings

        from bench.predict import Server

        t = time.perf_counter()
        seeded = seed(work, copies=max(1, round(args.images / 120)))
        print(f"seeded {len(seeded.image_ids)} images, a model, two keys and a running job in "
              f"{time.perf_counter() - t:.1f} s", flush=True)  # fmt: skip
        model_server = Server("shared", "--device", args.device)
        procs.append(model_server.proc)
        os.environ["INFERENCE_URL"] = model_server.url
        procs.append(celery_worker(settings.CELERY_TASK_DEFAULT_QUEUE, "--concurrency", "2"))
        port = free_port()
        procs.append(web_server(port, "--workers", str(args.workers)))
        base = f"http://127.0.0.1:{port}"
        model_inspected(seeded.model_id, timeout=180)
        model_server.wait()
        asyncio.run(run(args, seeded, base))
    finally:
        processes_stop(procs)
        if created:
            try:
                database_drop(args.postgres, args.database)
            except Exception as e:  # noqa: BLE001 - said, not hidden
                print(f"could not drop database {args.database}: {e}", file=sys.stderr)
            redis_forget(tag, seeded)
        shutil.rmtree(work, ignore_errors=True)  # its media, model and training folder


async def run(args, seeded: Seeded, base: str) -> None:
    import httpx

    deadline = time.monotonic() + 120
    async with httpx.AsyncClient(base_url=base, headers={"Cookie": seeded.cookie}) as client:
        while True:
            try:  # signed in, the login page sends you on: any answer but an error will do
                if (await client.get("/accounts/login/", timeout=2)).status_code < 500:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the web server did not answer")
            await asyncio.sleep(0.3)
        for url in seeded.gallery_urls:  # warm; the pages ask the worker for thumbnails
            await client.get(url)
    missing = await asyncio.to_thread(thumbnails_made, seeded.image_ids, 90)
    if missing:
        print(f"({missing} thumbnails still being made)")
    routes = Routes(base, seeded, small_jpeg(), args.imgsz)
    single = max(2.0, args.seconds / 6)
    try:
        stats, elapsed, roles = await load(
            routes, seeded, clients=args.clients, seconds=args.seconds, single=single
        )
    finally:
        await routes.close()
    print(f"\n{args.clients} clients for {args.seconds:.0f} s on 127.0.0.1: "
          f"{roles.get('gallery', 0)} gallery, {roles.get('predict', 0)} predict, "
          f"{roles.get('labels', 0)} labels, {roles['watch']} holding the job's event stream; "
          f"web: {args.workers} uvicorn workers; model server on {args.device}, imgsz "
          f"{args.imgsz}; this machine: {os.cpu_count()} cores for everything, the clients "
          f"included")  # fmt: skip
    goals = report(stats, elapsed, single)
    print()
    for passed, text in goals:
        print(f"{'PASS' if passed else 'FAIL'}  {text}")
    if args.strict and not all(passed for passed, _ in goals):
        raise SystemExit(1)


def redis_forget(tag: str, seeded: Seeded | None) -> None:
    """This run's keys in Redis: its queues and cache, its job's stream and counters, its
    workspace's pending usage counts (their ids are those of this run's database, now gone)."""
    import redis
    from django.conf import settings

    from deploy.usage import PENDING

    try:
        for url in {settings.REDIS_URL, settings.CELERY_BROKER_URL}:
            client = redis.Redis.from_url(url, socket_timeout=2)
            keys = list(client.scan_iter(f"*{tag}*"))
            if keys:
                client.delete(*keys)
        if seeded is None:
            return
        client = redis.Redis.from_url(settings.TRAINING_REDIS_URL, socket_timeout=2)
        keys = list(client.scan_iter(f"training:job:{seeded.job_id}:*"))
        if keys:
            client.delete(*keys)
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
        ours = [f for f in client.hkeys(PENDING) if f.startswith(f"{seeded.team_id}|".encode())]
        if ours:
            client.hdel(PENDING, *ours)
    except redis.RedisError as e:
        print(f"could not clean Redis up: {e}", file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        print("interrupted: what it started is stopped, its database dropped", file=sys.stderr)
        sys.exit(130)
