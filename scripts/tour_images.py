"""Copy the newcomer's journey screenshots that docs/tour.md shows into docs/tour/, small.

    .venv/bin/python scripts/tour_images.py

Reads var/screenshots/journey-NN-<step>.png, which tests/browser/test_journey.py writes on
every run; each picture is cut to the part of the page worth seeing, scaled to 800 px wide and
saved as a 256-colour PNG (the docs' pictures stay under 100 KB).
"""

import sys
from pathlib import Path

from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "var" / "screenshots"
TOUR = ROOT / "docs" / "tour"
WIDTH = 800
MAX_BYTES = 100_000

# docs/tour/<name>.png: (the journey step, the rows of the 1280-px-wide page to keep)
PICTURES = {
    "01-team": ("invitation-sent", (0, 760)),
    "02-explore": ("demo-dataset", (0, 800)),
    "03-import": ("import-done", (0, 800)),
    "04-health": ("health-report", (0, 640)),
    "05-polygon": ("polygon-drawn", (0, 720)),
    "06-estimates": ("estimates", (0, 760)),  # the estimates table alone
    "07-training-live": ("training-live", (0, 1060)),
    "08-compare": ("compare", (0, 900)),
    "09-try-it": ("demo-model-tried", (0, 900)),
    "10-billing": ("billing", (400, 1750)),  # credits, cost per job, the newest entries
}


def _shot(step: str) -> Path:
    found = sorted(SHOTS.glob(f"journey-[0-9][0-9]-{step}.png"))
    if not found:
        sys.exit(f"No screenshot of step {step!r} in {SHOTS}: run tests/browser/test_journey.py")
    return found[-1]


def _save(image: Image.Image, path: Path) -> int:
    scaled = image.resize((WIDTH, round(image.height * WIDTH / image.width)), Image.LANCZOS)
    small = scaled.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    small.save(path, optimize=True)
    return path.stat().st_size


def main() -> None:
    TOUR.mkdir(parents=True, exist_ok=True)
    for name, (step, rows) in PICTURES.items():
        image = Image.open(_shot(step)).convert("RGB")
        top, bottom = rows
        image = image.crop((0, top, image.width, min(bottom, image.height)))
        path = TOUR / f"{name}.png"
        size = _save(image, path)
        if size > MAX_BYTES:
            sys.exit(f"{path} is {size} bytes; cut it shorter")
        print(f"{path.relative_to(ROOT)}  {size // 1000} KB")


if __name__ == "__main__":
    main()
