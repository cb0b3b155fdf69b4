"""What a Kestrel job costs over plain Ultralytics: the same data and arguments trained both
ways in one run, side by side.

Prints, per round and on average: the training wall time (first batch → end) of each and their
ratio (goal ≤ 1.03), and Kestrel's start-up (submit → first batch, goal < 10 s), which plain
Ultralytics has no equivalent of.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/kestrel_bench \\
        .venv/bin/python bench/train_overhead.py [--epochs 5] [--imgsz 160] [--rounds 2]

Uses the demo dataset's images (120 generated 160×160 pictures) and yolo11n from its YAML.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import demo_setup, training_env, training_worker  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

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
    args = parser.parse_args()

    work = training_env("train-bench")
    import django

    django.setup()
    from django.conf import settings

    from training.models import TrainingJob
    from training.services.arguments import TrainParams
    from training.services.jobs import job_submit
    from training.services.materialise import dataset_materialise
    from training.ultralytics_env import ultralytics_env

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
    try:
        time.sleep(3)  # the worker connects before the first submit
        for round_ in range(1, args.rounds + 1):
            # Plain Ultralytics, in its own process, with exactly Kestrel's arguments.
            out = work / f"plain-{round_}.json"
            plain_args = {
                **common,
                "data": data,
                "device": "cpu",
                "amp": False,
                "workers": 0,
                "project": str(work / "plain"),
                "name": f"r{round_}",
                "exist_ok": True,
                "verbose": True,
            }
            start = time.time()
            subprocess.run(
                [sys.executable, "-c", PLAIN, json.dumps(plain_args), str(out)], cwd=ROOT,
                env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            plain = json.loads(out.read_text())
            plain_total = plain["end"] - start
            plain_train = plain["end"] - plain["first_batch"]

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
            results.append((plain_train, kestrel_train, startup))
            print(
                f"round {round_}: plain {plain_train:6.1f} s training ({plain_total:.1f} s with "
                f"start-up) | kestrel {kestrel_train:6.1f} s training ({kestrel_total:.1f} s "
                f"from submit) | ratio {kestrel_train / plain_train:.3f} | "
                f"submit → first batch {startup:.1f} s"
            )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
    plain_sum = sum(r[0] for r in results)
    kestrel_sum = sum(r[1] for r in results)
    print(f"{args.epochs} epochs of yolo11n at imgsz {args.imgsz} on 100+20 demo images, CPU")
    print(
        f"training wall-time ratio kestrel / plain   {kestrel_sum / plain_sum:.3f}  (goal ≤ 1.03)"
    )
    worst = max(r[2] for r in results)
    print(f"submit → first batch                       {worst:.1f} s worst  (goal < 10 s)")


if __name__ == "__main__":
    main()
