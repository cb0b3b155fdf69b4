"""An evaluation's worst images open in the dataset's gallery filtered to them (issue 27):
`?evaluation=<id>` shows exactly those images, its image pages step through them only, and
another workspace's evaluation shows nothing, as an unknown id does."""

import re

import pytest
from django.test import Client

from evaluations.models import Evaluation, EvaluationState
from tests.evaluations.conftest import version_with
from tests.training.factories import trained_model_row
from workspaces.selectors import workspace_access_for_user

pytestmark = pytest.mark.django_db


def _evaluation(*, workspace, version, model, images) -> Evaluation:
    return Evaluation.objects.create(
        workspace=workspace,
        project=model.project,
        model=model,
        dataset_version=version,
        task="detect",
        imgsz=64,
        state=EvaluationState.SUCCEEDED,
        worst_images=[
            {"file": f"{image.pk}.jpg", "fp": 2, "fn": 1, "tp": 0, "labels": 1,
             "sha256": image.blob.sha256, "image_id": image.pk}
            for image in images
        ] + [{"file": "gone.jpg", "fp": 1, "fn": 0, "tp": 0, "labels": 0, "sha256": "",
              "image_id": None}],
    )  # fmt: skip


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _shown(page) -> set[int]:
    return set(map(int, re.findall(r'data-image="(\d+)"', page.content.decode())))


def test_the_gallery_shows_exactly_an_evaluations_worst_images(team, stranger):
    access = team.access("editor")
    version = version_with(access=access, classes=["bird"], splits=("val", "val", "val"))
    dataset = version.dataset
    images = list(dataset.images.order_by("pk"))
    model = trained_model_row(workspace=team.workspace, class_names=["bird"])
    worst = [images[2], images[0]]
    evaluation = _evaluation(workspace=team.workspace, version=version, model=model, images=worst)
    viewer = _client(team.viewer)
    gallery = f"/w/acme/datasets/{dataset.pk}/images/"
    assert _shown(viewer.get(gallery)) == {i.pk for i in images}

    page = viewer.get(f"{gallery}?evaluation={evaluation.pk}")
    assert _shown(page) == {images[0].pk, images[2].pk}
    text = page.content.decode()
    assert 'data-testid="evaluation-filter"' in text and model.name in text
    assert f"/w/acme/evaluations/{evaluation.pk}/" in text
    # The image page steps through the filter: from the first worst image to the other.
    detail = viewer.get(f"{gallery}{images[0].pk}/?evaluation={evaluation.pk}").content.decode()
    assert f"/images/{images[2].pk}/?evaluation={evaluation.pk}" in detail
    assert f"/images/{images[1].pk}/" not in detail

    # The evaluation's page links each worst image and the whole set to that gallery.
    result = viewer.get(f"/w/acme/evaluations/{evaluation.pk}/").content.decode()
    assert f'href="{gallery}?evaluation={evaluation.pk}"' in result
    assert f'href="{gallery}{images[2].pk}/?evaluation={evaluation.pk}"' in result
    assert "/annotate/" not in result

    # Another workspace's evaluation naming these very images, and an unknown id: nothing.
    theirs_access = workspace_access_for_user(user=stranger, slug="elsewhere")
    their_model = trained_model_row(workspace=theirs_access.workspace, class_names=["bird"])
    theirs = _evaluation(
        workspace=theirs_access.workspace, version=version, model=their_model, images=images
    )
    for other in (theirs.pk, theirs.pk + 1000):
        refused = viewer.get(f"{gallery}?evaluation={other}")
        assert refused.status_code == 200 and _shown(refused) == set()
        assert "an evaluation that is not of this dataset" in refused.content.decode()
        assert their_model.name not in refused.content.decode()
