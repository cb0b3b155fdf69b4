"""The top bar on a 1366x768 laptop, with the longest realistic content (signed in, a team
workspace with a long name, every menu item, a long address): one line. Narrower, it takes
more lines but nothing overlaps and the page does not scroll sideways (issue 16, item 4)."""

import pytest

from tests.browser.helpers import log_in
from tests.workspaces.factories import MembershipFactory, UserFactory, WorkspaceFactory
from workspaces.models import Role

pytestmark = pytest.mark.django_db(transaction=True)

LONG_NAME = "Northern Coastal Wildlife Monitoring & Research Group (EU)"
LONG_EMAIL = "alexandra.konstantinopoulou@northern-coastal-wildlife.example.org"
MENU = ["Datasets", "Projects", "Training", "Models", "Deployments", "Billing", "Settings"]
# Everything the bar shows, each as one box.
ITEMS = (
    ".topbar .brand, .topbar .switcher summary, .topbar .mainnav > *, "
    ".topbar .usermenu > a, .topbar .usermenu > span, .topbar .usermenu button"
)

BOXES = f"""() => [...document.querySelectorAll({ITEMS!r})].map(e => {{
    const r = e.getBoundingClientRect();
    return {{text: e.innerText.trim(), top: r.top, bottom: r.bottom, left: r.left,
             right: r.right, width: r.width, height: r.height}};
}})"""


@pytest.fixture
def long_team(plans):
    user = UserFactory(email=LONG_EMAIL)
    workspace = WorkspaceFactory(name=LONG_NAME, slug="northern-coastal")
    MembershipFactory(workspace=workspace, user=user, role=Role.OWNER)
    return workspace


def _page(chromium_browser, live_server, width: int, height: int):
    context = chromium_browser.new_context(
        base_url=live_server.url, viewport={"width": width, "height": height}
    )
    context.set_default_timeout(15_000)
    page = context.new_page()
    log_in(page, LONG_EMAIL)
    page.goto("/w/northern-coastal/")
    return context, page


def _no_overlaps(boxes: list[dict]) -> None:
    for i, a in enumerate(boxes):
        for b in boxes[i + 1 :]:
            apart = (
                a["right"] <= b["left"] + 0.5
                or b["right"] <= a["left"] + 0.5
                or a["bottom"] <= b["top"] + 0.5
                or b["bottom"] <= a["top"] + 0.5
            )
            assert apart, f"{a['text']!r} overlaps {b['text']!r}: {a} {b}"


def _no_sideways_scroll(page) -> None:
    width = page.evaluate("() => document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], width


def test_the_top_bar_is_one_line_on_a_laptop(chromium_browser, live_server, long_team, screenshot):
    context, page = _page(chromium_browser, live_server, 1366, 768)
    try:
        screenshot(page, "1366")
        nav = page.locator("nav.mainnav")
        assert [a.strip() for a in nav.locator(":scope > *").all_inner_texts()] == MENU
        boxes = page.evaluate(BOXES)
        assert len(boxes) == 1 + 1 + len(MENU) + 3, boxes  # brand, switcher, menu, user's
        assert all(b["width"] > 0 for b in boxes), boxes

        # One line: every item shares the line's top (to a pixel, whatever its own height)...
        centres = [b["top"] + b["height"] / 2 for b in boxes]
        assert max(centres) - min(centres) <= 1, boxes
        tallest = max(b["height"] for b in boxes)
        bar = page.locator("header.topbar").bounding_box()
        # ...and the bar is as tall as one line of them plus its padding, not two.
        assert bar["height"] < 2 * tallest, (bar, tallest)
        assert max(b["top"] for b in boxes) < min(b["bottom"] for b in boxes), boxes
        _no_overlaps(boxes)

        # Nothing hidden: the whole menu is in view without scrolling it.
        assert nav.evaluate("n => n.scrollWidth <= n.clientWidth"), "the menu scrolls"
        assert all(b["right"] <= 1366 for b in boxes), boxes
        _no_sideways_scroll(page)

        # The long name and address are cut short but there whole in their titles.
        summary = page.get_by_test_id("workspace-switcher").locator("summary")
        assert summary.inner_text() == LONG_NAME
        assert summary.get_attribute("title") == LONG_NAME
        assert page.locator(".usermenu .who").get_attribute("title") == LONG_EMAIL

        # The switcher still opens over the page, its menu not clipped by the bar.
        summary.click()
        menu = page.get_by_test_id("workspace-switcher").locator("ul")
        assert menu.is_visible()
        assert menu.bounding_box()["height"] > 0
        assert page.get_by_role("link", name="+ New team workspace").is_visible()
        screenshot(page, "1366-switcher-open")
    finally:
        context.close()


@pytest.mark.parametrize("width,height", [(1024, 768), (768, 1024), (390, 844)])
def test_narrower_the_bar_wraps_without_overlapping(
    chromium_browser, live_server, long_team, screenshot, width, height
):
    context, page = _page(chromium_browser, live_server, width, height)
    try:
        screenshot(page, f"{width}")
        boxes = [b for b in page.evaluate(BOXES) if b["width"] > 0]
        menu = [b for b in boxes if b["text"] in MENU]
        _no_overlaps(boxes)
        _no_sideways_scroll(page)
        # The menu has a line of its own below the rest, and every item can be reached.
        others = [b for b in boxes if b["text"] not in MENU]
        assert min(b["top"] for b in menu) >= max(b["bottom"] for b in others) - 0.5, boxes
        nav = page.locator("nav.mainnav")
        for name in MENU:
            link = nav.get_by_text(name, exact=True)
            link.scroll_into_view_if_needed()
            box = link.bounding_box()
            assert 0 <= box["x"] and box["x"] + box["width"] <= width + 0.5, (name, box)
    finally:
        context.close()
