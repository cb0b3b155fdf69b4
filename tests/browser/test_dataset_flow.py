"""The dataset path as a person walks it, against PostgreSQL, Redis and a real Celery worker:
upload a zip in the browser, watch it import, browse the gallery with boxes drawn, read the
health report, save a version, export it; another workspace clones the public demo dataset."""

import io
import re
import zipfile

import pytest
from django.core.cache import cache

from datasets.models import Dataset
from datasets.services.demo import demo_dataset_seed
from tests.browser.helpers import log_in
from tests.datasets.archives import SHARED, zip_folder
from tests.workspaces.factories import MembershipFactory, UserFactory, WorkspaceFactory
from workspaces.models import Role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_upload_import_gallery_health_version_export_and_clone(
    new_page, screenshot, browser_problems, celery_worker_process, plans, tmp_path
):
    cache.clear()
    owner = UserFactory(email="lab@example.com")
    team = WorkspaceFactory(name="Raptor Lab", slug="raptor-lab")
    MembershipFactory(workspace=team, user=owner, role=Role.OWNER)
    demo_team = WorkspaceFactory(name="Demo Team", slug="demo-team")
    MembershipFactory(workspace=demo_team, user=UserFactory(), role=Role.OWNER)
    demo = demo_dataset_seed()
    archive = zip_folder(SHARED / "coco8", tmp_path / "coco8.zip", prefix="coco8/")

    page = new_page("owner")
    log_in(page, owner.email)
    page.goto("/w/raptor-lab/datasets/new/")
    page.fill("input[name=name]", "Street scenes")
    page.select_option("select[name=task]", "detect")
    with page.expect_navigation():
        page.click("form button[type=submit]")
    dataset = Dataset.objects.get(name="Street scenes")
    screenshot(page, "dataset-created")

    # Upload the zip; the uploader sends it in chunks and lands on the import page.
    with page.expect_navigation():
        page.click("[data-testid=add-images]")
    page.set_input_files("[data-testid=pick-files]", str(archive))
    page.click("#start-upload")
    page.wait_for_url(re.compile(r"/imports/\d+/$"), timeout=60_000)
    page.wait_for_selector("[data-testid=import-status][data-status=succeeded]", timeout=90_000)
    report = page.inner_text("[data-testid=import-status]")
    assert "8" in report
    screenshot(page, "import-report")

    # Gallery: eight tiles with their boxes drawn over them.
    page.goto(f"/w/raptor-lab/datasets/{dataset.pk}/images/")
    tiles = page.locator("[data-testid=gallery] img")
    assert tiles.count() == 8
    assert page.locator("svg rect, svg polygon").count() >= 30
    screenshot(page, "gallery")

    # Health: the check ran after the import, in the worker.
    page.goto(f"/w/raptor-lab/datasets/{dataset.pk}/health/")
    for _ in range(60):
        if "Not checked yet" not in page.inner_text("[data-testid=health-last-run]"):
            break
        page.wait_for_timeout(1000)
        page.reload()
    assert "Last checked" in page.inner_text("[data-testid=health-last-run]")
    screenshot(page, "health")

    # Save a version, then export it as YOLO.
    page.goto(f"/w/raptor-lab/datasets/{dataset.pk}/")
    with page.expect_navigation():
        page.click("[data-testid=versions] button[type=submit]")
    assert dataset.versions.count() == 1
    screenshot(page, "version-saved")
    page.goto(f"/w/raptor-lab/datasets/{dataset.pk}/versions/1/")
    with page.expect_download() as download_info:
        page.click("a[href$='/export/yolo/']")
    data = open(download_info.value.path(), "rb").read()
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = zf.namelist()
    assert "data.yaml" in names
    assert sum(n.startswith("images/") for n in names) == 8
    assert sum(n.startswith("labels/") and n.endswith(".txt") for n in names) == 8

    # Someone in another workspace clones the public demo dataset from Explore.
    other = UserFactory(email="visitor@example.com")
    elsewhere = WorkspaceFactory(name="Visitor Co", slug="visitor-co")
    MembershipFactory(workspace=elsewhere, user=other, role=Role.OWNER)
    visitor = new_page("visitor")
    log_in(visitor, other.email)
    visitor.goto("/explore/")
    with visitor.expect_navigation():
        visitor.click(f"a[href='/explore/{demo.pk}/']")
    visitor.select_option("[data-testid=clone] select", "visitor-co")
    with visitor.expect_navigation():
        visitor.click("[data-testid=clone] button[type=submit]")
    clone = Dataset.objects.get(workspace=elsewhere)
    assert clone.cloned_from_id == demo.pk
    assert clone.images.count() == demo.images.count() == 120
    screenshot(visitor, "clone")

    assert not browser_problems.console_errors, browser_problems.console_errors
    assert not browser_problems.page_errors, browser_problems.page_errors
