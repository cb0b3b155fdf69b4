"""A version's data checks on the training form (issue 33): warnings are notes that do not stop
"Start training", errors are listed as what blocks it and turn the start buttons off with the
reason beside them, all before the click, and the list and the buttons follow the version
picked."""

import pytest

from datasets.models import Label
from datasets.services.versions import version_create
from tests.browser.helpers import click_and_load, log_in
from tests.training.conftest import gpu_local, project  # noqa: F401 (fixtures)
from tests.training.helpers import SHARED, version_of

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_warnings_are_notes_that_do_not_block_and_errors_are_listed_as_blocking(
    new_page,
    screenshot,
    browser_problems,
    live_server,
    team,
    project,  # noqa: F811
    gpu_local,  # noqa: F811
):
    # coco8 as shipped: most classes have no labels (warnings only).
    coco8 = version_of(
        user=team.owner,
        workspace=team.workspace,
        folder=SHARED / "coco8",
        task="detect",
        name="coco8",
    )
    Label.objects.filter(image__dataset=coco8.dataset).delete()
    empty = version_create(access=team.access("editor"), dataset=coco8.dataset)  # an error
    page = new_page("editor")
    log_in(page, team.editor.email)
    page.goto(f"/w/acme/projects/{project.pk}/train/?version={empty.pk}")
    assert "No labels at all" in page.get_by_test_id("checks-blocking").inner_text()
    # Before any click, the buttons are off and say why beside them.
    assert page.get_by_test_id("start-training").is_disabled()
    assert page.get_by_test_id("quick-test").is_disabled()
    assert "coco8 v2 cannot be trained" in page.get_by_test_id("start-blocked").inner_text()
    screenshot(page, "start-blocked")

    page.select_option("select[name=dataset_version]", str(coco8.pk))
    notes = page.get_by_test_id("checks-notes")
    notes.wait_for()
    page.get_by_test_id("start-blocked").wait_for(state="detached")
    assert page.get_by_test_id("start-training").is_enabled()
    assert "training goes ahead" in notes.inner_text()
    assert "no labels in val" in notes.inner_text()
    assert page.get_by_test_id("checks-blocking").count() == 0
    assert page.get_by_text("Train anyway").count() == 0

    click_and_load(page, page.get_by_test_id("start-training"))
    assert "/training/jobs/" in page.url, page.url
    assert not browser_problems.page_errors
