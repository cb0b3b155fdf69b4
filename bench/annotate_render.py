"""How smooth the labelling editor is on a big image: a 6000 × 4000 photo-sized JPEG with 500
boxes, opened in Debian's chromium (headless, software rendering: a worst case).

Pans (space + drag) and zooms (mouse wheel) with real input events and prints, for each, the
median and p95 of the time from an input event to the end of the frame that shows it, and of the
canvas drawing alone (the editor records each frame's draw time). Prints numbers; asserts none.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/kestrel_bench \\
        .venv/bin/python bench/annotate_render.py [--boxes 500] [--steps 120]
"""

import argparse
import hashlib
import io
import os
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import free_port, session_cookie, training_env, web_server  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost")
os.environ.setdefault("DEBUG", "false")
# Playwright's sync API keeps an event loop in this thread; this script's ORM calls are plain.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
WIDTH, HEIGHT = 6000, 4000

# In the page: one input event, then the time until the frame after it has been drawn (the
# editor's own requestAnimationFrame callback runs before this one, registered later).
INPUT_TO_FRAME = """
async ([kind, steps]) => {
  const canvas = document.querySelector("[data-testid=editor-canvas]");
  const rect = canvas.getBoundingClientRect();
  const cx = rect.left + rect.width / 2, cy = rect.top + rect.height / 2;
  const frame = () => new Promise((resolve) => requestAnimationFrame(() => resolve(performance.now())));
  const out = [];
  if (kind === "pan") {
    document.dispatchEvent(new KeyboardEvent("keydown", { key: " ", bubbles: true }));
    canvas.dispatchEvent(new PointerEvent("pointerdown", { clientX: cx, clientY: cy, button: 0, buttons: 1, pointerId: 1, bubbles: true }));
  }
  await frame();
  for (let i = 0; i < steps; i++) {
    const t0 = performance.now();
    if (kind === "pan") {
      const a = (i / steps) * Math.PI * 4;
      canvas.dispatchEvent(new PointerEvent("pointermove", { clientX: cx + 300 * Math.cos(a), clientY: cy + 200 * Math.sin(a), buttons: 1, pointerId: 1, bubbles: true }));
    } else {
      const dy = (Math.floor(i / 20) % 2 ? 1 : -1) * 120;
      canvas.dispatchEvent(new WheelEvent("wheel", { clientX: cx + 150, clientY: cy - 80, deltaY: dy, bubbles: true, cancelable: true }));
    }
    out.push((await frame()) - t0);
  }
  if (kind === "pan") {
    canvas.dispatchEvent(new PointerEvent("pointerup", { clientX: cx, clientY: cy, button: 0, pointerId: 1, bubbles: true }));
    document.dispatchEvent(new KeyboardEvent("keyup", { key: " ", bubbles: true }));
  }
  return out;
}
"""


def _jpeg() -> bytes:
    """A photo-sized JPEG with detail everywhere (noise over a gradient), so decoding and
    scaling cost what a real photo's would."""
    from PIL import Image as PILImage

    noise = PILImage.effect_noise((WIDTH, HEIGHT), 60).convert("RGB")
    gradient = PILImage.linear_gradient("L").resize((WIDTH, HEIGHT)).convert("RGB")
    out = io.BytesIO()
    PILImage.blend(noise, gradient, 0.5).save(out, format="JPEG", quality=85)
    return out.getvalue()


def _setup(boxes: int):
    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from billing.plans import plans_seed
    from datasets.models import Blob, DatasetClass, Image, Label
    from datasets.services.datasets import dataset_create
    from workspaces.models import User
    from workspaces.selectors import workspace_access_for_user
    from workspaces.services.workspaces import workspace_create_team

    plans_seed()
    user, _ = User.objects.get_or_create(email="bench-annotate@example.com")
    team = workspace_create_team(user=user, name=f"bench annotate {time.time():.0f}")
    access = workspace_access_for_user(user=user, slug=team.slug)
    dataset = dataset_create(access=access, name="big photos", task="detect")
    classes = [
        DatasetClass.objects.create(dataset=dataset, index=i, name=f"c{i}") for i in range(8)
    ]
    data = _jpeg()
    sha = hashlib.sha256(data).hexdigest()
    blob, _ = Blob.objects.get_or_create(
        sha256=sha,
        defaults={
            "size": len(data),
            "content_type": "image/jpeg",
            "width": WIDTH,
            "height": HEIGHT,
        },
    )
    if not default_storage.exists(blob.storage_key):
        default_storage.save(blob.storage_key, ContentFile(data))
    image = Image.objects.create(dataset=dataset, blob=blob, filename="big.jpg")
    rng = random.Random(7)
    labels = []
    for _ in range(boxes):
        w, h = rng.uniform(0.01, 0.12), rng.uniform(0.01, 0.12)
        cx, cy = rng.uniform(w / 2, 1 - w / 2), rng.uniform(h / 2, 1 - h / 2)
        labels.append(
            Label(image=image, dataset_class=rng.choice(classes), kind="box", data=[cx, cy, w, h])
        )
    Label.objects.bulk_create(labels)
    Image.objects.filter(pk=image.pk).update(label_count=boxes)
    return user, f"/w/{team.slug}/datasets/{dataset.pk}/images/{image.pk}/annotate/"


def _line(name: str, values: list[float]) -> str:
    values = sorted(values)
    p95 = values[max(0, round(0.95 * len(values)) - 1)]
    return f"{name:<28} median {statistics.median(values):7.2f} ms   p95 {p95:7.2f} ms   n={len(values)}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--boxes", type=int, default=500)
    parser.add_argument("--steps", type=int, default=120)
    args = parser.parse_args()

    training_env("annotate-render")
    import django

    django.setup()
    from playwright.sync_api import sync_playwright

    user, path = _setup(args.boxes)
    cookie_name, cookie_value = session_cookie(user)
    port = free_port()
    server = web_server(port)
    base = f"http://127.0.0.1:{port}"
    try:
        time.sleep(3)
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            context = browser.new_context(viewport={"width": 1600, "height": 1000})
            context.add_cookies([{"name": cookie_name, "value": cookie_value, "url": base}])
            page = context.new_page()
            started = time.monotonic()
            page.goto(base + path)
            page.wait_for_function(
                "() => window.kestrelEditor && window.kestrelEditor.ready()"
                " && window.kestrelEditor.imageLoaded()",
                timeout=120_000,
            )
            print(f"image {WIDTH}×{HEIGHT}, {args.boxes} boxes, chromium headless, software canvas")
            print(f"{'open → image and labels shown':<28} {time.monotonic() - started:7.2f} s")
            page.evaluate("window.kestrelEditor.drawTimes()")
            for kind, zoom in [("pan", "fitted"), ("zoom", "fitted"), ("pan", "zoomed in 4×")]:
                page.keyboard.press("f")
                if zoom != "fitted":
                    for _ in range(6):  # 1.25⁶ ≈ 4
                        page.keyboard.press("+")
                page.wait_for_timeout(200)
                page.evaluate("window.kestrelEditor.drawTimes()")
                latency = page.evaluate(INPUT_TO_FRAME, [kind, args.steps])
                draws = page.evaluate("window.kestrelEditor.drawTimes()")
                print(_line(f"{kind} ({zoom}) input→frame", latency))
                print(_line(f"{kind} ({zoom}) draw", draws))
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=15)


if __name__ == "__main__":
    main()
