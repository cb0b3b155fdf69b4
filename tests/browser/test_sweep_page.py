"""A sweep's page in the browser (issue 27): its trials draw the parallel-coordinates chart and
a scatter per searched argument; "Save as recipe" keeps the best trial's arguments (the training
form's side: tests/sweeps/test_recipe.py), and the recipes page renames and deletes it."""

import pytest

from sweeps.services.advance import sweep_advance
from tests.browser.helpers import click_and_load, log_in
from tests.sweeps.conftest import submit
from tests.sweeps.test_advance import METRIC, job_ends, job_runs, trials_of
from tests.training.conftest import gpu_local, project  # noqa: F401 (fixtures)
from tests.training.factories import small_version
from training.models import WorkspaceRecipe

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_sweep_page_draws_its_trials_and_saves_the_best_as_a_recipe(
    new_page,
    browser_problems,
    screenshot,
    live_server,
    settings,
    team,
    project,  # noqa: F811
    gpu_local,  # noqa: F811
):
    settings.TRAINING_ALLOW_DOWNLOADS = False
    version = small_version(access=team.access("owner"))
    space = {"lr0": {"low": 1e-4, "high": 1e-1, "log": True}, "imgsz": [64, 96]}
    sweep = submit(team, project, version, gpu_local, space=space, parallel=2, name="Night")
    sweep_advance(sweep.pk)
    first, second = trials_of(sweep)
    job_runs(first.job, 0.2)
    job_ends(first.job, final={METRIC: 0.25})
    job_runs(second.job, 0.1)
    sweep_advance(sweep.pk)

    page = new_page("editor")
    log_in(page, team.editor.email)
    page.goto(f"/w/acme/sweeps/{sweep.pk}/")
    page.wait_for_function(
        "() => window.Chart && Chart.getChart(document.getElementById('sweep-parallel'))"
    )
    lines = page.evaluate(
        "() => Chart.getChart(document.getElementById('sweep-parallel')).data.datasets.length"
    )
    scatters = page.evaluate(
        "() => [...document.querySelectorAll('#sweep-scatters canvas')]"
        ".filter((c) => Chart.getChart(c)).length"
    )
    # A line per trial (the third started when the first ended), a scatter per argument.
    assert (lines, scatters) == (len(trials_of(sweep)), 2) == (3, 2)

    form = page.locator('[data-testid="sweep-save-recipe"]')
    form.locator("input[name=name]").fill("Night best")
    click_and_load(page, form.locator("button[type=submit]"))
    assert "Saved the recipe “Night best”" in page.inner_text("main")

    recipe = WorkspaceRecipe.objects.get(workspace=team.workspace)
    assert (recipe.name, recipe.imgsz) == ("Night best", first.params["imgsz"])
    assert not browser_problems.console_errors and not browser_problems.page_errors

    # The recipes page, from the Training page: rename it, then delete it.
    page.goto("/w/acme/training/")
    click_and_load(page, page.locator('[data-testid="recipes-link"]'))
    row = page.locator(f'[data-testid="recipe-{recipe.pk}"]')
    arguments = row.locator('[data-testid="recipe-args"]').inner_text()
    assert f"lr0 {recipe.extra_args['lr0']:.6g}" in arguments  # six significant digits
    row.locator("input[name=name]").fill("Night best, 64 px")
    click_and_load(page, row.locator("button[type=submit]"))
    assert "Renamed the recipe “Night best” to “Night best, 64 px”." in page.inner_text("main")
    screenshot(page, "recipes")
    click_and_load(page, row.locator('[data-testid="recipe-delete"]'))
    click_and_load(page, page.locator('[data-testid="confirm-delete"]'))
    assert "Deleted the recipe “Night best, 64 px”" in page.inner_text("main")
    assert not WorkspaceRecipe.objects.filter(workspace=team.workspace).exists()
