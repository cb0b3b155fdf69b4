"""The training form's "Pretrained weights" choice follows the model picked, in the browser: it
is offered for the model whose file is on the server and disabled, with the reason, for one
whose file is not (static/js/train_form.js reading what the server sent in the page); a download
is the default only once the server has reached its source."""

import re

import pytest

from tests.browser.helpers import log_in
from tests.training.conftest import detect_version, gpu_local, project  # noqa: F401 (fixtures)
from tests.training.weights_source import weights_source_down, weights_source_up  # noqa: F401

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


def test_offline_the_form_starts_from_scratch_and_says_why(
    new_page,
    browser_problems,
    live_server,
    settings,
    tmp_path,
    team,
    project,  # noqa: F811
    detect_version,  # noqa: F811
    gpu_local,  # noqa: F811
    weights_source_down,  # noqa: F811
):
    """Downloads on, but the weights' source refused the server's check (issue 33): a job that
    downloads would fail 3 s in, so "From scratch" is picked, and the note says what was seen."""
    settings.TRAINING_WEIGHTS_DIR = tmp_path
    page = new_page("editor")
    log_in(page, team.editor.email)
    page.goto(f"/w/acme/projects/{project.pk}/train/")

    pretrained = page.locator("input[name=weights][value=pretrained]")
    note = page.locator("[data-testid=pretrained-note]")
    assert page.locator("input[name=weights][value=scratch]").is_checked()
    assert pretrained.is_enabled() and not pretrained.is_checked()  # still there to pick
    assert "could not reach 127.0.0.1 at" in note.inner_text()
    assert "(connection refused), so “From scratch” is the default" in note.inner_text()
    page.select_option("select[name=model_family]", "yolo11")  # another model: the same answer
    assert not pretrained.is_checked() and "yolo11n.pt would be downloaded" in note.inner_text()
    assert not browser_problems.console_errors and not browser_problems.page_errors


def test_online_the_form_picks_the_download_and_says_when_it_was_seen(
    new_page,
    live_server,
    settings,
    tmp_path,
    team,
    project,  # noqa: F811
    detect_version,  # noqa: F811
    gpu_local,  # noqa: F811
    weights_source_up,  # noqa: F811
):
    settings.TRAINING_WEIGHTS_DIR = tmp_path
    page = new_page("editor")
    log_in(page, team.editor.email)
    page.goto(f"/w/acme/projects/{project.pk}/train/")

    assert page.locator("input[name=weights][value=pretrained]").is_checked()
    note = page.locator("[data-testid=pretrained-note]").inner_text()
    assert "yolo26n.pt is downloaded from 127.0.0.1 when the job starts" in note
    assert re.search(r"the server reached 127\.0\.0\.1 at \d\d:\d\d", note), note
    assert page.locator("input[name=recipe][value=fine-tune]").is_checked()
    assert page.locator("input[name=imgsz]").input_value() == "640"
