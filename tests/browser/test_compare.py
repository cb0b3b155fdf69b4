"""Comparing a project's runs as a person does: tick two runs in the project's runs table,
compare them on shared charts, then make one run's model the project's current one.

The runs are rows written directly (tests/training/factories.py), with their epochs' metrics.
"""

import pytest
from django.core.cache import cache

from tests.browser.helpers import log_in
from tests.training.conftest import project  # noqa: F401 (fixtures)
from tests.training.factories import finished_job, local_gpu, small_version
from training.models import EpochMetric, GpuType, TrainedModel

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _runs(team, project):  # noqa: F811
    """Three finished runs: 3, 5 and 4 epochs, each learning at its own pace."""
    access = team.access("owner")
    version = small_version(access=access, name="Birds")
    local_gpu()  # seeds the machine catalog
    h200 = GpuType.objects.get(slug="h200")
    jobs = []
    for name, epochs, pace, imgsz in (
        ("baseline", 3, 0.10, 64),
        ("bigger images", 5, 0.12, 320),
        ("longer", 4, 0.08, 64),
    ):
        job = finished_job(project=project, version=version, gpu=h200)
        job.name, job.imgsz, job.epochs, job.epochs_done = name, imgsz, epochs, epochs
        job.extra_args = {"lr0": 0.01} if name == "baseline" else {"lr0": 0.02, "mosaic": 0.5}
        job.save(update_fields=["name", "imgsz", "epochs", "epochs_done", "extra_args"])
        EpochMetric.objects.filter(job=job).delete()
        for epoch in range(1, epochs + 1):
            EpochMetric.objects.create(
                job=job,
                epoch=epoch,
                attempt=1,
                values={
                    "metrics/mAP50-95(B)": round(0.1 + pace * epoch, 3),
                    "metrics/mAP50(B)": round(0.2 + pace * epoch, 3),
                    "val/box_loss": round(2.0 - pace * 2 * epoch, 3),
                    "val/cls_loss": round(1.5 - pace * epoch, 3),
                },
            )
        job.model.name = f"{name} · yolo11n"
        job.model.save(update_fields=["name"])
        jobs.append(job)
    return jobs


def test_compare_two_runs_and_promote_one(
    new_page,
    screenshot,
    browser_problems,
    live_server,
    team,
    project,  # noqa: F811
):
    cache.clear()
    baseline, bigger, _longer = _runs(team, project)
    page = new_page("editor")
    log_in(page, team.editor.email)

    # The project page: every run with its best mAP50-95, time and cost; sortable.
    page.goto(f"/w/acme/projects/{project.pk}/")
    assert page.locator("[data-testid=run-row]").count() == 3
    page.click("[data-testid=sort-metric]")
    page.wait_for_url("**sort=metric&dir=desc*")
    first = page.locator("[data-testid=run-row]").first
    assert "bigger images" in first.inner_text() and "0.700" in first.inner_text()
    assert "$0.30" in first.inner_text()  # 5 minutes on an H200
    screenshot(page, "runs-by-metric")

    # One is not enough: the compare page says why and links back.
    page.check(f"[data-testid=pick-{baseline.pk}]")
    with page.expect_navigation():
        page.click("[data-testid=compare-button]")
    assert "Tick at least 2 runs to compare; you ticked 1." in page.inner_text(
        "[data-testid=compare-errors]"
    )
    screenshot(page, "compare-one")
    refused = page.url
    browser_problems.bad_responses.remove(f"[editor] 400 {refused}")
    with page.expect_navigation():
        page.click("[data-testid=compare-errors] a")

    # Tick two, compare.
    page.check(f"[data-testid=pick-{baseline.pk}]")
    page.check(f"[data-testid=pick-{bigger.pk}]")
    with page.expect_navigation():
        page.click("[data-testid=compare-button]")
    assert "/compare/?" in page.url
    page.wait_for_function(
        "() => window.Chart && Chart.getChart(document.getElementById('chart-metric'))"
        " && Chart.getChart(document.getElementById('chart-val-loss'))"
    )
    lines = page.evaluate(
        """() => ['chart-metric', 'chart-val-loss'].map((id) =>
             Chart.getChart(document.getElementById(id)).data.datasets.map((d) => ({
               label: d.label,
               epochs: d.data.map((p) => p.x),
               values: d.data.map((p) => p.y),
             })))"""
    )
    metric, loss = lines
    assert [line["label"] for line in metric] == ["bigger images", "baseline"]  # table order
    assert metric[0]["epochs"] == [1, 2, 3, 4, 5] and metric[1]["epochs"] == [1, 2, 3]
    assert metric[0]["values"] == pytest.approx([0.22, 0.34, 0.46, 0.58, 0.7])
    assert loss[1]["values"] == pytest.approx([3.2, 2.9, 2.6])
    canvas = page.locator("#chart-metric").bounding_box()
    assert canvas["width"] > 200 and canvas["height"] > 200

    differ = page.locator("[data-testid=args-differ] tr.differs")
    assert sorted(differ.evaluate_all("rows => rows.map(r => r.dataset.arg)")) == [
        "epochs",
        "imgsz",
        "lr0",
        "mosaic",
    ]
    same = page.locator("[data-testid=args-same]")
    assert not same.locator("table").is_visible()  # identical rows start folded away
    screenshot(page, "compare")
    same.locator("summary").click()
    assert same.locator("[data-arg=optimizer]").is_visible()
    screenshot(page, "compare-all-arguments")

    # Promote the bigger run's model from the project page.
    page.click(f".crumbs a:has-text('{project.name}')")
    page.wait_for_url(f"**/projects/{project.pk}/")
    with page.expect_navigation():
        page.click(f"[data-testid=promote-{bigger.model.pk}]")
    row = page.locator(f"[data-testid=model-row][data-model='{bigger.model.pk}']")
    assert row.locator("[data-testid=current-badge]").inner_text() == "current"
    assert page.locator("[data-testid=current-badge]").count() == 1
    assert "is now the current model of" in page.inner_text(".messages")
    screenshot(page, "promoted")
    assert list(TrainedModel.objects.filter(is_current=True).values_list("pk", flat=True)) == [
        bigger.model.pk
    ]

    # The model page shows it, and offers the others the button.
    page.click(f"[data-testid=model-row][data-model='{bigger.model.pk}'] a")
    assert page.locator("h1 [data-testid=current-badge]").is_visible()
    assert page.locator("[data-testid=promote-button]").count() == 0
    screenshot(page, "model-current")
    page.goto(f"/w/acme/models/{baseline.model.pk}/")
    assert page.locator("[data-testid=promote-button]").is_visible()
    assert page.locator("[data-testid=current-badge]").count() == 0
    screenshot(page, "model-not-current")

    # The refused compare (400, expected) is the only request the console reports.
    console_errors = [
        e for e in browser_problems.console_errors if f"400 (Bad Request) @ {refused}" not in e
    ]
    assert len(console_errors) == len(browser_problems.console_errors) - 1
    assert not console_errors, console_errors
    assert not browser_problems.page_errors, browser_problems.page_errors
    assert not browser_problems.failed_requests, browser_problems.failed_requests
    assert not browser_problems.bad_responses, browser_problems.bad_responses
