"""Semantic segmentation and depth from the outside, in chromium: a Datumaro VOC export dropped
on the Upload page and a depth dataset, their overlays loaded on the gallery's tiles and the
image page, laid exactly over their pictures; the try-it page drawing a semantic model's classes
(every pixel of the canvas a blend of the photo with a legend colour, in the legend's shares)
and a depth model's colour map with the depth under the cursor in metres, read from the very
16-bit PNG the API answers; and the public demo page of a semantic model drawing the same."""

import base64
import hashlib
import io
import re
from pathlib import Path

import numpy as np
import pytest
from django.core.files.storage import default_storage
from django.test import Client
from PIL import Image as PILImage

from datasets.models import Dataset
from tests.browser.helpers import drop_file, log_in
from tests.deploy.conftest import inference_server  # noqa: F401
from tests.pixel_data import (
    SEMANTIC_CLASSES,
    depth_sample,
    pixel_version_create,
    semantic_sample,
    trained_depth_weights,
    trained_semantic_weights,
)
from tests.training.factories import trained_model_row
from workspaces.services.keys import api_key_create

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

VOC_EXPORT = (
    Path(__file__).parents[1] / "datasets" / "fixtures" / "pixel" / "voc_segmentation_datumaro.zip"
)
READY = "() => window.kestrelTry && window.kestrelTry.ready()"
UPSCALE = 5  # the synthetic pictures are 64 × 48: sent at 320 × 240, as a photo would be

# Each overlay image on the page: loaded, its opaque pixels counted, and where it lies compared
# with the picture it covers (the <img> before it in the same box).
OVERLAYS = """(selector) => [...document.querySelectorAll(selector)].map((overlay) => {
  const under = overlay.parentElement.querySelector("img:not(.mask-overlay)");
  const a = overlay.getBoundingClientRect();
  const b = under.getBoundingClientRect();
  let opaque = 0;
  if (overlay.complete && overlay.naturalWidth) {
    const c = document.createElement("canvas");
    c.width = overlay.naturalWidth;
    c.height = overlay.naturalHeight;
    const ctx = c.getContext("2d");
    ctx.drawImage(overlay, 0, 0);
    const data = ctx.getImageData(0, 0, c.width, c.height).data;
    for (let i = 3; i < data.length; i += 4) if (data[i] > 0) opaque += 1;
  }
  return {
    loaded: overlay.complete && overlay.naturalWidth > 0,
    opaque: opaque,
    pixels: overlay.naturalWidth * overlay.naturalHeight,
    offset: Math.max(Math.abs(a.left - b.left), Math.abs(a.top - b.top),
                     Math.abs(a.width - b.width), Math.abs(a.height - b.height)),
    shown: a.width * a.height,
  };
})"""

# The try-it canvas against the photo alone: per pixel, which legend colour (blended over the
# photo at the page's mask opacity, to within rounding) explains it; -1 where none does.
SEMANTIC_DRAWN = """([photoUrl, colours, alpha]) => new Promise((resolve) => {
  const img = new Image();
  img.onload = () => {
    const canvas = document.querySelector("[data-testid=try-canvas]");
    const plain = document.createElement("canvas");
    plain.width = canvas.width;
    plain.height = canvas.height;
    const pctx = plain.getContext("2d");
    pctx.drawImage(img, 0, 0, plain.width, plain.height);
    const photo = pctx.getImageData(0, 0, plain.width, plain.height).data;
    const drawn = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
    const rgb = colours.map((hex) => [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16)));
    const counts = new Array(colours.length + 1).fill(0);
    for (let p = 0; p < drawn.length; p += 4) {
      let found = -1;
      for (let k = 0; k < rgb.length && found < 0; k++) {
        let ok = true;
        for (let ch = 0; ch < 3 && ok; ch++) {
          const want = photo[p + ch] * (1 - alpha) + rgb[k][ch] * alpha;
          ok = Math.abs(drawn[p + ch] - want) <= 2;
        }
        if (ok) found = k;
      }
      counts[found + 1] += 1;
    }
    resolve({ width: canvas.width, height: canvas.height, unexplained: counts[0],
              perColour: counts.slice(1) });
  };
  img.src = photoUrl;
})"""


