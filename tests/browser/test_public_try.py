"""The demo model's try-it page in chromium, for someone outside the demo team: from the demo
dataset's Explore page to its public try-it page, one click on a demo picture, and the model's
boxes drawn over it, through the real predict API and a real inference server."""

import pytest

from datasets.services.demo import DEMO_WORKSPACE, demo_dataset_seed
from tests.browser.helpers import click_and_load, log_in
from tests.deploy.conftest import confident_copy, inference_server, tiny_model_train  # noqa: F401
from tests.training.factories import trained_model_row
from tests.workspaces.factories import MembershipFactory, UserFactory, WorkspaceFactory
from workspaces.models import Role

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.same_on_any_database(
        "the demo a newcomer tries is the quick start's, on SQLite; the public routes are "
        "tested on both in tests/deploy/test_public_model.py",
        on="sqlite",
    ),
]

READY = "() => window.kestrelTry && window.kestrelTry.ready()"


@pytest.fixture(scope="module")
def detector(tmp_path_factory) -> bytes:
    """A real detector (trained on coco8: its class 0 is person), sure of class 0 everywhere."""
    work = tmp_path_factory.mktemp("demo-detector")
    return confident_copy(tiny_model_train("detect", work), work / "confident.pt").read_bytes()


def test_a_newcomer_tries_the_demo_model_on_a_demo_picture(
    new_page,
    plans,
    detector,
    inference_server,  # noqa: F811
    settings,
    browser_problems,
    screenshot,  # noqa: F811
):
    settings.INFERENCE_URL = inference_server.url
    owner = UserFactory(email="admin@demo.test")
    team = WorkspaceFactory(name=DEMO_WORKSPACE, slug="demo-team", created_by=owner)
    MembershipFactory(workspace=team, user=owner, role=Role.OWNER)
    dataset = demo_dataset_seed()
    model = trained_model_row(
        workspace=team, class_names=["circle", "square", "triangle"], weights=detector
    )
    model.dataset_version = dataset.versions.get()
    model.is_public = True
    model.save(update_fields=["dataset_version", "is_public"])
    newcomer = UserFactory(email="newcomer@elsewhere.test")
    MembershipFactory(
        workspace=WorkspaceFactory(name="Elsewhere", slug="elsewhere"), user=newcomer, role="owner"
    )

    page = new_page("newcomer")
    log_in(page, newcomer.email)
    page.goto(f"/explore/{dataset.pk}/")
    assert "Try the demo model" in page.inner_text("[data-testid=public-models]")
    click_and_load(page, page.locator("[data-testid=try-public-model]"))
    assert page.url.endswith(f"/explore/models/{model.pk}/try/")
    screenshot(page, "public-try")

    page.locator("[data-testid=try-sample]").first.click()
    page.wait_for_function(READY, timeout=60_000)
    assert page.evaluate("window.kestrelTry.error()") == ""
    assert page.evaluate("window.kestrelTry.total()") > 0
    assert page.evaluate("window.kestrelTry.shown()") > 0
    assert "person" in page.inner_text("[data-testid=try-results]")  # as its weights name it
    screenshot(page, "public-try-boxes")

    assert not browser_problems.console_errors, browser_problems.console_errors
    assert not browser_problems.page_errors, browser_problems.page_errors
    assert not browser_problems.bad_responses, browser_problems.bad_responses
