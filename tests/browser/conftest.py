"""Fixtures for the browser tests: Debian chromium driven by Playwright's sync API.

Run with: DJANGO_SETTINGS_MODULE=config.test_settings .venv/bin/pytest tests/browser -q
(after `manage.py collectstatic`). The tests use pytest-django's live_server, which serves the
app and its static files from a thread of the test process, so mailoutbox sees its email.
"""

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.servers import app_server

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT_DIR = ROOT / "var" / "screenshots"


@pytest.fixture(scope="module")
def chromium_browser():
    """One chromium per test module.

    While Playwright's sync API is started, an asyncio event loop counts as running in the test
    thread, and Django refuses ORM calls from it (SynchronousOnlyOperation), e.g. the flush that
    transactional_db does at teardown. So DJANGO_ALLOW_ASYNC_UNSAFE is set exactly while the
    browser lives, and the loop is gone again before any other module's tests run.
    """
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed")
    from playwright.sync_api import sync_playwright

    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(
                executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
            )
            yield browser
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@dataclass
class BrowserProblems:
    """Console errors, uncaught exceptions and failed requests seen by any page."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    bad_responses: list[str] = field(default_factory=list)

    def _failed(self, label: str, request) -> None:
        # The browser cancels what a page was still loading when it navigates away (or closes
        # an event stream): that is not a failure of the server's.
        if request.failure != "net::ERR_ABORTED":
            self.failed_requests.append(f"[{label}] {request.url}: {request.failure}")

    def watch(self, page, label: str) -> None:
        page.on(
            "console",
            lambda msg: (
                msg.type == "error"
                and self.console_errors.append(f"[{label}] {msg.text} @ {msg.location.get('url')}")
            ),
        )
        page.on("pageerror", lambda exc: self.page_errors.append(f"[{label}] {exc}"))
        page.on("requestfailed", lambda req: self._failed(label, req))
        page.on(
            "response",
            lambda resp: (
                resp.status >= 400
                and self.bad_responses.append(f"[{label}] {resp.status} {resp.url}")
            ),
        )


@pytest.fixture
def browser_problems() -> BrowserProblems:
    return BrowserProblems()


@pytest.fixture
def new_page_at(chromium_browser, browser_problems):
    """new_page_at(base_url, label) -> a page in a fresh browser context (own cookies) whose
    relative URLs go to base_url, watched for errors."""
    contexts = []

    def make(base_url: str, label: str):
        context = chromium_browser.new_context(
            base_url=base_url, viewport={"width": 1280, "height": 800}
        )
        context.set_default_timeout(15_000)
        contexts.append(context)
        page = context.new_page()
        browser_problems.watch(page, label)
        return page

    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def new_page(new_page_at, live_server):
    """new_page(label) -> a page on live_server in a fresh browser context, watched for errors."""
    return lambda label: new_page_at(live_server.url, label)


@pytest.fixture
def screenshot(request):
    """screenshot(page, name) saves var/screenshots/<test>-NN-<name>.png, numbered in order."""
    SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
    counter = iter(range(1, 100))
    test_name = request.node.name

    def shoot(page, name: str) -> Path:
        path = SCREENSHOT_DIR / f"{test_name}-{next(counter):02d}-{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return shoot


@pytest.fixture
def asgi_server(transactional_db):
    """The app under uvicorn on this test's database, in a process of its own; yields its base
    URL. Pages that follow a job need it: the job's event stream (training.live) is an async
    view that runs as long as the job, and live_server, a WSGI server, would hold it back whole.
    """
    with app_server() as url:
        yield url