def _png(array: np.ndarray, upscale: int = UPSCALE) -> bytes:
    image = PILImage.fromarray(array)
    image = image.resize((image.width * upscale, image.height * upscale), PILImage.NEAREST)
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def _model(workspace, task: str, weights: Path, names):
    data = weights.read_bytes()
    model = trained_model_row(workspace=workspace, class_names=list(names), task=task, weights=data)
    # The model server's cache is keyed by the weights' hash (see tests/deploy/test_pixel_predict).
    model.weights_sha256 = hashlib.sha256(data).hexdigest()
    model.save(update_fields=["weights_sha256"])
    return model


def _overlays(page, selector: str) -> list[dict]:
    """The overlays under `selector` once the browser has loaded them all (the gallery's are
    lazy: the page's load event does not wait for them); a broken one fails the wait."""
    page.wait_for_function(
        "(s) => [...document.querySelectorAll(s)].every((i) => i.complete && i.naturalWidth)",
        arg=selector,
    )
    return page.evaluate(OVERLAYS, selector)


def _shooter(tmp_path: Path):
    counter = iter(range(1, 100))

    def shoot(page, name: str) -> Path:
        path = tmp_path / f"{next(counter):02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return shoot


def _no_problems(problems) -> None:
    assert not problems.console_errors, problems.console_errors
    assert not problems.page_errors, problems.page_errors
    assert not problems.bad_responses, problems.bad_responses
    assert not problems.failed_requests, problems.failed_requests


def _assert_semantic_drawn(page, photo: Path) -> list[dict]:
    """The legend lists classes whose shares sum to 1, and the canvas is the photo with each
    pixel blended with one legend colour, each colour over its class's share of the pixels."""
    assert page.evaluate("window.kestrelTry.error()") == ""
    assert page.evaluate("window.kestrelTry.overlaid()")
    shares = page.evaluate("window.kestrelTry.classShares()")
    assert shares, "a class in some pixel"
    assert sum(s["share"] for s in shares) == pytest.approx(1.0, abs=1e-3)
    assert {s["name"] for s in shares} <= set(SEMANTIC_CLASSES)
    legend = page.locator("[data-testid=try-results] li")
    assert legend.count() == len(shares)
    rows = [legend.nth(i) for i in range(legend.count())]
    named = {row.locator(".name").inner_text(): row for row in rows}
    assert set(named) == {s["name"] for s in shares}
    colours = []
    for s in shares:
        row = named[s["name"]]
        percent = float(row.locator(".conf").inner_text().rstrip(" %"))
        assert percent == pytest.approx(s["share"] * 100, abs=0.6)
        swatch = row.locator(".swatch").evaluate("(e) => getComputedStyle(e).backgroundColor")
        red, green, blue = (int(v) for v in re.findall(r"\d+", swatch)[:3])
        colours.append(f"#{red:02X}{green:02X}{blue:02X}")
        bar = row.locator(".bar span").evaluate("(e) => e.getBoundingClientRect().width")
        assert bar > 0 or s["share"] < 0.01
    photo_url = "data:image/png;base64," + base64.b64encode(photo.read_bytes()).decode()
    drawn = page.evaluate(SEMANTIC_DRAWN, [photo_url, colours, 0.45])
    total = drawn["width"] * drawn["height"]
    with PILImage.open(photo) as picture:
        assert (drawn["width"], drawn["height"]) == picture.size
    # Rounding where a photo pixel sits near two blends aside, every pixel is one class's.
    assert drawn["unexplained"] <= total * 0.01, drawn
    for s, count in zip(shares, drawn["perColour"], strict=True):
        assert count / total == pytest.approx(s["share"], abs=0.02), (s, drawn)
    return shares


