"""How quickly the mask editor opens and how smooth a brush stroke is on a big semantic image: a
4000 × 3000 photo-like JPEG with a stored mask (a few class regions), opened in Debian's
chromium (headless, software rendering: a worst case).

Prints the open time (page load until the image and its mask are shown) and, for brush strokes
fitted to the screen and zoomed in 4×, the median and p95 of the time from a pointer event to
the end of the frame that shows it, and of the canvas drawing alone (mask rectangle rewritten
and composited: the editor records each frame's draw time). Prints numbers; asserts none.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/kestrel_bench \\
        .venv/bin/python bench/mask_editor.py [--steps 120]
"""

import argparse
import hashlib
import io
import os
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
WIDTH, HEIGHT = 4000, 3000

# In the page: a brush stroke of `steps` pointer moves (a wavy line across the view), each
# timed from the event to the end of the frame after it.
STROKE = """
async (steps) => {
  const canvas = document.querySelector("[data-testid=editor-canvas]");
  const rect = canvas.getBoundingClientRect();
  const cx = rect.left + rect.width / 2, cy = rect.top + rect.height / 2;
  const frame = () => new Promise((resolve) => requestAnimationFrame(() => resolve(performance.now())));
  const at = (i) => [cx - 300 + (600 * i) / steps, cy + 120 * Math.sin((i / steps) * Math.PI * 4)];
  const [x0, y0] = at(0);
  canvas.dispatchEvent(new PointerEvent("pointerdown", { clientX: x0, clientY: y0, button: 0, buttons: 1, pointerId: 1, bubbles: true }));
  await frame();
  const out = [];
  for (let i = 1; i <= steps; i++) {
    const [x, y] = at(i);
    const t0 = performance.now();
    canvas.dispatchEvent(new PointerEvent("pointermove", { clientX: x, clientY: y, buttons: 1, pointerId: 1, bubbles: true }));
    out.push((await frame()) - t0);
  }
  const [x1, y1] = at(steps);
  canvas.dispatchEvent(new PointerEvent("pointerup", { clientX: x1, clientY: y1, button: 0, pointerId: 1, bubbles: true }));
  return out;
}
"""


def _jpeg() -> bytes:
    from PIL import Image as PILImage

    noise = PILImage.effect_noise((WIDTH, HEIGHT), 60).convert("RGB")
    gradient = PILImage.linear_gradient("L").resize((WIDTH, HEIGHT)).convert("RGB")
    out = io.BytesIO()
    PILImage.blend(noise, gradient, 0.5).save(out, format="JPEG", quality=85)
    return out.getvalue()


def _mask():
    """A few class regions (a road, blobs, a border), 255 elsewhere."""
    import cv2
    import numpy as np

    mask = np.full((HEIGHT, WIDTH), 255, np.uint8)
    mask[2000:, :] = 0
    for i in range(40):
        cv2.circle(mask, (100 + i * 97, 600 + (i * 211) % 1200), 60 + i % 5 * 30, 1 + i % 6, -1)
    mask[:40, :] = 7
    return mask


def _setup():
    from django.core.files.base import ContentFile
    from django.core.files.storage import default_storage
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    from billing.plans import plans_seed
    from datasets.models import Blob, DatasetClass, Image
    from datasets.services.datasets import dataset_create
    from datasets.services.pixel_maps import pixel_map_save
    from workspaces.models import User
    from workspaces.selectors import workspace_access_for_user
    from workspaces.services.workspaces import workspace_create_team

    plans_seed()
    user, _ = User.objects.get_or_create(email="bench-masks@example.com")
    team = workspace_create_team(user=user, name=f"bench masks {time.time():.0f}")
    access = workspace_access_for_user(user=user, slug=team.slug)
    dataset = dataset_create(access=access, name="big scenes", task="semantic")
    for i in range(8):
        DatasetClass.objects.create(dataset=dataset, index=i, name=f"c{i}")
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
    pixel_map_save(image=image, array=_mask(), user=user)
    return user, f"/w/{team.slug}/datasets/{dataset.pk}/images/{image.pk}/annotate/"


def _line(name: str, values: list[float]) -> str:
    values = sorted(values)
    p95 = values[max(0, round(0.95 * len(values)) - 1)]
    return (
        f"{name:<34} median {statistics.median(values):7.2f} ms   p95 {p95:7.2f} ms"
        f"   n={len(values)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=120)
    args = parser.parse_args()

    training_env("mask-editor")
    import django

    django.setup()
    from playwright.sync_api import sync_playwright

    user, path = _setup()
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
                "() => window.kestrelEditor && window.kestrelEditor.imageLoaded()"
                " && window.kestrelMasks && window.kestrelMasks.ready()",
                timeout=120_000,
            )
            # The first frame with the mask in it has been drawn.
            page.evaluate("() => new Promise((r) => requestAnimationFrame(() => r()))")
            opened = time.monotonic() - started
            print(f"image {WIDTH}×{HEIGHT} with its mask, chromium headless, software canvas")
            print(f"{'open → image and mask shown':<34} {opened:7.2f} s")
            for zoom in ("fitted", "zoomed in 4×"):
                page.keyboard.press("f")
                if zoom != "fitted":
                    for _ in range(6):  # 1.25⁶ ≈ 4
                        page.keyboard.press("+")
                page.wait_for_timeout(300)
                page.evaluate("window.kestrelEditor.drawTimes()")
                latency = page.evaluate(STROKE, args.steps)
                draws = page.evaluate("window.kestrelEditor.drawTimes()")
                print(_line(f"brush stroke ({zoom}) input→frame", latency))
                print(_line(f"brush stroke ({zoom}) draw", draws))
            started = time.monotonic()
            page.keyboard.press("Control+s")
            page.wait_for_function(
                "() => document.querySelector('[data-testid=save-state]').dataset.state"
                " === 'saved' && window.kestrelEditor.revision() >= 2",
                timeout=120_000,
            )
            print(f"{'save (PNG made in page + PUT)':<34} {time.monotonic() - started:7.2f} s")
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=15)


if __name__ == "__main__":
    main()
