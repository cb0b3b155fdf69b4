"""The editor on per-pixel datasets, in chromium. Semantic: paint a stroke with the brush, erase
across it, undo and redo, save, and find exactly that mask stored; fill a polygon; accept a
GrabCut region. Depth: the value under the cursor in metres, exact to the 16-bit value, over
the image and over the map beside it; a reviewer approves the map."""

import io

import numpy as np
import pytest
from PIL import Image as PILImage

from datasets.models import Image, LabelStatus, PixelMap
from datasets.services.pixel_maps import pixel_map_load, pixel_map_save
from tests.browser.helpers import editor_at, editor_open, editor_saved, log_in
from tests.datasets.factories import DatasetClassFactory, DatasetFactory, ImageFactory, blob_for
from tests.workspaces.factories import MembershipFactory, UserFactory, WorkspaceFactory
from workspaces.models import Role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

W, H = 320, 240
MASKS_READY = "() => window.kestrelMasks && window.kestrelMasks.ready()"


@pytest.fixture
def team(plans):
    workspace = WorkspaceFactory(name="Raptor Lab", slug="raptor-lab")
    people = {}
    for name, role, reviewer in [("editor", Role.EDITOR, False), ("reviewer", Role.EDITOR, True)]:
        people[name] = UserFactory(email=f"{name}@raptor.test")
        MembershipFactory(workspace=workspace, user=people[name], role=role, is_reviewer=reviewer)
    return workspace, people


def _photo(width: int, height: int) -> bytes:
    """Dark noise with a bright square in the middle right: an object GrabCut can find."""
    rng = np.random.default_rng(3)
    pixels = rng.integers(20, 70, (height, width, 3), dtype=np.uint8)
    pixels[80:160, 200:280] = (230, 200, 40)
    out = io.BytesIO()
    PILImage.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def _url(image: Image) -> str:
    ds = image.dataset
    return f"/w/{ds.workspace.slug}/datasets/{ds.pk}/images/{image.pk}/annotate/"


def _open(page, image):
    editor_open(page, _url(image))
    page.wait_for_function(MASKS_READY)


def _stroke(page, start, end, steps=12):
    page.mouse.move(*editor_at(page, *start))
    page.mouse.down()
    page.mouse.move(*editor_at(page, *end), steps=steps)
    page.mouse.up()


def _histogram(page) -> dict:
    return {int(k): v for k, v in page.evaluate("window.kestrelMasks.histogram()").items()}


def _distance_to_segment(a, b) -> np.ndarray:
    """Each pixel centre's distance to the segment a → b (image pixels)."""
    ys, xs = np.mgrid[0:H, 0:W] + 0.5
    (ax, ay), (bx, by) = a, b
    dx, dy = bx - ax, by - ay
    t = np.clip(((xs - ax) * dx + (ys - ay) * dy) / (dx * dx + dy * dy), 0, 1)
    return np.hypot(xs - (ax + t * dx), ys - (ay + t * dy))


