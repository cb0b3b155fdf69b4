"""The training form's "Pretrained weights" choice follows the model picked, in the browser: it
is offered for the model whose file is on the server and disabled, with the reason, for one
whose file is not (static/js/train_form.js reading what the server sent in the page)."""

import pytest

from tests.browser.helpers import log_in
from tests.training.conftest import detect_version, gpu_local, project  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_pretrained_choice_follows_the_family_and_size(
    new_page,
    browser_problems,
    live_server,
    settings,
    tmp_path,
    team,
    project,  # noqa: F811
    detect_version,  # noqa: F811
    gpu_local,  # noqa: F811
):
    settings.TRAINING_WEIGHTS_DIR = tmp_path
    settings.TRAINING_ALLOW_DOWNLOADS = False
    (tmp_path / "yolo11n.pt").write_bytes(b"the form only asks whether it is there")
    page = new_page("editor")
    log_in(page, team.editor.email)
    page.goto(f"/w/acme/projects/{project.pk}/train/")

    pretrained = page.locator("input[name=weights][value=pretrained]")
    scratch = page.locator("input[name=weights][value=scratch]")
    note = page.locator("[data-testid=pretrained-note]")
    # The form's default model, yolo26n: its file is not there.
    assert pretrained.is_disabled() and scratch.is_checked()
    assert f"yolo26n.pt is not in {tmp_path}/ and downloads are off" in note.inner_text()

    page.select_option("select[name=model_family]", "yolo11")
    assert pretrained.is_enabled()
    assert note.inner_text() == f"Pretrained: yolo11n.pt, from {tmp_path}/."
    pretrained.check()

    page.select_option("select[name=model_size]", "s")
    assert pretrained.is_disabled() and scratch.is_checked()  # never left on weights it lacks
    assert f"yolo11s.pt is not in {tmp_path}/" in note.inner_text()

    page.select_option("select[name=task]", "segment")
    assert f"yolo11s-seg.pt is not in {tmp_path}/" in note.inner_text()
    assert not browser_problems.console_errors and not browser_problems.page_errors
