"""A semantic model's suggestions: the editor's Suggest and a whole-dataset pre-labelling run,
both through a real Celery worker running a real (tiny, one-epoch) yolo26n-sem model on drawn
pictures. A suggestion is one mask per class found, never a PixelMap until a person accepts it
and the editor saves it through the mask route, revision-checked.

A one-epoch model may call every pixel one class: these check the mechanics, not the quality."""

import io
import time

import numpy as np
import pytest
from django.test import Client
from PIL import Image as PILImage

from annotation.assist import AssistError
from annotation.assist.predict import mask_from_rle, mask_rle
from annotation.models import MASK_KIND, PrelabelRun, PrelabelState, Suggestion
from datasets.models import Dataset, DatasetClass, Image, LabelStatus, PixelMap
from datasets.services.pixel_maps import pixel_map_load
from tests.datasets.factories import blob_for
from tests.pixel_data import SEMANTIC_CLASSES, SIZE, semantic_sample, trained_semantic_weights
from tests.training.factories import trained_model_row

W, H = SIZE


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _png(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    PILImage.fromarray(array).save(out, format="PNG")
    return out.getvalue()


def _semantic(team, images: int) -> tuple[Dataset, list[Image]]:
    """A semantic dataset of drawn pictures without masks. Its class indexes are not the
    model's order (the model's classes are matched by name), so a suggestion painted by the
    model's index instead of the dataset's would show."""
    dataset = Dataset.objects.create(
        workspace=team.workspace, name="Shapes", task="semantic", created_by=team.owner
    )
    for index, name in zip((2, 0, 1), SEMANTIC_CLASSES, strict=True):
        DatasetClass.objects.create(dataset=dataset, index=index, name=name)
    rows = [
        Image.objects.create(
            dataset=dataset, blob=blob_for(_png(semantic_sample(k)[0])), filename=f"s{k}.png"
        )
        for k in range(images)
    ]
    return dataset, rows


def _model(team):
    return trained_model_row(
        workspace=team.workspace,
        class_names=list(SEMANTIC_CLASSES),
        task="semantic",
        weights=trained_semantic_weights().read_bytes(),
    )


def _class_map(suggestions: list[dict], dataset: Dataset) -> np.ndarray:
    """The suggestions painted as the editor paints them: each class's pixels with the index
    of its dataset class."""
    index_of = dict(dataset.classes.values_list("pk", "index"))
    class_map = np.full((H, W), 255, np.uint8)
    for s in suggestions:
        assert s["kind"] == MASK_KIND and s["class_id"] in index_of
        assert s["data"]["size"] == [H, W], "a mask of the image's size"
        region = mask_from_rle(s["data"])
        assert not (class_map[region] != 255).any(), "each pixel is at most one class"
        class_map[region] = index_of[s["class_id"]]
        assert s["confidence"] == pytest.approx(region.mean(), abs=1e-4), "its share"
    return class_map


def test_rle_round_trip_and_refusals():
    rng = np.random.default_rng(1)
    for mask in (rng.random((7, 5)) > 0.5, np.ones((3, 4), bool), np.zeros((2, 2), bool)):
        rle = mask_rle(mask)
        assert rle["size"] == list(mask.shape) and (mask_from_rle(rle) == mask).all()
    with pytest.raises(AssistError, match="add up to 3, not 2×2"):
        mask_from_rle({"size": [2, 2], "counts": [1, 2]})
    with pytest.raises(AssistError, match="not COCO RLE"):
        mask_from_rle({"counts": [4]})


# One test, one worker: a worker's start and its first model load are most of the time.
@pytest.mark.django_db(transaction=True)
def test_suggest_accept_through_the_mask_route_then_prelabel_the_rest(team, celery_worker_process):
    dataset, (image, other, third) = _semantic(team, 3)
    model = _model(team)
    editor = _client(team.editor)
    # Another image's suggestion: a save of this image's mask must leave it alone.
    theirs = Suggestion.objects.create(
        image=other,
        dataset_class=dataset.classes.first(),
        model=model,
        kind=MASK_KIND,
        data=mask_rle(np.ones((H, W), bool)),
        confidence=1.0,
    )

    response = editor.post(
        f"/api/v1/images/{image.pk}/suggestions",
        {"model_id": model.pk},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    suggestions = response.json()["suggestions"]
    assert suggestions, "a three-class model gives every pixel a class"
    proposed = _class_map(suggestions, dataset)
    assert (proposed != 255).all(), "every pixel is one of the dataset's classes"
    assert set(np.unique(proposed)) <= {0, 1, 2}
    # A suggestion, not a label: no map, the image still unlabelled at revision 0; and the
    # editor reads the same suggestions back when it opens the image.
    assert not PixelMap.objects.filter(image=image).exists()
    image.refresh_from_db()
    assert (image.status, image.revision) == (LabelStatus.UNLABELLED, 0)
    assert editor.get(f"/api/v1/images/{image.pk}/labels").json()["suggestions"] == suggestions

    ids = ",".join(str(s["id"]) for s in suggestions)
    url = f"/api/v1/images/{image.pk}/mask?accepted={ids},{theirs.pk}"
    # A stale revision saves nothing and keeps the suggestions.
    stale = editor.put(f"{url}&revision=3", _png(proposed), content_type="image/png")
    assert stale.status_code == 409 and stale.json()["revision"] == 0
    assert Suggestion.objects.filter(image=image).count() == len(suggestions)
    assert not PixelMap.objects.filter(image=image).exists()
    # Ids that are not numbers (or not a database's) are refused in words.
    for junk in ("x", "²", "9" * 30):
        bad = editor.put(f"{url},{junk}&revision=0", _png(proposed), content_type="image/png")
        assert bad.status_code == 400 and "ids separated by commas" in bad.json()["detail"]

    saved = editor.put(f"{url}&revision=0", _png(proposed), content_type="image/png")
    assert saved.status_code == 200, saved.content
    assert saved.json()["revision"] == 1 and saved.json()["status"] == LabelStatus.LABELLED
    assert (pixel_map_load(PixelMap.objects.get(image=image)) == proposed).all()
    assert not Suggestion.objects.filter(image=image).exists(), "accepted: gone"
    assert Suggestion.objects.filter(pk=theirs.pk).exists(), "another image's: kept"

    # Pre-labelling the unlabelled rest (the two others) stores suggestions, never masks.
    response = editor.post(
        f"/w/acme/datasets/{dataset.pk}/labelling/prelabel/",
        {"model": model.pk, "conf": 0.25, "only_unlabelled": "on"},
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
    assert run.suggestions == Suggestion.objects.filter(kind=MASK_KIND).count()
    assert not Suggestion.objects.filter(pk=theirs.pk).exists(), "replaced by the run's"
    for unlabelled in (other, third):
        suggestions = editor.get(f"/api/v1/images/{unlabelled.pk}/labels").json()["suggestions"]
        assert suggestions, f"{unlabelled.filename} has the model's mask to review"
        assert (_class_map(suggestions, dataset) != 255).all()
    assert list(
        PixelMap.objects.filter(image__dataset=dataset).values_list("image", flat=True)
    ) == [image.pk], "no map was written by the run"
    assert set(
        Image.objects.filter(pk__in=[other.pk, third.pk]).values_list("status", "revision")
    ) == {(LabelStatus.UNLABELLED, 0)}
    assert not Suggestion.objects.filter(image=image).exists(), "a labelled image is skipped"
    # The editor of a semantic image offers the model.
    page = editor.get(f"/w/acme/datasets/{dataset.pk}/images/{other.pk}/annotate/")
    assert 'data-testid="mask-suggest"' in page.content.decode()
    assert f'<option value="{model.pk}">' in page.content.decode()
