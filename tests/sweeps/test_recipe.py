"""A sweep's best settings saved as a recipe of the workspace (issues 27 and 33): from the sweep's
page, by an editor; the training form then offers it after the built-in recipes with the
arguments it sets, and a start with its fields trains with them. Another workspace's recipe is
refused as an unknown one is, and a recipe's arguments are checked as anything typed."""

import html
import json
import re

import pytest

from core.errors import ServiceError
from sweeps.services.advance import sweep_advance
from tests.sweeps.conftest import base_params, submit
from tests.sweeps.test_advance import METRIC, job_ends, job_runs, trials_of
from tests.sweeps.test_views import stranger_access
from tests.training.factories import small_version
from training.models import TrainingJob, WorkspaceRecipe
from training.services.recipes import workspace_recipe_create

pytestmark = pytest.mark.django_db


@pytest.fixture
def version(team):
    return small_version(access=team.access("owner"))


@pytest.fixture(autouse=True)
def _no_weights_download(settings):
    settings.TRAINING_ALLOW_DOWNLOADS = False


def _finished_sweep(team, project, version, gpu):
    space = {"lr0": {"low": 1e-4, "high": 1e-1, "log": True}, "imgsz": [64, 96]}
    sweep = submit(team, project, version, gpu, space=space, parallel=2, name="Night")
    sweep_advance(sweep.pk)
    first, second = trials_of(sweep)
    job_runs(first.job, 0.2)
    job_ends(first.job, final={METRIC: 0.25})
    job_runs(second.job, 0.3)
    job_ends(second.job, final={METRIC: 0.5})
    sweep_advance(sweep.pk)
    return sweep, second


def _form(page: str) -> str:
    return html.unescape(page)


def test_the_best_trial_is_saved_as_a_recipe_the_training_form_offers(
    client, team, project, version, gpu_local, stranger
):
    sweep, best = _finished_sweep(team, project, version, gpu_local)
    url = f"/w/acme/sweeps/{sweep.pk}/"
    client.force_login(team.viewer)
    assert 'data-testid="sweep-save-recipe"' not in client.get(url).content.decode()
    assert client.post(f"{url}recipe/", {"name": "Viewer's"}).status_code == 403

    client.force_login(team.editor)
    assert 'data-testid="sweep-save-recipe"' in client.get(url).content.decode()
    response = client.post(f"{url}recipe/", {"name": "Night best"}, follow=True)
    assert "Saved the recipe “Night best”" in _form(response.content.decode())
    recipe = WorkspaceRecipe.objects.get()
    assert recipe.workspace == team.workspace and recipe.created_by == team.editor
    lr0 = best.params["lr0"]
    assert (recipe.epochs, recipe.imgsz, recipe.batch) == (2, best.params["imgsz"], 2)
    assert recipe.extra_args == {"plots": False, "lr0": lr0}
    assert f"Trial {best.number} of Night" in recipe.description
    again = client.post(f"{url}recipe/", {"name": "Night best"}, follow=True)
    assert "already" in _form(again.content.decode()) and WorkspaceRecipe.objects.count() == 1

    # The training form lists it after the built-in ones, with what it sets.
    form_url = f"/w/acme/projects/{project.pk}/train/"
    page = _form(client.get(form_url).content.decode())
    slugs = re.findall(r'<input type="radio" name="recipe" value="([^"]+)"', page)
    assert slugs[-1] == f"saved-{recipe.pk}" and len(slugs) == 5
    shown = re.findall(r'data-testid="recipe-args">(.*?)</code>', page)[-1]
    assert shown.startswith(f"epochs 2, imgsz {recipe.imgsz}, batch 2, patience 100")
    assert f"lr0 {lr0:.6g}" in shown  # six significant digits; the fields get it whole
    # What the form's script fills the fields with when it is picked (static/js/train_form.js).
    choices = json.loads(re.search(r'id="pretrained-choices"[^>]*>(.*?)</script>', page).group(1))
    filled = choices["recipes"][f"saved-{recipe.pk}"]["fields"]
    assert (filled["epochs"], filled["imgsz"], filled["batch"]) == (2, recipe.imgsz, "2")
    # In the order the database keeps the keys (PostgreSQL's jsonb sorts them by length).
    assert sorted(filled["extra_args"].splitlines()) == [f"lr0: {lr0}", "plots: False"]

    # Another workspace's recipe, and an unknown one: the same refusal.
    theirs = workspace_recipe_create(
        access=stranger_access(stranger), name="Theirs", params=base_params(), train_images=3
    )
    fields = {
        "dataset_version": version.pk, "model_family": "yolo11", "model_size": "n",
        "weights": "scratch", "seed": 0, "gpu_type": gpu_local.pk, "epochs": recipe.epochs,
        "imgsz": recipe.imgsz, "batch": str(recipe.batch), "patience": recipe.patience,
        "optimizer": recipe.optimizer, "extra_args": f"plots: false\nlr0: {lr0}\n",
    }  # fmt: skip
    answers = []
    for slug in (f"saved-{theirs.pk}", "saved-999999"):
        refused = client.post(form_url, {**fields, "recipe": slug})
        assert refused.status_code == 400, slug
        answers.append(re.findall(r'class="error"[^>]*>([^<]*)<', refused.content.decode()))
    assert answers[0] == answers[1] == ["Pick a recipe from the list."]
    assert not TrainingJob.objects.filter(sweep_trial__isnull=True).exists()

    started = client.post(form_url, {**fields, "recipe": f"saved-{recipe.pk}"})
    assert started.status_code == 302, _form(started.content.decode())[-2000:]
    job = TrainingJob.objects.filter(sweep_trial__isnull=True).get()
    assert (job.imgsz, job.extra_args) == (recipe.imgsz, {"plots": False, "lr0": lr0})


def test_a_recipes_arguments_are_checked_as_anything_typed(team, project, version, gpu_local):
    access = team.access("editor")
    with pytest.raises(ServiceError, match="larger than the 3 training images"):
        workspace_recipe_create(
            access=access, name="Big", params=base_params(batch=16), train_images=3
        )
    with pytest.raises(ServiceError, match="Unknown argument 'lr1'"):
        workspace_recipe_create(
            access=access,
            name="Typo",
            params=base_params(extra_args={"lr1": 0.01}),
            train_images=3,
        )
    with pytest.raises(ServiceError, match="Name the recipe"):
        workspace_recipe_create(access=access, name="  ", params=base_params(), train_images=3)
    sweep = submit(team, project, version, gpu_local)
    from sweeps.services.submit import sweep_recipe_save

    with pytest.raises(ServiceError, match="No trial has finished"):
        sweep_recipe_save(access=access, sweep=sweep, name="Too soon")
    assert not WorkspaceRecipe.objects.exists()
