"""Does the estimator learn this machine? Three calibration jobs train for real on the local
provider, then the estimate of a fourth job of another model size is compared with its actual
training time (first batch → end). Goals: the first job's estimate, made with no calibration
at all (what a user's first job on a GPU type gets), within ±50% of its actual time; the fourth
job's, calibrated by the three before it, within ±20%.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/kestrel_bench_estimator \\
        .venv/bin/python bench/estimator_calibration.py

The database is dropped and created afresh (the calibration of "This machine" is every finished
local job in it). Uses the demo dataset (100 train + 20 val generated pictures).
"""

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

# (model size, imgsz, epochs): three to calibrate on, then one to predict.
CALIBRATION = [("n", 96, 3), ("n", 160, 2), ("n", 128, 3)]
TARGET = ("s", 128, 2)


def _fresh_database() -> None:
    url = os.environ.get("DATABASE_URL", "")
    name = url.rsplit("/", 1)[-1]
    if not url.startswith("postgres") or "bench" not in name:
        sys.exit("Set DATABASE_URL to a PostgreSQL database with 'bench' in its name.")
    base = url.rsplit("/", 1)[0] + "/postgres"
    for sql in (f'DROP DATABASE IF EXISTS "{name}"', f'CREATE DATABASE "{name}"'):
        subprocess.run(["psql", base, "-qc", sql], check=True)  # noqa: S603, S607


def main() -> None:
    _fresh_database()
    work = training_env("estimator-bench")
    import django

    django.setup()
    from django.conf import settings

    from training.estimator import config_of_job, estimate
    from training.models import TrainingJob
    from training.services.arguments import TrainParams
    from training.services.jobs import job_submit
    from training.ultralytics_env import ultralytics_env

    demo = demo_setup(work, "bench-estimator@example.com")
    env = {
        **os.environ,
        **ultralytics_env(Path(settings.TRAINING_DIR) / "ultralytics-config", offline=True),
    }
    worker = training_worker(env)

    def run(size: str, imgsz: int, epochs: int):
        params = TrainParams(
            task="detect", model_family="yolo11", model_size=size, weights="scratch",
            epochs=epochs, imgsz=imgsz, batch=16, patience=100, optimizer="auto", seed=0,
            extra_args={},
        )  # fmt: skip
        job = job_submit(
            access=demo.access, project=demo.project, version=demo.version,
            gpu_type_id=demo.gpu.pk, params=params,
        )  # fmt: skip
        predicted = estimate(config_of_job(job), demo.gpu)
        while not (job := TrainingJob.objects.get(pk=job.pk)).is_final:
            time.sleep(0.5)
        assert job.state == "succeeded", job.error
        actual = (job.finished_at - job.first_batch_at).total_seconds()
        startup = (job.first_batch_at - job.started_at).total_seconds()
        return job, predicted, actual, startup

    try:
        time.sleep(3)  # the worker connects before the first submit
        print("job                      predicted (range)             actual train  start-up")
        first = None
        for size, imgsz, epochs in [*CALIBRATION, TARGET]:
            job, e, actual, startup = run(size, imgsz, epochs)
            first = first or (e.seconds, actual + startup)
            # The estimate covers start → end: start-up plus training.
            print(
                f"yolo11{size} {imgsz:4d}px {epochs} ep   "
                f"{e.seconds:6.0f} s ({e.seconds_low}–{e.seconds_high})  "
                f"calibrated by {e.calibration_jobs}   "
                f"{actual:7.1f} s   {startup:5.1f} s   total {actual + startup:6.1f} s"
            )
        first_error = first[0] / first[1] - 1
        print(
            f"\nfirst job, uncalibrated: predicted {first[0]} s, actual {first[1]:.1f} s "
            f"(start → end), error {first_error:+.1%} (goal within ±50%): "
            f"{'PASS' if abs(first_error) <= 0.5 else 'FAIL'}"
        )
        total_actual = actual + startup
        error = e.seconds / total_actual - 1
        print(
            f"fourth job (yolo11{TARGET[0]} at {TARGET[1]} px, {TARGET[2]} epochs): predicted "
            f"{e.seconds} s, actual {total_actual:.1f} s (start → end), error {error:+.1%} "
            f"(goal within ±20%): {'PASS' if abs(error) <= 0.2 else 'FAIL'}"
        )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)


if __name__ == "__main__":
    main()
