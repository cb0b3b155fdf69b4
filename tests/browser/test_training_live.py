"""The whole of training from the browser, for real: a person starts a job on "This machine",
watches the page follow it (server-sent events, no reload) while a real Celery worker trains
yolo11n on real images, stops it, resumes it, and downloads the model it made. The pages are
served by uvicorn (asgi_server): the job page's event stream is an async view."""

import re

import pytest
from django.core.cache import cache

from tests.training.conftest import Workers, detect_version, gpu_local, project  # noqa: F401 (fixtures)
from tests.workspaces.factories import PASSWORD
from training.models import JobState, TrainedModel, TrainingJob

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Points on the quality chart (precision, recall, mAP per epoch), read from Chart.js itself.
POINTS = """() => {
  const canvas = document.querySelector('[data-chart=quality] canvas');
  const chart = canvas && Chart.getChart(canvas);
  return chart ? chart.data.datasets[0].data.length : 0;
}"""


@pytest.fixture
def worker(transactional_db):
    workers = Workers()
    workers.start()
    yield
    workers.stop_all()


@pytest.mark.same_on_any_database(
    "a browser driving a real run: its rows are written as in tests/training/test_engine.py, "
    "which runs on both, and the newcomer's journey walks the same pages on SQLite"
)
def test_a_person_trains_stops_resumes_and_downloads_a_model(
    new_page,
    screenshot,
    browser_problems,
    asgi_server,
    team,
    project,  # noqa: F811
    detect_version,  # noqa: F811
    gpu_local,  # noqa: F811
    worker,
):
    cache.clear()
    page = new_page("editor")
    page.goto(f"{asgi_server}/accounts/login/")
    page.fill("input[name=login]", team.editor.email)
    page.fill("input[name=password]", PASSWORD)
    with page.expect_navigation():
        page.click("form button[type=submit]")

    page.goto(f"{asgi_server}/w/acme/projects/{project.pk}/train/")
    page.select_option("select[name=model_family]", "yolo11")
    page.check("input[name=weights][value=scratch]")
    page.fill("input[name=epochs]", "25")
    page.fill("input[name=imgsz]", "64")
    page.fill("input[name=batch]", "4")
    with page.expect_navigation():
        page.click("[data-testid=start-training]")
    assert re.search(r"/training/jobs/\d+/$", page.url), page.url
    url = page.url

    # The page follows the run by itself: running, then epochs counting up.
    status = page.locator("[data-testid=job-status]")
    status.and_(page.locator("[data-state=running]")).wait_for(timeout=60_000)
    page.wait_for_function(
        "() => /Epoch ([2-9]|1[0-9]|2[0-4]) of 25/.test("
        "document.querySelector('[data-testid=job-progress]').innerText)",
        timeout=120_000,
    )
    assert "CPU" in page.inner_text("[data-testid=job-device]")
    # The header re-estimates from the measured epochs, without a reload.
    page.wait_for_selector("[data-testid=estimate-after]", timeout=30_000)
    assert "after epoch" in page.inner_text("[data-testid=estimate-after]")
    page.click("#tab-charts")
    # The chart gains points without a reload...
    before = page.evaluate(POINTS)
    page.wait_for_function(f"() => ({POINTS})() > {before}", timeout=60_000)
    loads = page.evaluate("performance.getEntriesByType('navigation').length")
    assert loads == 1
    screenshot(page, "running")
    # ...and a reload mid-run shows the whole history at once.
    seen = page.evaluate(POINTS)
    page.reload()
    page.click("#tab-charts")
    page.wait_for_function(f"() => ({POINTS})() >= {seen}", timeout=10_000)

    page.click("[data-testid=job-stop]")
    page.locator("[data-testid=job-status][data-state=stopped]").wait_for(timeout=120_000)
    job = TrainingJob.objects.get()
    assert job.state == JobState.STOPPED and job.checkpoint_epoch < 25
    assert TrainedModel.objects.filter(job=job).exists()
    screenshot(page, "stopped")

    page.click("[data-testid=job-resume]")
    page.wait_for_url(url)
    page.locator("[data-testid=job-status][data-state=succeeded]").wait_for(timeout=240_000)
    assert "Epoch 25 of 25" in page.inner_text("[data-testid=job-progress]")
    page.click("#tab-results")
    results = page.locator("#panel-results")
    results.get_by_text("object").first.wait_for(timeout=20_000)  # per-class table, matrix
    assert results.locator("img").count() >= 2  # curves, the confusion matrix, val images
    screenshot(page, "results")
    page.reload()
    assert "mAP50" in page.inner_text("[data-testid=job-metrics]")
    assert page.locator("[data-testid=job-attempts] tbody tr").count() == 2
    assert "used" in page.inner_text("[data-testid=estimate-after]")
    screenshot(page, "succeeded")

    with page.expect_navigation():
        page.click("[data-testid=job-model] a")
    assert "object" in page.inner_text("[data-testid=model-facts]")
    with page.expect_download() as download:
        page.click("[data-testid=model-weights]")
    path = download.value.path()
    with open(path, "rb") as f:
        assert f.read(4) == b"PK\x03\x04"  # a torch checkpoint, byte for byte
    screenshot(page, "model")
    assert not browser_problems.console_errors, browser_problems.console_errors
    assert not browser_problems.page_errors, browser_problems.page_errors