def test_paint_erase_undo_redo_save_then_fill_and_accept_a_region(
    new_page, browser_problems, team, tmp_path
):
    workspace, people = team
    dataset = DatasetFactory(workspace=workspace, task="semantic", name="Streets")
    for i, name in enumerate(["road", "car", "sign"]):
        DatasetClassFactory(dataset=dataset, index=i, name=name)
    image = ImageFactory(dataset=dataset, blob=blob_for(_photo(W, H)))
    page = new_page("mask editor")
    log_in(page, people["editor"].email)
    _open(page, image)
    assert page.get_attribute("[data-tool=brush]", "aria-pressed") == "true"
    assert _histogram(page) == {255: W * H}

    # Key 2: paint "car" (index 1). A 12 px brush along y = 120 from x = 64 to x = 224.
    page.keyboard.press("2")
    assert page.inner_text("[data-testid=brush-size]") == "12"
    _stroke(page, (0.2, 0.5), (0.7, 0.5))
    after_stroke = _histogram(page)
    assert set(after_stroke) == {1, 255}
    assert 160 * 12 < after_stroke[1] < 160 * 12 + 200  # the line plus its round ends

    # Eraser (E), two sizes larger (]]: 24 px), across the stroke at x = 144.
    page.keyboard.press("e")
    page.keyboard.press("]")
    page.keyboard.press("]")
    assert page.inner_text("[data-testid=brush-size]") == "24"
    _stroke(page, (0.45, 0.3), (0.45, 0.7))
    after_erase = _histogram(page)
    assert 0 < after_erase[1] < after_stroke[1] - 24 * 10

    page.keyboard.press("Control+z")
    assert _histogram(page) == after_stroke
    page.keyboard.press("Control+z")
    assert _histogram(page) == {255: W * H}
    assert page.is_disabled("[data-action=undo]")
    page.keyboard.press("Control+Shift+z")
    page.keyboard.press("Control+Shift+z")
    assert _histogram(page) == after_erase
    assert page.is_disabled("[data-action=redo]")

    page.keyboard.press("Control+s")
    editor_saved(page, 1)
    stored = pixel_map_load(PixelMap.objects.get(image=image))
    assert stored.shape == (H, W) and set(np.unique(stored)) == {1, 255}
    stroke = _distance_to_segment((64, 120), (224, 120))
    erased = _distance_to_segment((144, 72), (144, 168))
    assert (stored[stroke > 6 + 1.5] == 255).all()  # nothing painted off the stroke
    assert (stored[(stroke < 6 - 1.5) & (erased > 12 + 1.5)] == 1).all()  # the stroke is there
    assert (stored[erased < 12 - 1.5] == 255).all()  # the eraser's cut is
    assert int((stored == 1).sum()) == after_erase[1]
    assert Image.objects.get(pk=image.pk).status == LabelStatus.LABELLED
    shot = tmp_path / "mask-painted.png"
    page.screenshot(path=str(shot))

    # Reopened, the mask is the stored one.
    _open(page, image)
    assert _histogram(page) == after_erase

    # Polygon fill (P) with "sign" (3): a triangle in the top-left, closed with Enter.
    page.keyboard.press("3")
    page.keyboard.press("p")
    for x, y in [(0.05, 0.05), (0.3, 0.05), (0.05, 0.3)]:
        page.mouse.click(*editor_at(page, x, y))
    page.keyboard.press("Enter")
    triangle = _histogram(page)[2]
    assert abs(triangle - (0.25 * W) * (0.25 * H) / 2) < 0.1 * triangle
    assert page.evaluate("window.kestrelMasks.at(20, 20)") == 2

    # Smart (S): a rough box around the bright square; GrabCut outlines it; Enter paints it.
    page.keyboard.press("1")
    page.keyboard.press("s")
    _stroke(page, (0.58, 0.28), (0.92, 0.72), steps=6)
    page.wait_for_function("() => window.kestrelMasks.suggestion() !== null")
    assert page.is_visible("[data-testid=region-actions]")
    page.keyboard.press("Enter")
    assert page.evaluate("window.kestrelMasks.suggestion()") is None
    road = _histogram(page)[0]
    assert 0.8 * 80 * 80 < road < 1.2 * 80 * 80, road
    assert page.evaluate("window.kestrelMasks.at(240, 120)") == 0
    page.keyboard.press("Control+s")
    editor_saved(page, 2)
    stored = pixel_map_load(PixelMap.objects.get(image=image))
    assert int((stored == 0).sum()) == road and int((stored == 2).sum()) == triangle
    page.screenshot(path=str(tmp_path / "mask-filled.png"))
    print(f"screenshots: {shot.parent}")
    assert not browser_problems.console_errors, browser_problems.console_errors
    assert not browser_problems.page_errors, browser_problems.page_errors


def test_depth_shows_the_value_under_the_cursor_in_metres_and_is_reviewed(
    new_page, browser_problems, team, tmp_path
):
    workspace, people = team
    dataset = DatasetFactory(workspace=workspace, task="depth", name="Rooms", depth_scale=1000)
    image = ImageFactory(dataset=dataset, blob=blob_for(_photo(W, H)))
    ys, xs = np.mgrid[0:H, 0:W]
    depth = (1000 + xs * 37 + ys * 3).astype(np.uint16)  # values far past 8 bits
    depth[:10, :10] = 0  # no reading
    pixel_map_save(image=image, array=depth)
    page = new_page("depth review")
    log_in(page, people["reviewer"].email)
    _open(page, image)
    offset = page.evaluate("window.kestrelMasks.offset()")

    def hover(x, y, beside=False):
        page.mouse.move(*editor_at(page, (x + 0.5 + (offset if beside else 0)) / W, (y + 0.5) / H))
        return page.inner_text("[data-testid=depth-value]")

    assert hover(123, 45) == f"{(1000 + 123 * 37 + 45 * 3) / 1000:.3f} m" == "5.686 m"
    assert page.inner_text("[data-testid=depth-at]") == "at x 123, y 45"
    assert hover(301, 200, beside=True) == f"{(1000 + 301 * 37 + 200 * 3) / 1000:.3f} m"
    assert hover(3, 3) == "no reading"
    page.screenshot(path=str(tmp_path / "depth.png"))

    assert page.inner_text("[data-testid=review-status]") == "Labelled"
    page.click("[data-testid=review-approve]")
    page.wait_for_selector("[data-testid=review-status][data-status=approved]")
    assert Image.objects.get(pk=image.pk).status == LabelStatus.APPROVED
    assert not browser_problems.console_errors, browser_problems.console_errors
    assert not browser_problems.page_errors, browser_problems.page_errors
