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

    .venv/bin/python bench/sweep.py [--seeds 30] [--overhead]
    (--overhead writes rows: DATABASE_URL=... of a database of its own)
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=30)
    parser.add_argument("--overhead", action="store_true")
    args = parser.parse_args()
    work = None
    if args.overhead:
        from bench.common import training_env

        work = training_env("sweep-bench")  # before django.setup()
    import django

    django.setup()
    optimizer_figure(args.seeds)
    if args.overhead:
        overhead_figure(work)


if __name__ == "__main__":
    main()
