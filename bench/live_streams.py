"""Many open job pages on one web process: memory and CPU of the ASGI server while N browsers
hold the live event stream of a running job and a trainer writes events at its usual pace.

Starts uvicorn (one process) on a free port, opens N event streams with a logged-in session,
publishes batch events (4/s), epoch events (1/s), log lines and system samples for a while, and
prints the server's RSS and CPU, and how many events each client received.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/kestrel_bench \\
        .venv/bin/python bench/live_streams.py [--clients 200] [--seconds 20]
"""

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import free_port, session_cookie, web_server  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")


async def client(port: int, path: str, cookie: str, counts: list, index: int, ready) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    first = True
    try:
        while line := await reader.readline():
            if os.environ.get("BENCH_DEBUG") and index == 0 and counts[0] < 2:
                print("client 0:", line[:200])
            if line.startswith(b"event: "):
                counts[index] += 1
                if first:
                    first = False
                    ready()
    except (ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


async def publish(job_id: int, seconds: float) -> int:
    from training.streams import stream_key, training_redis

    redis = training_redis()
    seq, sent, start, epoch = 0, 0, time.monotonic(), 0
    while time.monotonic() - start < seconds:
        for tick in range(4):
            seq += 1
            data = {"epoch": epoch + 1, "epochs": 100, "batch": tick + 1, "batches": 4,
                    "batch_size": 16, "loss": [1.0, 2.0, 1.5]}  # fmt: skip
            kind = "batch"
            if tick == 3:
                epoch += 1
                kind = "epoch"
                data = {"epoch": epoch, "epochs": 100, "metrics": {"metrics/mAP50(B)": 0.1},
                        "seconds": 1.0}  # fmt: skip
            fields = {"j": str(job_id), "a": "1", "s": str(seq), "t": kind, "d": json.dumps(data)}
            redis.xadd(stream_key(job_id), fields)
            sent += 1
            await asyncio.sleep(0.25)
    return sent


SLOW_CLIENTS = 20
SLOW_EVENTS = int(os.environ.get("SLOW_EVENTS", "3000"))


async def slow_consumers(port: int, path: str, cookie: str, job_id: int, proc) -> tuple:
    """Clients that open the stream and never read it: the server must not queue for them."""
    from training.streams import stream_key, training_redis

    writers = []
    for _ in range(SLOW_CLIENTS):
        _, writer = await asyncio.open_connection("127.0.0.1", port, limit=1024)
        writer.transport.pause_reading()  # never read a byte
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nCookie: {cookie}\r\n\r\n".encode())
        writers.append(writer)
    await asyncio.sleep(2)
    before = proc.memory_info().rss / 2**20
    redis = training_redis()
    line = "x" * 4000
    for seq in range(1, SLOW_EVENTS + 1):
        fields = {"j": str(job_id), "a": "1", "s": str(10_000 + seq), "t": "log",
                  "d": json.dumps({"lines": [line]})}  # fmt: skip
        redis.xadd(stream_key(job_id), fields)
        if seq % 500 == 0:
            await asyncio.sleep(0.5)
    await asyncio.sleep(3)
    after = proc.memory_info().rss / 2**20
    for writer in writers:
        writer.close()
    return before, after


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20)
    args = parser.parse_args()

    import django

    django.setup()
    import psutil
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from datasets.models import Dataset, DatasetVersion
    from training.models import JobState, TrainingJob
    from training.services.catalog import gpu_catalog_seed
    from workspaces.models import Project, User
    from workspaces.services.workspaces import workspace_create_team

    gpu_catalog_seed()
    user, _ = User.objects.get_or_create(email="bench-live@example.com")
    team = workspace_create_team(user=user, name=f"bench live {time.time():.0f}")
    project = Project.objects.create(workspace=team, name="p", created_by=user)
    dataset = Dataset.objects.create(workspace=team, name="d", task="detect")
    version = DatasetVersion.objects.create(
        dataset=dataset, number=1, content_hash="0" * 64, manifest_key="none"
    )
    from training.models import GpuType

    job = TrainingJob.objects.create(
        workspace=team, project=project, dataset_version=version,
        gpu_type=GpuType.objects.get(slug="local"), task="detect", model_family="yolo11",
        model_size="n", epochs=100, imgsz=640, batch=16, state=JobState.RUNNING, attempts=1,
    )  # fmt: skip
    cookie_name, cookie_value = session_cookie(user)
    cookie = f"{cookie_name}={cookie_value}"

    port = free_port()
    server = web_server(port)
    proc = psutil.Process(server.pid)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        idle_rss = proc.memory_info().rss / 2**20
        path = f"/w/{team.slug}/jobs/{job.pk}/events"

        async def run() -> tuple[list, int, float, float, float]:
            counts = [0] * args.clients
            opened = asyncio.Event()
            ready_count = 0

            def ready():
                nonlocal ready_count
                ready_count += 1
                if ready_count == args.clients:
                    opened.set()

            start = time.monotonic()
            tasks = [
                asyncio.create_task(client(port, path, cookie, counts, i, ready))
                for i in range(args.clients)
            ]
            try:
                await asyncio.wait_for(opened.wait(), 120)
            except TimeoutError:
                raise SystemExit(f"only {ready_count} of {args.clients} streams opened") from None
            connect_s = time.monotonic() - start
            open_rss = proc.memory_info().rss / 2**20
            cpu_before = sum(proc.cpu_times()[:2])
            sent = await publish(job.pk, args.seconds)
            await asyncio.sleep(1.5)
            cpu = sum(proc.cpu_times()[:2]) - cpu_before
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return counts, sent, connect_s, open_rss, cpu

        counts, sent, connect_s, open_rss, cpu = asyncio.run(run())
        peak_rss = proc.memory_info().rss / 2**20
        slow = asyncio.run(slow_consumers(port, path, cookie, job.pk, proc))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        started = time.monotonic()
        server.wait(timeout=30)
        shutdown_s = time.monotonic() - started
        TrainingJob.objects.filter(pk=job.pk).delete()
    received = sorted(c - 1 for c in counts)  # minus the snapshot
    print(f"clients                         {args.clients} on one uvicorn process")
    print(f"all streams open (snapshot in)  {connect_s:.1f} s")
    print(f"server RSS idle / open / end    {idle_rss:.0f} / {open_rss:.0f} / {peak_rss:.0f} MiB"
          f"  ({(open_rss - idle_rss) * 1024 / args.clients:.0f} KiB per open stream)")  # fmt: skip
    print(f"server CPU while streaming      {cpu:.1f} s over {args.seconds:.0f} s"
          f" = {100 * cpu / args.seconds:.0f}% of one core")  # fmt: skip
    print(f"events published                {sent}")
    print(f"server shutdown with streams open  {shutdown_s:.1f} s")
    print(f"slow consumers ({SLOW_CLIENTS} that never read, {SLOW_EVENTS} events of 4 KiB "
          f"= {SLOW_EVENTS * 4 * SLOW_CLIENTS // 1024} MiB owed): server RSS "
          f"{slow[0]:.0f} → {slow[1]:.0f} MiB")  # fmt: skip
    print(f"events received per client      min {received[0]}, median "
          f"{received[len(received) // 2]}, max {received[-1]}")  # fmt: skip


if __name__ == "__main__":
    main()
