"""The try-it page in chromium, against the real predict API and a real inference server: find
the model on the Models page, drop a photo, see the model's boxes drawn, raise the threshold
and see fewer, copy the curl snippet with this server's URL. And what a person sees when the
model server is down or they call too often."""

from pathlib import Path

import pytest

from deploy.ratelimit import rate_take
from tests.browser.helpers import drop_file, log_in
from tests.clock import well_inside_a_minute

# The shared inference server and the tiny trained models, as the deploy tests use them.
from tests.deploy.conftest import (  # noqa: F401
    confident_yolo_models,
    inference_server,
    yolo_models,
)
from tests.training.factories import trained_model_row
from tests.workspaces.factories import MembershipFactory, UserFactory, WorkspaceFactory
from workspaces.models import Role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHARED = Path("/work/shared/datasets")
PHOTO = SHARED / "coco8" / "images" / "val" / "000000000036.jpg"
READY = "() => window.kestrelTry && window.kestrelTry.ready()"
CANVAS = "document.querySelector('[data-testid=try-canvas]').toDataURL()"


@pytest.fixture
def editor(plans):
    workspace = WorkspaceFactory(name="Raptor Lab", slug="raptor-lab")
    user = UserFactory(email="editor@raptor.test")
    MembershipFactory(workspace=workspace, user=user, role=Role.EDITOR)
    return workspace, user


def spread_copy(weights: Path, target: Path) -> Path:
    """The tiny detect model, sure of nothing but class 0 and less sure of it in some places
    than in others: its class-0 scores lean on the image's features (scaled up), so one photo
    gets results on both sides of a threshold. Computed by Ultralytics like any model's."""
    import torch
    from ultralytics import YOLO

    yolo = YOLO(str(weights))
    with torch.no_grad():
        for branch in yolo.model.model[-1].cv3:  # per scale: the class scores' last convolution
            last = branch[-1]
            last.weight[0] *= 200
            last.bias.fill_(-12.0)
            last.bias[0] = 0.0
    yolo.save(target)
    return target


def _open_try_page(page, workspace, model, screenshot=None) -> None:
    """From the nav's Models link, the Try button of `model`'s row."""
    page.goto(f"/w/{workspace.slug}/projects/")
    page.get_by_role("link", name="Models", exact=True).click()
    page.wait_for_url(f"**/w/{workspace.slug}/models/")
    if screenshot:
        screenshot(page, "models")
    page.click(f"[data-testid=try-{model.pk}]")
    page.wait_for_url(f"**/models/{model.pk}/try/")


