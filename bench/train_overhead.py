"""What a Kestrel job costs over plain Ultralytics: the same data and arguments trained both
ways in one run, side by side.

Prints, per round and on average: the training wall time (first batch → end) of each and their
ratio (goal ≤ 1.03), and Kestrel's start-up (submit → first batch, goal < 10 s), which plain
Ultralytics has no equivalent of. Both train on what Kestrel's local provider ("This machine")
picks here: the CPU, or every GPU (`--device 0` says which is expected, and refuses another).
With --samples, each Kestrel job's system samples are checked too: stored, with the GPU's
utilisation and memory when it trained on one, and in its job page and the page's event feed.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/kestrel_bench \\
        .venv/bin/python bench/train_overhead.py [--epochs 5] [--imgsz 160] [--rounds 2]
        [--device cpu|0] [--samples] [--kestrel-only]

Uses the demo dataset's images (120 generated 160×160 pictures) and yolo11n from its YAML.
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import demo_setup, training_env, training_worker  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,127.0.0.1,localhost")  # --samples' requests

# Opens checkpoints through the same restricted loader as Kestrel's trainer (its environment
# forces it, and Ultralytics' final evaluation loads best.pt).
PLAIN = """
import json, sys, time
from training.weights_check import checkpoint_loading_restrict
checkpoint_loading_restrict()
from ultralytics import YOLO
args = json.loads(sys.argv[1]); out = sys.argv[2]
first = []
def on_batch(trainer):
    if not first:
        first.append(time.time())
model = YOLO("yolo11n.yaml")
model.add_callback("on_train_batch_end", on_batch)
model.train(**args)
open(out, "w").write(json.dumps({"first_batch": first[0], "end": time.time()}))
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--imgsz", type=int, default=160)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--device", help="cpu, or GPU indexes (0): refused unless it is what Kestrel trains on here"
    )
    parser.add_argument("--samples", action="store_true", help="check the jobs' system samples")
    parser.add_argument("--kestrel-only", action="store_true", help="no plain Ultralytics runs")
    args = parser.parse_args()

    work = training_env("train-bench")
    import django

    django.setup()
    from django.conf import settings

    from training.models import TrainingJob
    from training.services.arguments import TrainParams
    from training.services.catalog import local_device
    from training.services.jobs import job_submit
    from training.services.materialise import dataset_materialise
    from training.ultralytics_env import ultralytics_env

    # What the local provider gives the trainer (training/providers/local.py); plain gets it too.
    machine = local_device()
    device = ",".join(map(str, range(machine.count))) if machine.kind == "cuda" else "cpu"
    if args.device is not None and args.device != device:
        raise SystemExit(
            f"Kestrel's job trains on {device} here ({machine.description}); --device "
            f"{args.device} would compare two devices"
        )

    demo = demo_setup(work, "bench-train@example.com")
    access, project, version, gpu = demo.access, demo.project, demo.version, demo.gpu
    data = dataset_materialise(version, workdir=settings.TRAINING_DIR)

    env = {
        **os.environ,
        **ultralytics_env(Path(settings.TRAINING_DIR) / "ultralytics-config", offline=True),
    }
    worker = training_worker(env)
    common = {
        "epochs": args.epochs,
        "imgsz": args.imgsz,
        "batch": 16,
        "patience": 100,
        "optimizer": "auto",
        "seed": 0,
    }
    results = []
    samples_ok = []
    try:
        time.sleep(3)  # the worker connects before the first submit
        for round_ in range(1, args.rounds + 1):
            # Plain Ultralytics, in its own process, with exactly Kestrel's arguments.
            plain_args = {
                **common,
                "data": data,
                "device": device,
                # As the supervisor passes them: on a GPU, Ultralytics' own defaults.
                **({"amp": False, "workers": 0} if device == "cpu" else {}),
                "project": str(work / "plain"),
                "name": f"r{round_}",
                "exist_ok": True,
                "verbose": True,
            }
            plain = "plain not run"
            if not args.kestrel_only:
                plain_train, plain_total = plain_run(plain_args, work / f"plain-{round_}.json", env)
                plain = f"plain {plain_train:6.1f} s training ({plain_total:.1f} s with start-up)"

            submitted = time.time()
            job = job_submit(
                access=access,
                project=project,
                version=version,
                gpu_type_id=gpu.pk,
                params=TrainParams(
                    task="detect", model_family="yolo11", model_size="n", weights="scratch",
                    extra_args={}, **common,
                ),
            )  # fmt: skip
            while not (job := TrainingJob.objects.get(pk=job.pk)).is_final:
                time.sleep(0.2)
            assert job.state == "succeeded", job.error
            startup = job.first_batch_at.timestamp() - submitted
            kestrel_train = job.finished_at.timestamp() - job.first_batch_at.timestamp()
            kestrel_total = job.finished_at.timestamp() - submitted
            ratio = "" if args.kestrel_only else f" | ratio {kestrel_train / plain_train:.3f}"
            results.append((None if args.kestrel_only else plain_train, kestrel_train, startup))
            print(
                f"round {round_}: {plain} | kestrel {kestrel_train:6.1f} s training "
                f"({kestrel_total:.1f} s from submit){ratio} | submit → first batch {startup:.1f} s"
            )
            if args.samples:
                samples_ok.append(samples_check(job, demo.user, gpu=device != "cpu"))
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
    print(f"{args.epochs} epochs of yolo11n at imgsz {args.imgsz} on 100+20 demo images, "
          f"device {device} ({machine.description})")  # fmt: skip
    if not args.kestrel_only:
        ratio = sum(r[1] for r in results) / sum(r[0] for r in results)
        print(f"training wall-time ratio kestrel / plain   {ratio:.3f}  (goal ≤ 1.03)")
    worst = max(r[2] for r in results)
    print(f"submit → first batch                       {worst:.1f} s worst  (goal < 10 s)")
    if args.samples:
        print(
            f"system samples stored and on the job page  {'met' if all(samples_ok) else 'NOT met'}"
        )


