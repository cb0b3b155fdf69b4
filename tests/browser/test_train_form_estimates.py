"""The training form's per-machine estimates in the browser: the page answers before any
estimate is made, the panel fills itself in after, and a change made while an estimate is
computing is the one shown (issue 16)."""

import pytest

from tests.browser.helpers import log_in
from tests.training.conftest import detect_version, gpu_local, project  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

IDLE = """() => {
  const box = document.getElementById('estimates');
  return !box.classList.contains('htmx-request') && !!box.querySelector('table');
}"""


def test_the_estimates_load_after_the_form_and_follow_the_last_change(
    new_page,
    browser_problems,
    live_server,
    team,
    project,  # noqa: F811
    detect_version,  # noqa: F811
    gpu_local,  # noqa: F811
):
    page = new_page("editor")
    log_in(page, team.editor.email)
    page.goto(f"/w/acme/projects/{project.pk}/train/")
    box = page.locator("[data-testid=estimates]")
    page.wait_for_function(IDLE, timeout=120_000)
    assert "30 epochs at 128 px" in box.inner_text()
    assert page.get_by_test_id("estimate-local").count() == 1

    # A new model size is measured afresh (seconds); the epochs typed meanwhile must not be
    # lost with the request that was computing.
    page.select_option("select[name=model_size]", "m")
    page.wait_for_function(
        "() => document.getElementById('estimates').classList.contains('htmx-request')"
    )
    page.fill("input[name=epochs]", "7")
    page.press("input[name=epochs]", "Tab")
    page.wait_for_function(
        "() => document.getElementById('estimates').innerText.includes('7 epochs at 128 px')",
        timeout=120_000,
    )
    page.wait_for_function(IDLE, timeout=120_000)
    assert "7 epochs at 128 px" in box.inner_text()
    assert not browser_problems.console_errors and not browser_problems.page_errors