# --- the gallery and the image page ------------------------------------------------------------


def test_mask_and_depth_overlays_on_the_gallery_and_the_image_page(
    new_page, team, celery_worker_process, browser_problems, tmp_path
):
    shoot = _shooter(tmp_path)
    page = new_page("owner")
    log_in(page, team.owner.email)
    slug = team.workspace.slug

    # A Datumaro VOC segmentation export, as CVAT gives it, through the Upload page.
    page.goto(f"/w/{slug}/datasets/new/")
    page.fill("input[name=name]", "VOC masks")
    page.select_option("select[name=task]", "semantic")
    with page.expect_navigation():
        page.click("form button[type=submit]")
    with page.expect_navigation():
        page.click("[data-testid=add-images]")
    page.set_input_files("[data-testid=pick-files]", str(VOC_EXPORT))
    page.click("#start-upload")
    page.wait_for_url(re.compile(r"/imports/\d+/$"), timeout=60_000)
    page.wait_for_selector("[data-testid=import-status][data-status=succeeded]", timeout=90_000)
    shoot(page, "voc-imported")
    voc = Dataset.objects.get(name="VOC masks")
    assert voc.task == "semantic" and voc.images.count() == 2

    depth = pixel_version_create(access=team.access("owner"), task="depth", train=2, val=1).dataset

    for dataset, count, kind in ((voc, 2, "classes"), (depth, 3, "depth map")):
        page.goto(f"/w/{slug}/datasets/{dataset.pk}/images/")
        tiles = _overlays(page, "[data-testid=tile-mask]")
        shoot(page, f"gallery-{dataset.task}")
        assert len(tiles) == count, tiles
        for tile in tiles:
            assert tile["loaded"], tiles
            assert tile["opaque"] > 0.2 * tile["pixels"], tiles  # it shows the map
            assert tile["offset"] <= 1 and tile["shown"] > 0, tiles  # exactly over its picture
        assert kind in page.inner_text("[data-testid=gallery]")

        page.locator("[data-testid=gallery] .thumb").first.click()
        page.wait_for_url(re.compile(r"/images/\d+/$"))
        (stage,) = _overlays(page, "[data-testid=mask-overlay]")
        shoot(page, f"image-{dataset.task}")
        assert stage["loaded"] and stage["opaque"] > 0.2 * stage["pixels"], stage
        assert stage["offset"] <= 1 and stage["shown"] > 0, stage

    _no_problems(browser_problems)


# --- the try-it page ---------------------------------------------------------------------------


