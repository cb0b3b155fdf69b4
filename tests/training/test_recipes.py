"""Recipes on the training form (training/recipes.py, issue 33): each shows the arguments it sets,
one is picked from the version's size and the weights, it fills the fields a person can still
change, and what is submitted is checked like anything typed."""

import dataclasses
import html
import re

import pytest
from django.urls import reverse

from core.errors import ServiceError
from training.models import TrainingJob, WeightsSource
from training.recipes import (
    FAST_CHECK,
    FINE_TUNE,
    RECIPES,
    SMALL_DATASET_IMAGES,
    SMALL_FROM_SCRATCH,
    ULTRALYTICS_DEFAULTS,
    recipe_default,
)
from training.services.arguments import extra_args_parse, train_params_validate
from training.services.demo_model import DEMO_PARAMS

pytestmark = pytest.mark.django_db


def _url(route: str, **kwargs) -> str:
    return reverse(route, kwargs={"ws_slug": "acme", **kwargs})


def _field(page: str, name: str) -> str:
    match = re.search(rf'<input type="[a-z]+" name="{name}" value="([^"]*)"', page)
    assert match, f"no {name} field"
    return match.group(1)


def _checked_recipe(page: str) -> str:
    found = re.findall(r'<input type="radio" name="recipe" value="([^"]+)"[^>]*checked', page)
    assert len(found) == 1, found
    return found[0]


def test_the_small_dataset_recipe_is_the_demo_models_and_every_recipe_validates():
    # The demo's, with 30 epochs instead of 20 for YOLO26n (training/recipes.py says why).
    assert SMALL_FROM_SCRATCH.params(
        task="detect", model_family="yolo11", model_size="n", weights=WeightsSource.SCRATCH
    ) == dataclasses.replace(DEMO_PARAMS, epochs=30)
    for recipe in RECIPES:
        fields = recipe.fields(train_images=4)
        params = recipe.params(
            task="detect", model_family="yolo11", model_size="n", weights="scratch"
        )
        assert extra_args_parse(fields["extra_args"]) == recipe.extra_args
        assert train_params_validate(params, train_images=200).epochs == recipe.epochs
        if recipe.batch > 0:
            assert fields["batch"] == "4"  # never more than the version's training images
    with pytest.raises(ServiceError, match="larger than the 4 training images"):
        train_params_validate(
            FAST_CHECK.params(
                task="detect", model_family="yolo11", model_size="n", weights="scratch"
            ),
            train_images=4,
        )


def test_the_default_recipe_follows_the_size_and_the_weights():
    small, large = SMALL_DATASET_IMAGES, SMALL_DATASET_IMAGES + 1
    assert recipe_default(train_images=small, weights="scratch") == SMALL_FROM_SCRATCH
    assert recipe_default(train_images=large, weights="scratch") == ULTRALYTICS_DEFAULTS
    assert recipe_default(train_images=small, weights="pretrained") == FINE_TUNE
    assert recipe_default(train_images=large, weights="model") == FINE_TUNE


def test_the_form_shows_each_recipe_with_its_arguments_and_fills_the_default(
    client,
    team,
    project,
    detect_version,
    gpu_local,
    settings,
    tmp_path,
):
    settings.TRAINING_WEIGHTS_DIR = tmp_path / "none"
    client.force_login(team.editor)
    page = html.unescape(client.get(_url("job_create", pk=project.pk)).content.decode())

    shown = re.findall(r'data-testid="recipe-args">(.*?)</code>', page)
    assert shown == [r.arguments() for r in RECIPES]
    assert shown[0] == (
        "epochs 30, imgsz 128, batch 8, patience 5, optimizer AdamW, nbs 8, lr0 0.003, "
        "warmup_epochs 1, close_mosaic 6"
    )
    # No weights here, 4 training images: the demo's recipe, its batch capped at the images.
    assert _checked_recipe(page) == "small-scratch"
    assert (_field(page, "epochs"), _field(page, "imgsz"), _field(page, "batch")) == (
        "30",
        "128",
        "4",
    )
    extra = re.search(r'<textarea name="extra_args"[^>]*>(.*?)</textarea>', page, re.S).group(1)
    assert extra.split() == [
        "nbs:",
        "8",
        "lr0:",
        "0.003",
        "warmup_epochs:",
        "1",
        "close_mosaic:",
        "6",
    ]


def test_with_pretrained_weights_here_the_form_fine_tunes(
    client,
    team,
    project,
    detect_version,
    gpu_local,
    settings,
    tmp_path,
):
    settings.TRAINING_WEIGHTS_DIR = tmp_path
    (tmp_path / "yolo26n.pt").write_bytes(b"the form only asks whether it is there")
    client.force_login(team.editor)
    page = html.unescape(client.get(_url("job_create", pk=project.pk)).content.decode())
    assert _checked_recipe(page) == "fine-tune"
    assert (_field(page, "epochs"), _field(page, "imgsz"), _field(page, "batch")) == (
        "50",
        "640",
        "auto",
    )


def test_a_recipes_fields_as_submitted_start_a_job_with_them(
    client,
    team,
    project,
    detect_version,
    gpu_local,
):
    fields = SMALL_FROM_SCRATCH.fields(train_images=4)
    client.force_login(team.editor)
    response = client.post(
        _url("job_create", pk=project.pk),
        {
            "dataset_version": detect_version.pk,
            "model_family": "yolo11",
            "model_size": "n",
            "weights": "scratch",
            "recipe": "small-scratch",
            "seed": 0,
            "gpu_type": gpu_local.pk,
            "start": "1",
            **fields,
        },
    )
    assert response.status_code == 302, html.unescape(response.content.decode())[-3000:]
    job = TrainingJob.objects.get()
    assert (job.epochs, job.imgsz, job.batch, job.patience, job.optimizer) == (
        30,
        128,
        4,
        5,
        "AdamW",
    )
    assert job.extra_args == {"nbs": 8, "lr0": 0.003, "warmup_epochs": 1, "close_mosaic": 6}


@pytest.fixture(autouse=True)
def _no_weights_download(settings):
    settings.TRAINING_ALLOW_DOWNLOADS = False


def test_a_recipes_line_shows_floats_to_six_digits_and_sets_them_whole():
    """A sweep's best settings are saved as found (lr0 0.048798203043577466); its line reads
    0.0487982, while the form's box and the job get the whole value."""
    swept = dataclasses.replace(
        SMALL_FROM_SCRATCH, extra_args={"lr0": 0.048798203043577466, "box": 7.5, "mosaic": 1.0}
    )
    line = swept.arguments()
    assert "lr0 0.0487982," in line and "box 7.5," in line and line.endswith("mosaic 1")
    assert extra_args_parse(swept.fields(train_images=40)["extra_args"])["lr0"] == (
        0.048798203043577466
    )
