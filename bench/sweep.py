"""The sweep's figures (issue 27).

1. The optimizer: on a 16-point grid (4 learning rates × 4 mosaic strengths, a seeded,
   deterministic toy objective with one best point), how many trials the sweep's optimizer
   (sweeps.services.optimizer.propose: TPE over a study rebuilt from rows, exactly as
   sweeps.services.advance asks it) needs to propose the best point, over many sweep seeds;
   goal: at most 8 (half the grid). Random search over the same grid (each point once, in a
   random order) is printed beside it.
2. With --overhead, the sweep's own time per trial: what one advance takes to record, propose,
   estimate and submit a trial (database and Optuna, no training); a trial waits for beat
   (`sweeps-advance-due`, every CELERY_BEAT_SCHEDULE seconds) at most once more than a plain
   job does.
3. With --real, the same with real training: submit → first batch of a sweep's trial (the
   sweep's submit, the advance that proposes and starts the trial, then the job as any) against
   a plain job's submit → first batch, alternately, on this machine's training worker (yolo11n,
   1 epoch at 64 px on the demo images); goal: the difference under 2 s.

    .venv/bin/python bench/sweep.py [--seeds 30] [--overhead] [--real [--rounds 3]]
    (--overhead and --real write rows: DATABASE_URL=... of a database of its own)
"""

import argparse
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

LRS = [1e-4, 1e-3, 1e-2, 1e-1]
MOSAICS = [0.0, 0.25, 0.5, 1.0]
GRID = len(LRS) * len(MOSAICS)


def toy_objective(point: dict) -> float:
    """Higher is better; best at lr0 0.01 and mosaic 0.5, every point's value distinct."""
    lr = math.log10(point["lr0"])
    return 1.0 - 0.1 * (lr + 2) ** 2 - 0.37 * (point["mosaic"] - 0.5) ** 2 - 0.003 * lr


def trials_to_best(seed: int) -> int:
    """Trials the sweep's optimizer takes to propose the grid's best point (GRID + 1: never)."""
    from sweeps.services.optimizer import Observed, propose, tpe_startup_trials
    from sweeps.services.space import space_clean, space_dimensions

    dims = space_dimensions(space_clean({"lr0": LRS, "mosaic": MOSAICS}))
    best = max(({"lr0": lr, "mosaic": m} for lr in LRS for m in MOSAICS), key=toy_objective)
    observed: list[Observed] = []
    for number in range(1, GRID + 1):
        point = propose(
            dimensions=dims,
            observed=observed,
            direction="maximize",
            seed=seed,
            number=number,
            startup_trials=tpe_startup_trials(GRID),
        )
        if point == best:
            return number
        observed.append(Observed(number, point, "complete", toy_objective(point)))
    return GRID + 1


def random_to_best(seed: int) -> int:
    order = list(range(GRID))
    random.Random(seed).shuffle(order)
    return order.index(GRID - 1) + 1  # any one point: its place in a random order


def optimizer_figure(seeds: int) -> None:
    tpe = [trials_to_best(seed) for seed in range(seeds)]
    rnd = [random_to_best(seed) for seed in range(seeds)]
    half = GRID // 2
    print(f"Optimizer: trials to reach the best of a {GRID}-point grid, {seeds} sweep seeds")
    for name, found in (("TPE (the sweep's)", tpe), ("random, no repeats", rnd)):
        within = sum(1 for n in found if n <= half)
        print(
            f"  {name:20s} median {statistics.median(found):4.1f}  mean "
            f"{statistics.fmean(found):4.1f}  worst {max(found):2d}  within {half}: "
            f"{within}/{seeds}"
        )
    print(f"  TPE per seed: {tpe}")


def overhead_figure(work: Path) -> None:
    """An advance that starts a trial, timed: record + propose + estimate + job_submit."""
    from django.db import connection

    from bench.common import demo_setup
    from sweeps.services.advance import sweep_advance
    from sweeps.services.submit import sweep_submit
    from training.models import TrainingJob
    from training.services.arguments import TrainParams

    setup = demo_setup(work, "sweep-bench@kestrel.test")
    base = TrainParams(task="detect", model_family="yolo11", model_size="n", epochs=1, imgsz=64)
    sweep = sweep_submit(
        access=setup.access,
        project=setup.project,
        version=setup.version,
        gpu_type_id=setup.gpu.pk,
        base=base,
        space={"lr0": {"low": 1e-4, "high": 1e-1, "log": True}, "imgsz": [64, 96]},
        metric="metrics/mAP50-95(B)",
        n_trials=8,
        parallel=1,
        budget=0,
    )
    started = time.perf_counter()
    sweep_advance(sweep.pk)  # the first: imports Optuna, warms the caches
    first = time.perf_counter() - started
    timings = []
    for _ in range(5):
        TrainingJob.objects.filter(sweep_trial__sweep=sweep).update(state="canceled")
        started = time.perf_counter()
        sweep_advance(sweep.pk)
        timings.append(time.perf_counter() - started)
    trials = sweep.trials.count()
    print(f"Overhead ({connection.vendor}): an advance starting trials took {first:.2f} s cold;")
    print(
        f"  then {statistics.median(timings):.3f} s (median of {len(timings)}), "
        f"{trials} trials started in all"
    )


