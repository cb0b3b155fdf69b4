"""How long the labelling assistants take, measured where the tests only check their answers:
GrabCut outlining a potted plant in coco8 (from the box drawn around it), and the filter that
drops suggestions which trace a label already there (100 suggestions against 500 polygons).
Goals: GrabCut under 10 s, the filter under 2 s (the editor waits on both). Prints; asserts none.

    .venv/bin/python bench/assist.py [--repeat 5]
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from annotation import assist  # noqa: E402

COCO = ROOT.parent / "shared" / "datasets" / "coco8"
PLANT = COCO / "images" / "train" / "000000000030.jpg"


def plant_box() -> tuple[float, float, float, float]:
    line = (COCO / "labels" / "train" / "000000000030.txt").read_text().splitlines()[0]
    cx, cy, w, h = (float(v) for v in line.split()[1:5])
    return cx, cy, w, h


def overlapping_shapes(seed: int = 0) -> tuple[list, list]:
    rng = np.random.default_rng(seed)

    def polygon(cx, cy, r):
        angles = np.sort(rng.uniform(0, 2 * np.pi, 12))
        points = np.stack([cx + r * np.cos(angles), cy + r * np.sin(angles)], axis=1)
        return np.clip(points, 0, 1).reshape(-1).tolist()

    centres = rng.uniform(0.05, 0.95, (500, 2))
    labels = [("polygon", i % 3, polygon(x, y, 0.03)) for i, (x, y) in enumerate(centres)]
    suggestions = [
        ("polygon", i % 3 + 3 * (i % 2), [v + 0.002 for v in data])
        for i, (_, _, data) in enumerate(labels[:100])
    ]
    return suggestions, labels


def timed(call, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    box = plant_box()
    suggestions, labels = overlapping_shapes()
    rows = [
        ("GrabCut, the plant in 000000000030.jpg", 10.0, lambda: assist.grabcut_polygon(PLANT, box)),
        ("suggestions filter, 100 × 500 polygons", 2.0,
         lambda: assist.suggestions_filter(suggestions, labels)),
    ]  # fmt: skip
    print(f"{'what':44} {'median s':>9} {'max s':>7} {'goal s':>7}  verdict")
    for name, goal, call in rows:
        times = timed(call, args.repeat)
        median = statistics.median(times)
        verdict = "ok" if max(times) < goal else "SLOW"
        print(f"{name:44} {median:9.3f} {max(times):7.3f} {goal:7.1f}  {verdict}")


if __name__ == "__main__":
    main()