@pytest.mark.same_on_any_database(
    "the page's drawing is what is tested; the predict route's rows are tested on both in "
    "tests/deploy"
)
def test_drop_a_photo_see_boxes_filter_them_and_copy_the_snippet(
    new_page,
    live_server,
    editor,
    settings,
    inference_server,  # noqa: F811
    yolo_models,  # noqa: F811
    tmp_path,
    browser_problems,
    screenshot,
):
    if not PHOTO.exists():
        pytest.skip(f"{PHOTO} is not here")
    settings.INFERENCE_URL = inference_server.url
    workspace, user = editor
    model = trained_model_row(
        workspace=workspace,
        class_names=["person", "bicycle", "car"],
        weights=spread_copy(yolo_models["detect"], tmp_path / "spread.pt").read_bytes(),
    )
    other = trained_model_row(workspace=workspace, class_names=["heron", "egret"], task="segment")
    other.metrics = {"metrics/mAP50-95(M)": 0.613}
    other.save(update_fields=["metrics"])
    page = new_page("editor")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    log_in(page, user.email)
    _open_try_page(page, workspace, model, screenshot)
    assert page.url.endswith(f"/models/{model.pk}/try/")

    drop_file(page, PHOTO)
    page.wait_for_function(READY, timeout=60_000)
    assert page.evaluate("window.kestrelTry.requests()") == 1  # one drop, one call
    assert page.evaluate("window.kestrelTry.error()") == ""
    total = page.evaluate("window.kestrelTry.total()")
    shown = page.evaluate("window.kestrelTry.shown()")
    assert total > 0 and 0 < shown <= total
    assert page.locator("[data-testid=try-results] li").count() == shown
    assert f"{shown} of {total} shown" in page.inner_text("[data-testid=try-count]")
    assert "inference" in page.inner_text("[data-testid=try-speed]")
    assert "person" in page.inner_text("[data-testid=try-results]")
    drawn = page.evaluate(CANVAS)
    assert drawn.startswith("data:image/png")
    screenshot(page, "boxes")

    # The slider filters what came back, without asking the model again.
    confidences = page.evaluate("window.kestrelTry.confidences()")
    cuts = [
        c / 100
        for c in range(26, 101)
        if any(v >= c / 100 for v in confidences) and any(v < c / 100 for v in confidences)
    ]
    assert cuts, f"all results are alike: {confidences}"
    cut = cuts[len(cuts) // 2]
    page.fill("[data-testid=try-threshold]", f"{cut:.2f}")
    page.wait_for_function(f"() => window.kestrelTry.shown() < {shown}")
    fewer = page.evaluate("window.kestrelTry.shown()")
    assert 0 < fewer == sum(1 for c in confidences if c >= cut)
    assert f"{fewer} of {total} shown at {cut:.2f}" in page.inner_text("[data-testid=try-count]")
    assert page.locator("[data-testid=try-results] li").count() == fewer
    assert page.evaluate(CANVAS) != drawn  # boxes under the threshold left the picture
    assert page.evaluate("window.kestrelTry.requests()") == 1
    screenshot(page, "fewer")

    # The curl snippet, as copied, calls this server's API for this model.
    page.click("[data-testid=copy-curl]")
    page.wait_for_function(
        "() => document.querySelector('[data-testid=copy-curl]').textContent === 'Copied'"
    )
    copied = page.evaluate("navigator.clipboard.readText()")
    url = f"{live_server.url}/api/v1/models/{model.pk}/predict"
    assert copied.startswith(f"curl -X POST {url}")
    assert "Bearer $KESTREL_API_KEY" in copied and "-F file=@image.jpg" in copied
    page.locator("[data-testid=try-code]").scroll_into_view_if_needed()
    screenshot(page, "snippets")

    assert not browser_problems.console_errors, browser_problems.console_errors
    assert not browser_problems.page_errors, browser_problems.page_errors
    assert not browser_problems.bad_responses, browser_problems.bad_responses


def test_errors_are_said_plainly(new_page, editor, settings, browser_problems, screenshot):
    """The model server down (503), then too many calls this minute (429, with when to retry)."""
    if not PHOTO.exists():
        pytest.skip(f"{PHOTO} is not here")
    settings.INFERENCE_URL = "http://127.0.0.1:9"  # nothing listens there
    workspace, user = editor
    model = trained_model_row(workspace=workspace, class_names=["person"])
    page = new_page("editor")
    log_in(page, user.email)
    _open_try_page(page, workspace, model)

    drop_file(page, PHOTO)
    page.wait_for_function(READY, timeout=30_000)
    assert page.evaluate("window.kestrelTry.requests()") == 1
    status = page.inner_text("[data-testid=try-status]")
    assert "model server is not answering" in status
    assert page.inner_text("[data-testid=try-count]") == ""  # not "found nothing"
    screenshot(page, "server-down")

    limit = workspace.plan.predict_requests_per_minute
    well_inside_a_minute()  # the calls taken here and the click's in one clock minute
    for _ in range(limit):
        rate_take(who=f"user{user.pk}", limit=limit)
    page.click("[data-testid=try-run]")
    page.wait_for_function("() => window.kestrelTry.requests() === 2 && !window.kestrelTry.busy()")
    status = page.inner_text("[data-testid=try-status]")
    assert f"allows {limit} calls a minute" in status
    # The button waits out Retry-After rather than letting the person be refused again.
    run = page.locator("[data-testid=try-run]")
    assert run.is_disabled() and run.inner_text().endswith(" s)")
    screenshot(page, "rate-limited")
    assert page.evaluate("window.kestrelTry.total()") == 0
    assert [r.split()[1] for r in browser_problems.bad_responses] == ["503", "429"]
    assert not browser_problems.page_errors, browser_problems.page_errors


EVERY_TASK = {
    "segment": SHARED / "coco8-seg" / "images" / "val" / "000000000049.jpg",
    "pose": SHARED / "coco8-pose" / "images" / "val" / "000000000113.jpg",
    "obb": SHARED / "dota8" / "images" / "val" / "P1470__1024__3296___1648.jpg",
    "classify": SHARED / "imagenet10" / "val" / "goldfish",
}


@pytest.mark.parametrize(
    "task",
    [
        "segment",
        "pose",
        "obb",
        "classify",
    ],
)
def test_masks_keypoints_corners_and_classes_are_drawn(
    task,
    new_page,
    editor,
    settings,
    inference_server,  # noqa: F811
    confident_yolo_models,  # noqa: F811
    browser_problems,
    screenshot,
):
    photo = EVERY_TASK[task]
    if photo.is_dir():
        photo = next(iter(sorted(photo.iterdir())), photo)
    if not photo.is_file():
        pytest.skip(f"{photo} is not here")
    settings.INFERENCE_URL = inference_server.url
    workspace, user = editor
    model = trained_model_row(
        workspace=workspace,
        class_names=["person", "bicycle", "car"],
        task=task,
        weights=confident_yolo_models[task].read_bytes(),
    )
    page = new_page("editor")
    log_in(page, user.email)
    page.goto(f"/w/{workspace.slug}/models/{model.pk}/try/")
    drop_file(page, photo)
    page.wait_for_function(READY, timeout=60_000)
    assert page.evaluate("window.kestrelTry.error()") == ""
    assert page.evaluate("window.kestrelTry.total()") > 0
    page.fill("[data-testid=try-threshold]", "0.05")
    assert page.evaluate("window.kestrelTry.shown()") == page.evaluate("window.kestrelTry.total()")
    screenshot(page, task)
    assert not browser_problems.page_errors, browser_problems.page_errors
    assert not browser_problems.bad_responses, browser_problems.bad_responses