def test_try_a_semantic_and_a_depth_model(
    new_page,
    team,
    settings,
    inference_server,  # noqa: F811
    browser_problems,
    tmp_path,
):
    settings.INFERENCE_URL = inference_server.url
    shoot = _shooter(tmp_path)
    workspace = team.workspace
    semantic = _model(workspace, "semantic", trained_semantic_weights(), SEMANTIC_CLASSES)
    depth = _model(workspace, "depth", trained_depth_weights(), ["depth"])
    page = new_page("editor")
    log_in(page, team.editor.email)

    # Semantic: a held-out picture; every pixel drawn in its class's colour, shares summing to 1.
    photo = tmp_path / "held-out-semantic.png"
    photo.write_bytes(_png(semantic_sample(11)[0]))
    page.goto(f"/w/{workspace.slug}/models/{semantic.pk}/try/")
    assert page.locator("[data-testid=try-threshold]").is_hidden()  # no confidences to filter
    drop_file(page, photo, mime="image/png")
    page.wait_for_function(READY, timeout=60_000)
    shoot(page, "try-semantic")
    _assert_semantic_drawn(page, photo)
    assert "class" in page.inner_text("[data-testid=try-count]")
    assert page.locator("[data-testid=try-depth-scale]").is_hidden()

    # Depth: min/median/max in metres, the colour ramp between the nearest and the farthest, and
    # under the cursor the depth the API's own 16-bit PNG holds there.
    photo = tmp_path / "held-out-depth.png"
    photo.write_bytes(_png(depth_sample(11)[0]))
    page.goto(f"/w/{workspace.slug}/models/{depth.pk}/try/")
    drop_file(page, photo, mime="image/png")
    page.wait_for_function(READY, timeout=60_000)
    assert page.evaluate("window.kestrelTry.error()") == ""
    figures = page.evaluate("window.kestrelTry.depthFigures()")
    assert 0 < figures["min"] <= figures["median"] <= figures["max"], figures
    legend = page.inner_text("[data-testid=try-results]")
    for word, value in (("nearest", "min"), ("median", "median"), ("farthest", "max")):
        assert re.search(rf"{word}\s+{figures[value]:.2f} m", legend), legend
    scale = page.locator("[data-testid=try-depth-scale]")
    assert scale.is_visible()
    assert scale.locator(".near").inner_text() == f"{figures['min']:.2f} m"
    assert scale.locator(".far").inner_text() == f"{figures['max']:.2f} m"

    _, key = api_key_create(access=team.access("owner"), name="check", scopes=["predict"])
    with photo.open("rb") as upload:
        answer = Client(headers={"Authorization": f"Bearer {key}"}).post(
            f"/api/v1/models/{depth.pk}/predict", {"file": upload, "imgsz": "64"}
        )
    assert answer.status_code == 200, answer.content
    served = answer.json()["images"][0]["depth"]
    with PILImage.open(io.BytesIO(base64.b64decode(served["data"]))) as decoded:
        values = np.asarray(decoded).astype(np.int64)
    height, width = values.shape
    assert (width, height) == (64 * UPSCALE, 48 * UPSCALE)
    canvas = page.locator("[data-testid=try-canvas]")
    box = canvas.bounding_box()
    for fx, fy in ((0.3, 0.1), (0.5, 0.5), (0.8, 0.9)):
        x, y = int(fx * width), int(fy * height)
        want = values[y, x] / served["scale"]
        assert page.evaluate("([x, y]) => window.kestrelTry.depthAt(x, y)", [x, y]) == (
            pytest.approx(want, abs=1e-9)
        )
        page.mouse.move(
            box["x"] + (x + 0.5) / width * box["width"],
            box["y"] + (y + 0.5) / height * box["height"],
        )
        readout = page.inner_text("[data-testid=try-depth-readout]")
        assert readout == f"Depth here: {want:.2f} m", (readout, want)
    shoot(page, "try-depth")
    _no_problems(browser_problems)


# --- the public demo page ----------------------------------------------------------------------


def test_the_public_demo_of_a_semantic_model(
    new_page,
    team,
    stranger,
    settings,
    inference_server,  # noqa: F811
    browser_problems,
    tmp_path,
):
    settings.INFERENCE_URL = inference_server.url
    shoot = _shooter(tmp_path)
    version = pixel_version_create(access=team.access("owner"), task="semantic", train=2, val=2)
    dataset = version.dataset
    dataset.is_public = True
    dataset.save(update_fields=["is_public"])
    model = _model(team.workspace, "semantic", trained_semantic_weights(), SEMANTIC_CLASSES)
    model.dataset_version = version
    model.is_public = True
    model.save(update_fields=["dataset_version", "is_public"])

    page = new_page("stranger")
    log_in(page, stranger.email)
    page.goto(f"/explore/models/{model.pk}/try/")
    samples = page.locator("[data-testid=try-sample]")
    assert samples.count() == 2
    samples.first.click()
    page.wait_for_function(READY, timeout=60_000)
    shoot(page, "public-semantic")
    sample = dataset.images.filter(split="val").order_by("pk").first()
    photo = tmp_path / "sample.png"
    with default_storage.open(sample.blob.storage_key) as stored:
        photo.write_bytes(stored.read())
    _assert_semantic_drawn(page, photo)
    _no_problems(browser_problems)
