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
from datasets.services.thumbnails import thumbnails_make
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
# The try-it pages draw what the model server answers; the database only finds the model (the
# try page's rows are tested on both databases in tests/deploy/test_pixel_predict.py).
TRIED_ON_ANY_DATABASE = "the page draws the model server's answer; the database only finds it"

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

# The try-it canvas against the photo alone: per pixel, the index of the legend colour that,
# blended over the photo at the page's mask opacity, gives it (to within rounding); -1 where none.
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
    const found = [];
    for (let p = 0; p < drawn.length; p += 4) {
      let k = 0;
      for (; k < rgb.length; k++) {
        let ok = true;
        for (let ch = 0; ch < 3 && ok; ch++) {
          const want = photo[p + ch] * (1 - alpha) + rgb[k][ch] * alpha;
          ok = Math.abs(drawn[p + ch] - want) <= 2;
        }
        if (ok) break;
      }
      found.push(k < rgb.length ? k : -1);
    }
    resolve({ width: canvas.width, height: canvas.height, found: found });
  };
  img.src = photoUrl;
})"""


def _upscaled(array: np.ndarray) -> np.ndarray:
    return array.repeat(UPSCALE, axis=0).repeat(UPSCALE, axis=1)


def _png(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(array).save(out, format="PNG")
    return out.getvalue()


HELD_OUT = 11  # a picture index no dataset here trains on
PUBLIC_VAL = (2, 3)  # the val pictures of pixel_version_create(train=2, val=2)


@pytest.fixture(scope="module")
def banded_weights(tmp_path_factory) -> Path:
    photos = [_upscaled(semantic_sample(HELD_OUT)[0])]
    photos += [semantic_sample(k)[0] for k in PUBLIC_VAL]
    target = tmp_path_factory.mktemp("banded") / "banded.pt"
    return _banded_copy(trained_semantic_weights(), target, photos)


def _model(workspace, task: str, weights: Path, names):
    data = weights.read_bytes()
    model = trained_model_row(workspace=workspace, class_names=list(names), task=task, weights=data)
    # The model server's cache is keyed by the weights' hash (see tests/deploy/test_pixel_predict).
    model.weights_sha256 = hashlib.sha256(data).hexdigest()
    model.save(update_fields=["weights_sha256"])
    return model


def _banded_copy(weights: Path, target: Path, photos: list[np.ndarray]) -> Path:
    """The tiny semantic model (one epoch: it calls nearly every pixel "ground") made to split
    pictures into all three classes by one feature of each pixel: its classifier's logit for
    class c becomes c·s·(u·f) − s·(t1 + … + tc), so a pixel is class 0, 1 or 2 as u·f lies
    below t1, between, or above t2: the thirds of u·f over `photos`. Computed by Ultralytics
    like any model's answer."""
    from annotation.assist.predict import _ultralytics_env

    _ultralytics_env()  # offline, before Ultralytics is imported
    import torch
    from ultralytics import YOLO

    features = []
    probe = YOLO(str(weights))
    hook = (
        probe.model.model[-1]
        .classifier[-1]
        .register_forward_hook(lambda _module, args, _out: features.append(args[0].detach()))
    )
    for photo in photos:
        probe.predict(np.ascontiguousarray(photo[..., ::-1]), imgsz=64, verbose=False)
    hook.remove()
    # u: the features' main direction over these pixels, so the thirds lie well apart; the
    # margins stay small, as Ultralytics saves the weights in float16.
    seen = torch.cat([f.permute(0, 2, 3, 1).reshape(-1, f.shape[1]) for f in features]).float()
    u = torch.linalg.svd(seen - seen.mean(0), full_matrices=False).Vh[0]
    t1, t2 = (float(t) for t in torch.quantile(seen @ u, torch.tensor([1 / 3, 2 / 3])))
    s = 4 / (t2 - t1)
    yolo = YOLO(str(weights))
    last = yolo.model.model[-1].classifier[-1]
    with torch.no_grad():
        last.weight.zero_()
        for c in range(3):
            last.weight[c, :, 0, 0] = c * s * u
        last.bias.copy_(torch.tensor([0.0, -s * t1, -s * (t1 + t2)]))
    yolo.save(target)
    return target


