"""The small stumbles of a newcomer's first hour (issue 33, item 8), as a browser shows them: the
icon at /favicon.ico, where the quick start's confirmation mail really is, two teams of the
same name told apart in the pickers, a public model's line naming its architecture once, and
a job that failed on "This machine" saying so."""

import pytest

from datasets.services.versions import version_create
from tests.browser.helpers import click_and_load, log_in, sign_up
from tests.datasets.factories import DatasetFactory, ImageFactory
from tests.training.factories import job_row, local_gpu, small_version, trained_model_row
from tests.workspaces.factories import MembershipFactory, UserFactory, WorkspaceFactory
from training.models import JobState
from workspaces.models import Project, Role
from workspaces.selectors import workspace_access_for_user

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_icon_mail_log_pickers_and_a_failed_local_job(
    new_page, browser_problems, plans, settings, screenshot
):
    settings.EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"  # `make run`'s
    page = new_page("newcomer")

    # The icon: a page links it, and /favicon.ico (asked for anyway) leads to it.
    page.goto("/accounts/signup/")
    assert page.locator("link[rel=icon]").get_attribute("href").endswith(".svg")
    icon = page.request.get("/favicon.ico")
    assert icon.ok and icon.url.endswith(".svg") and b"<svg" in icon.body()

    # Signing up: the page says which file holds the printed mail.
    sign_up(page, "newcomer@example.com")
    printed = page.get_by_test_id("mail-printed").inner_text()
    assert "var/log/web.log" in printed and "terminal that runs it (make run)" not in printed
    screenshot(page, "mail-log")

    # Two teams called "Vision": the switcher and the clone picker show their slugs.
    owner = UserFactory(email="owner@example.com")
    for slug in ("vision", "vision-eu"):
        team = WorkspaceFactory(name="Vision", slug=slug)
        MembershipFactory(workspace=team, user=owner, role=Role.OWNER)
    birds = WorkspaceFactory(name="Birds", slug="birds")
    MembershipFactory(workspace=birds, user=owner, role=Role.OWNER)
    public = DatasetFactory(workspace=birds, name="Open birds", is_public=True)
    ImageFactory(dataset=public)
    other = new_page("owner")
    log_in(other, "owner@example.com")
    other.goto("/w/vision-eu/")
    switcher = other.get_by_test_id("workspace-switcher")
    assert switcher.get_by_test_id("current-workspace").inner_text() == "Vision (vision-eu)"
    assert switcher.locator("summary").get_attribute("title") == "Vision (vision-eu)"
    switcher.locator("summary").click()
    entries = switcher.locator("li a").all_inner_texts()
    assert {"Vision (vision)", "Vision (vision-eu)", "Birds"} <= set(entries), entries
    screenshot(other, "switcher")
    # Its demo model, named as training names it ("<job> · <architecture>").
    access = workspace_access_for_user(user=owner, slug="birds")
    demo = trained_model_row(workspace=birds, class_names=["bird"])
    demo.name, demo.architecture, demo.is_public = "Demo model · yolo11n", "yolo11n", True
    demo.dataset_version = version_create(access=access, dataset=public)
    demo.save(update_fields=["name", "architecture", "is_public", "dataset_version"])
    other.goto(f"/explore/{public.pk}/")
    options = other.get_by_test_id("clone").locator("select option").all_inner_texts()
    assert "Vision (vision)" in options and "Vision (vision-eu)" in options, options
    line = other.get_by_test_id("public-model").inner_text()
    assert line.count("yolo11n") == 1, line  # Explore names the architecture once

    # A job that failed on "This machine" before its first epoch says so, not "Getting a machine".
    project = Project.objects.create(workspace=birds, name="Birds", created_by=owner)
    version = small_version(access=access)
    failed = job_row(
        project=project,
        version=version,
        gpu=local_gpu(),
        state=JobState.FAILED,
        error="Could not download the pretrained weights: the machine is offline.",
    )
    click_and_load(other, other.locator("header .brand"))
    other.goto(f"/w/birds/training/jobs/{failed.pk}/")
    progress = other.get_by_test_id("job-progress").inner_text()
    assert progress == "Failed on this machine before training began. Epoch 0 of 3.", progress
    assert "Could not download" in other.get_by_test_id("job-error").inner_text()
    screenshot(other, "failed-local-job")
    assert not [r for r in browser_problems.bad_responses if "favicon" in r]