def plain_run(train_args: dict, out: Path, env: dict) -> tuple[float, float]:
    """(training seconds, seconds with start-up) of plain Ultralytics in a process of its own."""
    start = time.time()
    subprocess.run(
        [sys.executable, "-c", PLAIN, json.dumps(train_args), str(out)], cwd=ROOT,
        env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    plain = json.loads(out.read_text())
    return plain["end"] - plain["first_batch"], plain["end"] - start


def samples_check(job, user, *, gpu: bool) -> bool:
    """Whether `job`'s system samples were stored (with GPU utilisation and memory on a GPU)
    and reach its page: the data the page's script draws from, and its event feed's snapshot.
    Prints what was found."""
    from asgiref.sync import async_to_sync
    from django.test import Client
    from django.urls import reverse

    from training.models import SystemSample

    async def _read(content) -> bytes:
        return b"".join([chunk async for chunk in content])

    stored = [s.values for s in SystemSample.objects.filter(job=job)]
    with_gpu = [v["gpus"][0] for v in stored if v.get("gpus")]
    client = Client()
    client.force_login(user)
    kwargs = {"ws_slug": job.workspace.slug, "pk": job.pk}
    page = client.get(reverse("job_detail", kwargs=kwargs))
    found = re.search(r'<script id="job-live-data" type="application/json">(.*?)</script>',
                      page.content.decode(), re.S)  # fmt: skip
    on_page = json.loads(found[1])["system"] if page.status_code == 200 and found else []
    feed = client.get(reverse("job_events", kwargs=kwargs))  # a finished job's: snapshot, end
    text = async_to_sync(_read)(feed.streaming_content).decode() if feed.status_code == 200 else ""
    snapshot = re.search(r"^event: snapshot\ndata: (.*)$", text, re.M)
    in_feed = json.loads(snapshot[1])["system"] if snapshot else []

    def gpu_count(samples: list[dict]) -> int:
        return sum(1 for s in samples if (s.get("values") or {}).get("gpus"))

    line = (f"  system samples: {len(stored)} stored, {len(on_page)} on the job page, "
            f"{len(in_feed)} in its event feed")  # fmt: skip
    if gpu:
        utils = [g.get("util_percent") or 0 for g in with_gpu]
        memory = [g.get("memory_used_gb") or 0 for g in with_gpu]
        line += (f"; with GPU figures: {len(with_gpu)} stored, {gpu_count(on_page)} on the page, "
                 f"{gpu_count(in_feed)} in the feed; GPU utilisation max {max(utils, default=0)} %, "
                 f"memory used max {max(memory, default=0):.2f} GB")  # fmt: skip
        ok = bool(with_gpu) and len(with_gpu) == len(stored) and max(utils) > 0
        ok = ok and gpu_count(on_page) == len(on_page) > 0 and gpu_count(in_feed) > 0
    else:
        cpu = [v.get("cpu_percent") for v in stored]
        line += f"; CPU only (no GPU figures expected), CPU max {max(cpu, default=0)} %"
        ok = bool(stored) and bool(on_page) and bool(in_feed)
    print(line + f"  ({'met' if ok else 'NOT met'})", flush=True)
    return ok


if __name__ == "__main__":
    main()