def _served_classes(team, model, photo: Path) -> np.ndarray:
    """The class map the predict API answers for `photo` (mask=png), called with an API key."""
    _, key = api_key_create(access=team.access("owner"), name="check", scopes=["predict"])
    with photo.open("rb") as upload:
        answer = Client(headers={"Authorization": f"Bearer {key}"}).post(
            f"/api/v1/models/{model.pk}/predict", {"file": upload, "imgsz": "64", "mask": "png"}
        )
    assert answer.status_code == 200, answer.content
    with PILImage.open(
        io.BytesIO(base64.b64decode(answer.json()["images"][0]["mask"]["data"]))
    ) as m:
        return np.asarray(m)


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


def _assert_semantic_drawn(page, photo: Path, served: np.ndarray) -> list[dict]:
    """The legend lists the classes found with shares summing to 1, and the canvas is the photo
    with each pixel blended with the legend colour of the class the API gave that pixel
    (`served`, its class map)."""
    assert page.evaluate("window.kestrelTry.error()") == ""
    assert page.evaluate("window.kestrelTry.overlaid()")
    shares = page.evaluate("window.kestrelTry.classShares()")
    assert len(shares) >= 2, shares  # the banded model: more than one colour to place
    assert sum(s["share"] for s in shares) == pytest.approx(1.0, abs=1e-3)
    legend = page.locator("[data-testid=try-results] li")
    assert legend.count() == len(shares)
    named = {}
    for i in range(legend.count()):
        row = legend.nth(i)
        named[row.locator(".name").inner_text()] = row
    assert set(named) == {s["name"] for s in shares} and set(named) <= set(SEMANTIC_CLASSES)
    colours, classes = [], []
    for s in shares:
        row = named[s["name"]]
        percent = float(row.locator(".conf").inner_text().rstrip(" %"))
        assert percent == pytest.approx(s["share"] * 100, abs=0.6)
        swatch = row.locator(".swatch").evaluate("(e) => getComputedStyle(e).backgroundColor")
        red, green, blue = (int(v) for v in re.findall(r"\d+", swatch)[:3])
        colours.append(f"#{red:02X}{green:02X}{blue:02X}")
        classes.append(SEMANTIC_CLASSES.index(s["name"]))
        bar = row.locator(".bar span").evaluate("(e) => e.getBoundingClientRect().width")
        assert bar > 0 or s["share"] < 0.01
    assert len(set(colours)) == len(colours), colours
    photo_url = "data:image/png;base64," + base64.b64encode(photo.read_bytes()).decode()
    drawn = page.evaluate(SEMANTIC_DRAWN, [photo_url, colours, 0.45])
    found = np.array(drawn["found"]).reshape(drawn["height"], drawn["width"])
    assert found.shape == served.shape  # drawn at the image's own size
    lookup = np.array([*classes, -1])  # colour index → class; -1 (last) where none explains it
    drawn_classes = lookup[found]
    for s, c in zip(shares, classes, strict=True):
        assert (served == c).mean() == pytest.approx(s["share"], abs=1e-4)
    # Where a photo pixel is near the blend of two colours rounding may pick either; elsewhere
    # every pixel is the class the API gave it, so the RLE was read down its columns.
    agree = (drawn_classes == served).mean()
    assert agree > 0.99, agree
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
    thumbnails_make(blob_ids=list(depth.images.values_list("blob_id", flat=True)))

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
        note = page.inner_text("[data-testid=map-note]")
        assert ("depth map" if dataset.task == "depth" else "mask") in note
        # The 64 px picture is shown enlarged (to 24rem), its map with it.
        picture = page.locator("[data-testid=stage] img:not(.mask-overlay)").bounding_box()
        assert picture["width"] >= 24 * 16 - 1, picture

    _no_problems(browser_problems)