def _first_batch(job_id: int) -> float:
    """The job's first batch (epoch seconds), once it succeeded."""
    from training.models import TrainingJob

    while not (job := TrainingJob.objects.get(pk=job_id)).is_final:
        time.sleep(0.1)
    assert job.state == "succeeded", job.error
    return job.first_batch_at.timestamp()


def real_overhead_figure(work: Path, rounds: int) -> None:
    """Submit → first batch of a plain job and of a sweep's trial, alternately, with real
    training on this machine's training worker; the advance that a worker would run on the
    sweep's submit runs here, right after it (as the task does on commit)."""
    import dataclasses
    import signal

    from django.conf import settings

    from bench.common import demo_setup, training_worker
    from sweeps.services.advance import sweep_advance
    from sweeps.services.submit import sweep_submit
    from training.services.arguments import TrainParams
    from training.services.jobs import job_submit
    from training.ultralytics_env import ultralytics_env

    setup = demo_setup(work, "sweep-real-bench@kestrel.test")
    base = TrainParams(
        task="detect", model_family="yolo11", model_size="n", weights="scratch", epochs=1,
        imgsz=64, batch=16, extra_args={"plots": False, "lr0": 0.01},
    )  # fmt: skip
    searched = dataclasses.replace(base, extra_args={"plots": False})  # lr0 is the sweep's
    env = {
        **os.environ,
        **ultralytics_env(Path(settings.TRAINING_DIR) / "ultralytics-config", offline=True),
    }
    worker = training_worker(env)
    plain, trial = [], []
    try:
        time.sleep(3)  # the worker connects before the first submit
        # A first job warms what every later one reuses (the version's folder, imports).
        job = job_submit(
            access=setup.access, project=setup.project, version=setup.version,
            gpu_type_id=setup.gpu.pk, params=base, name="warm-up",
        )  # fmt: skip
        _first_batch(job.pk)
        for round_ in range(1, rounds + 1):
            submitted = time.time()
            job = job_submit(
                access=setup.access, project=setup.project, version=setup.version,
                gpu_type_id=setup.gpu.pk, params=base, name=f"plain {round_}",
            )  # fmt: skip
            plain.append(_first_batch(job.pk) - submitted)
            submitted = time.time()
            sweep = sweep_submit(
                access=setup.access, project=setup.project, version=setup.version,
                gpu_type_id=setup.gpu.pk, base=searched, n_trials=1, parallel=1, budget=0,
                space={"lr0": {"low": 1e-3, "high": 1e-1, "log": True}},
                metric="metrics/mAP50-95(B)", name=f"sweep {round_}",
            )  # fmt: skip
            sweep_advance(sweep.pk)
            trial.append(_first_batch(sweep.trials.get().job_id) - submitted)
            print(
                f"round {round_}: submit → first batch: plain job {plain[-1]:.2f} s, "
                f"sweep trial {trial[-1]:.2f} s ({trial[-1] - plain[-1]:+.2f} s)"
            )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
    # Paired by round: a round's two runs share the machine's load at that moment.
    extra = [t - p for t, p in zip(trial, plain, strict=True)]
    print(
        f"Real training ({rounds} rounds, yolo11n 1 epoch at 64 px): submit → first batch "
        f"median {statistics.median(plain):.2f} s plain, {statistics.median(trial):.2f} s a "
        f"sweep's trial; the sweep's own overhead per trial: median {statistics.median(extra):+.2f} "
        f"s, from {min(extra):+.2f} to {max(extra):+.2f} s (goal < 2 s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--overhead", action="store_true")
    parser.add_argument("--real", action="store_true", help="the overhead with real training")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = None
    if args.overhead or args.real:
        from bench.common import training_env

        work = training_env("sweep-bench")  # before django.setup()
    import django

    django.setup()
    optimizer_figure(args.seeds)
    if args.overhead:
        overhead_figure(work)
    if args.real:
        real_overhead_figure(work, args.rounds)


if __name__ == "__main__":
    main()
