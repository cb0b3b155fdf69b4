""" "Train on your own machine" as an admin uses it (issue 20): from the project page, pick a
dataset, make the key, and read the commands to paste on the other machine."""

import re
import shlex

import pytest
from playwright.sync_api import expect

from datasets.services.versions import version_create
from tests.browser.helpers import click_and_load, log_in
from tests.datasets.factories import DatasetFactory, ImageFactory
from tests.training.factories import small_version
from tests.workspaces.factories import ProjectFactory
from workspaces.models import ApiKey
from workspaces.services.keys import api_key_authenticate

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_pick_a_dataset_make_a_key_and_copy_the_commands(
    new_page, screenshot, browser_problems, live_server, team
):
    access = team.access("owner")
    project = ProjectFactory(workspace=team.workspace, name="Harbour Seals")
    gulls = small_version(access=access, name="Gulls").dataset
    seals = DatasetFactory(workspace=team.workspace, name="Seal Masks", task="segment")
    ImageFactory(dataset=seals)
    version_create(access=access, dataset=seals)

    page = new_page("admin")
    log_in(page, team.admin.email)
    page.goto(f"/w/acme/projects/{project.pk}/")
    click_and_load(page, page.get_by_test_id("own-machine-link"))
    assert page.url.endswith(f"/w/acme/projects/{project.pk}/train/own-machine/")
    train = page.get_by_test_id("own-train")
    assert "data=ul://acme/datasets/gulls" in train.inner_text()  # the first one that can be pulled

    page.get_by_test_id("own-data").select_option(str(seals.pk))
    expect(train).to_contain_text("data=ul://acme/datasets/seal-masks")
    page.get_by_test_id("own-name").fill("Dawn Run")
    expect(page.get_by_test_id("own-train")).to_contain_text("name=dawn-run")
    assert "data=" in page.url and "name=Dawn" in page.url  # a reload keeps the picks
    assert "<your key>" in page.get_by_test_id("own-env").inner_text()

    page.get_by_test_id("own-create-key").click()
    page.get_by_test_id("own-new-key").wait_for()
    env = page.get_by_test_id("own-env").inner_text()
    lines = [
        page.get_by_test_id("own-env").inner_text(),
        page.get_by_test_id("own-train").inner_text(),
    ]
    screenshot(page, "key-and-commands")

    raw = re.search(r"^export ULTRALYTICS_API_KEY=(ul_[0-9a-f]{40})$", env, re.M)[1]
    assert f"export ULTRALYTICS_PLATFORM_URL={live_server.url}" in env
    key = ApiKey.objects.get()
    assert api_key_authenticate(raw=raw) == key and key.scopes == ["read", "train"]
    commands = "\n".join(lines).splitlines()
    assert commands[2] == "pip install ultralytics"
    assert shlex.split(commands[3]) == [
        "yolo",
        "train",
        "model=yolo26n-seg.pt",
        "data=ul://acme/datasets/seal-masks",
        "project=acme/harbour-seals",
        "name=dawn-run",
    ]
    page.get_by_test_id("copy-env").click()
    expect(page.get_by_test_id("copy-env")).not_to_have_text("Copy")

    # Picking again keeps the key on the page; a reload shows it no more and makes no other.
    page.get_by_test_id("own-data").select_option(str(gulls.pk))
    expect(page.get_by_test_id("own-train")).to_contain_text("data=ul://acme/datasets/gulls ")
    assert raw in page.get_by_test_id("own-env").inner_text()
    page.reload()
    assert raw not in page.content() and "<your key>" in page.get_by_test_id("own-env").inner_text()
    assert ApiKey.objects.count() == 1
    assert not browser_problems.console_errors and not browser_problems.page_errors
    assert not browser_problems.bad_responses, browser_problems.bad_responses