# --- the try-it page ---------------------------------------------------------------------------


@pytest.mark.same_on_any_database(TRIED_ON_ANY_DATABASE)
def test_try_a_semantic_and_a_depth_model(
    new_page,
    team,
    settings,
    inference_server,  # noqa: F811
    banded_weights,
    browser_problems,
    tmp_path,
):
    settings.INFERENCE_URL = inference_server.url
    shoot = _shooter(tmp_path)
    workspace = team.workspace
    semantic = _model(workspace, "semantic", banded_weights, SEMANTIC_CLASSES)
    depth = _model(workspace, "depth", trained_depth_weights(), ["depth"])
    page = new_page("editor")
    log_in(page, team.editor.email)

    # Semantic: a held-out picture; every pixel drawn in its class's colour, shares summing to 1.
    photo = tmp_path / "held-out-semantic.png"
    photo.write_bytes(_png(_upscaled(semantic_sample(HELD_OUT)[0])))
    page.goto(f"/w/{workspace.slug}/models/{semantic.pk}/try/")
    assert page.locator("[data-testid=try-threshold]").is_hidden()  # no confidences to filter
    drop_file(page, photo, mime="image/png")
    page.wait_for_function(READY, timeout=60_000)
    shoot(page, "try-semantic")
    _assert_semantic_drawn(page, photo, _served_classes(team, semantic, photo))
    assert "class" in page.inner_text("[data-testid=try-count]")
    assert page.locator("[data-testid=try-depth-scale]").is_hidden()

    # Depth: min/median/max in metres, the colour ramp between the nearest and the farthest, and
    # under the cursor the depth the API's own 16-bit PNG holds there.
    photo = tmp_path / "held-out-depth.png"
    photo.write_bytes(_png(_upscaled(depth_sample(HELD_OUT)[0])))
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


@pytest.mark.same_on_any_database(TRIED_ON_ANY_DATABASE)
def test_the_public_demo_of_a_semantic_model(
    new_page,
    team,
    stranger,
    settings,
    inference_server,  # noqa: F811
    banded_weights,
    browser_problems,
    tmp_path,
):
    settings.INFERENCE_URL = inference_server.url
    shoot = _shooter(tmp_path)
    version = pixel_version_create(access=team.access("owner"), task="semantic", train=2, val=2)
    dataset = version.dataset
    thumbnails_make(blob_ids=list(dataset.images.values_list("blob_id", flat=True)))
    dataset.is_public = True
    dataset.save(update_fields=["is_public"])
    model = _model(team.workspace, "semantic", banded_weights, SEMANTIC_CLASSES)
    model.dataset_version = version
    model.is_public = True
    model.save(update_fields=["dataset_version", "is_public"])

    page = new_page("stranger")
    log_in(page, stranger.email)
    page.goto(f"/explore/models/{model.pk}/try/")
    samples = page.locator("[data-testid=try-sample]")
    assert samples.count() == 2
    # The val pictures to pick from are shown, each filling its square button.
    page.wait_for_function(
        "() => [...document.querySelectorAll('[data-testid=try-sample] img')]"
        ".every((i) => i.complete && i.naturalWidth >= 48)"  # not the grey placeholder
    )
    for i in range(2):
        button = samples.nth(i).bounding_box()
        picture = samples.nth(i).locator("img").bounding_box()
        assert picture["width"] >= 0.9 * button["width"] > 50, (picture, button)
    shoot(page, "public-samples")
    samples.first.click()
    page.wait_for_function(READY, timeout=60_000)
    shoot(page, "public-semantic")
    sample = dataset.images.filter(split="val").order_by("pk").first()
    photo = tmp_path / "sample.png"
    with default_storage.open(sample.blob.storage_key) as stored:
        photo.write_bytes(stored.read())
    _assert_semantic_drawn(page, photo, _served_classes(team, model, photo))
    _no_problems(browser_problems)
