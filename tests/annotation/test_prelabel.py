"""Model-assisted labelling end to end: the editor's Suggest button and a whole-dataset
pre-labelling run, both through a real Celery worker running a real Ultralytics model on
real coco8 images; least-confident-first ordering from the run."""

import time
from pathlib import Path

import pytest
from django.test import Client

from annotation.models import PrelabelRun, PrelabelState, Suggestion
from datasets.models import Image, LabelStatus
from tests.datasets.factories import DatasetClassFactory, DatasetFactory, ImageFactory, blob_for

COCO = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "coco8"


@pytest.fixture
def birds(team):
    dataset = DatasetFactory(workspace=team.workspace, task="detect", name="Birds")
    bird = DatasetClassFactory(dataset=dataset, index=0, name="bird")
    images = [
        ImageFactory(dataset=dataset, blob=blob_for(path.read_bytes(), "image/jpeg"))
        for path in sorted((COCO / "images" / "train").glob("*.jpg"))[:3]
    ]
    return dataset, bird, images


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db(transaction=True)
def test_suggest_runs_the_model_in_a_worker_and_returns_its_boxes(
    team, birds, trained_model, celery_worker_process
):
    _, bird, (image, *_) = birds
    response = _client(team.editor).post(
        f"/api/v1/images/{image.pk}/suggestions",
        {"model_id": trained_model.pk},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    suggestions = response.json()["suggestions"]
    assert suggestions, "a model sure of class 0 suggests boxes"
    for s in suggestions:
        assert s["kind"] == "box" and s["class_id"] == bird.pk and s["confidence"] > 0.9
        cx, cy, w, h = s["data"]
        assert 0 <= cx <= 1 and 0 <= cy <= 1 and 0 < w <= 1 and 0 < h <= 1
    assert Suggestion.objects.filter(image=image).count() == len(suggestions)
    # Accepting one makes it a label, in the same save that removes the suggestion.
    chosen = suggestions[0]
    response = _client(team.editor).put(
        f"/api/v1/images/{image.pk}/labels",
        {
            "revision": 0,
            "labels": [{k: chosen[k] for k in ("kind", "class_id", "data")}],
            "accepted_suggestions": [chosen["id"]],
        },
        content_type="application/json",
    )
    assert response.status_code == 200
    assert not Suggestion.objects.filter(pk=chosen["id"]).exists()
    assert image.labels.count() == 1


@pytest.mark.django_db
def test_suggest_refuses_a_model_of_another_task_or_workspace(team, birds, trained_model, stranger):
    _, _, (image, *_) = birds
    trained_model.task = "segment"
    trained_model.save(update_fields=["task"])
    response = _client(team.editor).post(
        f"/api/v1/images/{image.pk}/suggestions",
        {"model_id": trained_model.pk},
        content_type="application/json",
    )
    assert response.status_code == 400 and "segment model" in response.json()["detail"]
    from tests.training.factories import trained_model_row
    from workspaces.models import Membership

    elsewhere = trained_model_row(
        workspace=Membership.objects.get(user=stranger).workspace, class_names=["bird"]
    )
    response = _client(team.editor).post(
        f"/api/v1/images/{image.pk}/suggestions",
        {"model_id": elsewhere.pk},
        content_type="application/json",
    )
    assert response.status_code == 400 and "No such model" in response.json()["detail"]


@pytest.mark.django_db
def test_prelabel_refuses_a_model_without_a_shared_class(team, birds):
    from tests.training.factories import trained_model_row

    dataset, _, _ = birds
    model = trained_model_row(workspace=team.workspace, class_names=["car", "bus"])
    response = _client(team.editor).post(
        f"/w/acme/datasets/{dataset.pk}/labelling/prelabel/",
        {"model": model.pk, "conf": 0.25, "only_unlabelled": "on"},
        follow=True,
    )
    assert "None of" in response.content.decode() and "car" in response.content.decode()
    assert not PrelabelRun.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_prelabel_run_writes_suggestions_with_progress_and_orders_the_queue(
    team, birds, trained_model, celery_worker_process
):
    dataset, bird, (labelled, *unlabelled) = birds
    Image.objects.filter(pk=labelled.pk).update(status=LabelStatus.LABELLED)
    client = _client(team.editor)
    response = client.post(
        f"/w/acme/datasets/{dataset.pk}/labelling/prelabel/",
        {"model": trained_model.pk, "conf": 0.25, "only_unlabelled": "on"},
        follow=True,
    )
    assert "Pre-labelling 2 images" in response.content.decode()
    run = PrelabelRun.objects.get()
    deadline = time.monotonic() + 120
    while run.state not in (PrelabelState.SUCCEEDED, PrelabelState.FAILED):
        assert time.monotonic() < deadline, "the run did not finish"
        time.sleep(0.5)
        run.refresh_from_db()
    assert run.state == PrelabelState.SUCCEEDED, run.error
    assert run.done == run.total == 2
    assert run.suggestions == Suggestion.objects.count() > 0
    # Suggestions only, on the unlabelled images only; no label was written.
    assert set(Suggestion.objects.values_list("image_id", flat=True)) == {i.pk for i in unlabelled}
    assert not Image.objects.filter(dataset=dataset, label_count__gt=0).exists()
    page = client.get(f"/w/acme/datasets/{dataset.pk}/labelling/").content.decode()
    assert 'data-state="succeeded"' in page and "2 / 2" in page
    # Least confident first: the unlabelled images by the run's uncertainty, highest first.
    scores = dict(Image.objects.filter(dataset=dataset).values_list("pk", "uncertainty"))
    assert scores[labelled.pk] is None and all(scores[i.pk] is not None for i in unlabelled)
    first = max(unlabelled, key=lambda i: (scores[i.pk], -i.pk))
    response = client.get(f"/w/acme/datasets/{dataset.pk}/least-confident/")
    assert response["Location"].endswith(f"/images/{first.pk}/annotate/?queue=uncertain")
    # A second run while one is going is refused; after it, allowed.
    PrelabelRun.objects.filter(pk=run.pk).update(state=PrelabelState.RUNNING)
    response = client.post(
        f"/w/acme/datasets/{dataset.pk}/labelling/prelabel/",
        {"model": trained_model.pk, "conf": 0.25},
        follow=True,
    )
    assert "already going" in response.content.decode()
