"""The import page as a newcomer reads it (issue 33): coco8 leads with what was imported and its
68 declared classes without labels are one line, not a list of "not imported"; an image already
in the dataset, uploaded again with its .txt, says so and why the label file was not read."""

import re

import pytest
from django.core.cache import cache

from tests.browser.helpers import log_in
from tests.datasets.archives import SHARED, zip_folder, zip_of
from tests.workspaces.factories import MembershipFactory, UserFactory, WorkspaceFactory
from workspaces.models import Role

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _upload(page, dataset_url: str, archive) -> str:
    page.goto(f"{dataset_url}upload/")
    page.set_input_files("[data-testid=pick-files]", str(archive))
    page.click("#start-upload")
    page.wait_for_url(re.compile(r"/imports/\d+/$"), timeout=60_000)
    page.wait_for_selector("[data-testid=import-status][data-status=succeeded]", timeout=90_000)
    return page.inner_text("[data-testid=import-status]")


def test_the_import_page_leads_with_what_matters(
    new_page, screenshot, browser_problems, celery_worker_process, plans, tmp_path
):
    cache.clear()
    owner = UserFactory(email="first@example.com")
    team = WorkspaceFactory(name="First Hour", slug="first-hour")
    MembershipFactory(workspace=team, user=owner, role=Role.OWNER)
    page = new_page("owner")
    log_in(page, owner.email)
    page.goto("/w/first-hour/datasets/new/")
    page.fill("input[name=name]", "Street")
    page.select_option("select[name=task]", "detect")
    with page.expect_navigation():
        page.click("form button[type=submit]")
    dataset_url = page.url

    coco8 = zip_folder(SHARED / "coco8", tmp_path / "coco8.zip", prefix="coco8/")
    text = _upload(page, dataset_url, coco8)
    lines = [line for line in text.splitlines() if line.strip()]
    # The heading, said once, then what was imported, then the declared classes' one line.
    assert lines[:2] == ["Imported", "Imported 8 images and 30 labels (Ultralytics YOLO)."], lines
    assert lines[2].startswith("68 declared classes have no label yet: bicycle, car,"), lines[2]
    assert text.index(lines[2]) < text.index("Not imported")  # coco8's LICENSE, after
    assert "Classes with no labels" not in text and "created, but no label" not in text
    assert page.locator("[data-testid=import-warning]").count() == 0
    screenshot(page, "import-coco8-leads-with-what-was-imported")

    # One of those images again, with its label file beside it.
    again = zip_of(
        {
            "000000000009.jpg": (SHARED / "coco8/images/train/000000000009.jpg").read_bytes(),
            "000000000009.txt": (SHARED / "coco8/labels/train/000000000009.txt").read_bytes(),
        },
        tmp_path / "again.zip",
    )
    text = _upload(page, dataset_url, again)
    assert text.startswith("Nothing new imported"), text
    warning = page.inner_text("[data-testid=import-warning]")
    assert warning.startswith(
        "1 image already in the dataset; its label file was not read because no format "
        "Kestrel reads matched the upload"
    ), warning
    assert "Imported, with a warning" not in text and "none of the images" not in text
    # Under "Not imported", the label file's reason once, the file indented under it.
    section = page.get_by_test_id("report-not-imported")
    assert section.inner_text().count("no format Kestrel reads matched") == 1
    reason = section.get_by_test_id("not-imported-reason").first
    file = reason.locator("bdi.filename")
    assert file.inner_text() == "000000000009.txt"
    assert file.bounding_box()["x"] > reason.bounding_box()["x"] + 8
    screenshot(page, "import-duplicate-says-why")
