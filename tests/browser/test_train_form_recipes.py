"""Recipes on the training form, in the browser (issue 33): the one picked for the version and
the weights fills the fields, another fills them with its own arguments, and the estimates
follow; a person can change any field before the start."""

import pytest

from tests.browser.helpers import log_in
from tests.training.conftest import detect_version, gpu_local, project  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_recipe_fills_the_fields_and_follows_the_weights_until_one_is_picked(
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
    (tmp_path / "yolo26n.pt").write_bytes(b"the form only asks whether it is there")
    page = new_page("editor")
    log_in(page, team.editor.email)
    page.goto(f"/w/acme/projects/{project.pk}/train/")

    def fields():
        return [page.input_value(f"input[name={n}]") for n in ("epochs", "imgsz", "batch")]

    # Each recipe is a row of its own, its arguments under its name (not one run-on paragraph
    # where a recipe's radio follows the previous one's arguments on the same line).
    boxes = [label.bounding_box() for label in page.locator("label.recipe").all()]
    assert len(boxes) >= 4, boxes
    for above, below in zip(boxes, boxes[1:], strict=False):
        assert below["y"] >= above["y"] + above["height"] - 1, (above, below)
        assert abs(below["x"] - above["x"]) < 1, (above, below)

    # Weights here: fine-tuning them. From scratch on 4 images: the demo model's recipe.
    assert page.is_checked("input[name=recipe][value=fine-tune]") and fields() == [
        "50",
        "640",
        "auto",
    ]
    page.check("input[name=weights][value=scratch]")
    assert page.is_checked("input[name=recipe][value=small-scratch]")
    assert fields() == ["30", "128", "4"]  # batch 8, capped at the version's 4 images
    assert page.input_value("select[name=optimizer]") == "AdamW"
    assert "lr0: 0.003" in page.input_value("textarea[name=extra_args]")

    page.check("input[name=recipe][value=fast-check]")
    assert fields() == ["3", "64", "4"] and page.input_value("textarea[name=extra_args]") == ""
    page.wait_for_function(
        "() => document.getElementById('estimates').innerText.includes('3 epochs at 64 px')",
        timeout=120_000,
    )
    page.check("input[name=weights][value=pretrained]")  # a recipe picked stays picked
    assert page.is_checked("input[name=recipe][value=fast-check]") and fields()[0] == "3"
    assert not browser_problems.console_errors and not browser_problems.page_errors
