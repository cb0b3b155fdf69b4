"""Starting a training run as a person does: from the project page, through the form, to the job
page, which keeps itself up to date over htmx; then canceling it after a confirmation.

No worker listens on this suite's training queue, so the job stays queued until canceled.
"""

import re

import pytest
from django.core.cache import cache

from tests.browser.helpers import log_in
from tests.training.conftest import detect_version, gpu_local, project  # noqa: F401 (fixtures)
from tests.training.factories import finished_job
from training.models import JobState, TrainingJob

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_quick_test_run_from_the_project_page(
    new_page,
    screenshot,
    browser_problems,
    live_server,
    team,
    project,  # noqa: F811 (the training fixtures imported above)
    detect_version,  # noqa: F811
    gpu_local,  # noqa: F811
):
    cache.clear()
    page = new_page("editor")
    log_in(page, team.editor.email)

    page.goto(f"/w/acme/projects/{project.pk}/")
    assert "No runs yet" in page.inner_text("[data-testid=project-jobs]")
    assert page.locator("nav.mainnav a", has_text="Training").count() == 1
    screenshot(page, "project")
    with page.expect_navigation():
        page.click("[data-testid=train-button]")

    # The form: this machine can be picked; a cloud GPU is shown, disabled, with the reason.
    assert page.url.endswith(f"/projects/{project.pk}/train/")
    assert page.locator("[data-testid=machine-local] input").is_checked()
    h200 = page.locator("[data-testid=machine-h200]")
    assert h200.locator("input").is_disabled()
    assert "not configured on this server" in h200.inner_text()
    assert "coco8 v1" in page.locator("select[name=dataset_version] option").first.inner_text()
    page.fill("input[name=imgsz]", "64")
    page.fill("input[name=epochs]", "0")
    # Open (a recipe that sets advanced arguments shows them open already).
    page.locator("[data-testid=advanced]").evaluate("details => { details.open = true; }")
    page.fill("textarea[name=extra_args]", "mosaic: 0.5")
    with page.expect_navigation():
        page.click("[data-testid=start-training]")

    # Refused with the reason; what was typed is still there.
    assert "Epochs must be at least 1." in page.inner_text("[data-testid=form-errors]")
    assert page.input_value("input[name=epochs]") == "0"
    assert page.input_value("input[name=imgsz]") == "64"
    assert page.input_value("textarea[name=extra_args]").strip() == "mosaic: 0.5"
    assert page.locator("[data-testid=advanced][open]").count() == 1
    screenshot(page, "form-refused")
    assert not TrainingJob.objects.exists()
    page.fill("input[name=epochs]", "50")
    with page.expect_navigation():
        page.click("[data-testid=quick-test]")

    # The job page: queued, and waiting for the job's events (tests/browser/test_job_live_page.py
    # follows a job over them).
    assert re.search(r"/w/acme/training/jobs/\d+/$", page.url), page.url
    job = TrainingJob.objects.get()
    assert job.is_quick_test and job.epochs == 2 and job.extra_args == {"mosaic": 0.5}
    assert page.inner_text("[data-testid=job-state]") == "Queued"
    assert "Waiting for a machine" in page.inner_text("[data-testid=job-progress]")
    assert page.title() == "Queued · Quick test · Kestrel"
    screenshot(page, "job-queued")

    # Cancel asks first, then ends the job; the page stops polling.
    with page.expect_navigation():
        page.click("[data-testid=job-cancel]")
    screenshot(page, "cancel-confirm")
    with page.expect_navigation():
        page.click("[data-testid=confirm-cancel]")
    assert page.inner_text("[data-testid=job-state]") == "Canceled"
    assert page.get_attribute("#job-live", "data-stream") is None  # a final job is not followed
    assert TrainingJob.objects.get().state == JobState.CANCELED
    screenshot(page, "job-canceled")

    page.goto(f"/w/acme/projects/{project.pk}/")
    assert "Canceled" in page.inner_text("[data-testid=project-jobs]")
    page.goto("/w/acme/training/")
    assert page.locator("[data-testid=job-row]").count() == 1

    # A finished job (rows as the engine leaves them): metrics, plots, files, log, its model.
    done = finished_job(project=project, version=detect_version, gpu=gpu_local, user=team.owner)
    page.goto("/w/acme/training/")
    assert page.locator("[data-testid=job-row]").count() == 2
    screenshot(page, "jobs-list")
    page.goto(f"/w/acme/training/jobs/{done.pk}/")
    assert page.inner_text("[data-testid=job-state]") == "Succeeded"
    assert "0.6000" in page.inner_text("[data-testid=job-metrics]")
    plot = page.locator("[data-testid=job-artifacts] img")
    plot.scroll_into_view_if_needed()
    page.wait_for_function(
        "() => document.querySelector('[data-testid=job-artifacts] img').complete"
    )
    assert plot.evaluate("img => img.naturalWidth") == 320
    screenshot(page, "job-finished")
    with page.expect_navigation():
        page.click("[data-testid=job-model] a")
    assert "yolo11n" in page.inner_text("[data-testid=model-facts]")
    screenshot(page, "model")

    assert not browser_problems.page_errors, browser_problems.page_errors
    # Leaving the queued job's page ends its event stream: that request shows as aborted.
    failed = [f for f in browser_problems.failed_requests if f"/jobs/{job.pk}/events:" not in f]
    assert not failed, failed
    # The one refused submit above answers 400, as a form with errors does.
    train_url = f"{live_server.url}/w/acme/projects/{project.pk}/train/"
    assert browser_problems.bad_responses == [f"[editor] 400 {train_url}"]
    console = [e for e in browser_problems.console_errors if "400 (Bad Request)" not in e]
    assert not console, console
