"""Production images back to labelling (issue 27): a deployment's collection rule keeps exactly
the images it selects (confidence band, classes, sampling, daily cap), in its dataset, with the
model's predictions as suggestions and never as labels; with the rule off nothing of a call is
kept anywhere. Predictions come from the real model server, storing from a real worker."""

import hashlib
import json
import os
import time
from pathlib import Path

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from annotation.models import Suggestion
from datasets.models import Image, Label, LabelStatus
from deploy import supervisor
from deploy.collection.decide import answer_confidence, collection_offer
from deploy.collection.rules import collection_rule_save, workspace_storage_bytes
from deploy.collection.store import answer_predictions
from deploy.models import CollectedImage, CollectionRule, Deployment, DeploymentState
from deploy.ratelimit import _redis
from tests.annotation.weights import confident_weights_save
from tests.datasets.factories import DatasetClassFactory, DatasetFactory
from tests.training.factories import trained_model_row
from workspaces.models import Membership
from workspaces.services.keys import api_key_create

pytestmark = pytest.mark.django_db
COCO8 = Path(__file__).resolve().parents[2].parent / "shared/datasets/coco8/images"
IMAGES = sorted((COCO8 / "train").glob("*.jpg")) + sorted((COCO8 / "val").glob("*.jpg"))
PERSON_CAR = ["person", "bicycle", "car"]


@pytest.fixture(autouse=True)
def _no_collect_keys():
    r = _redis()
    for key in r.scan_iter("kestrel:collect:*"):
        r.delete(key)
    yield
    for key in r.scan_iter("kestrel:collect:*"):
        r.delete(key)


def _payloads() -> list:
    return list(_redis().scan_iter("kestrel:collect:payload:*"))


def _offered() -> int:
    """Images handed to a worker today, by every rule (less those given back)."""
    r = _redis()
    return sum(int(r.get(key) or 0) for key in r.scan_iter("kestrel:collect:count:*"))


def _dataset(workspace, name="From production", task="detect", classes=("person", "car")):
    dataset = DatasetFactory(workspace=workspace, name=name, task=task)
    for index, class_name in enumerate(classes):
        DatasetClassFactory(dataset=dataset, index=index, name=class_name)
    return dataset


def _rule(client: Client, url: str, **fields) -> list[str]:
    """Post the rule form as the page does; the messages it answered with."""
    data = {"conf_min": "0.25", "conf_max": "0.6", "sample_rate": "1", "daily_cap": "100"}
    data |= {k: v for k, v in fields.items() if v is not None}
    if data.pop("enabled", False):
        data["enabled"] = "on"
    response = client.post(url, data)
    assert response.status_code == 302, response.content
    return [str(m) for m in get_messages(response.wsgi_request)]


def _predict(client: Client, url: str, path: Path, **params):
    with path.open("rb") as f:
        response = client.post(url, {"file": f, "imgsz": "64", **params})
    assert response.status_code == 200, response.content
    return response.json()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(root) -> set[str]:
    return {
        os.path.relpath(os.path.join(folder, name), root)
        for folder, _, names in os.walk(root)
        for name in names
    }


def _wait(predicate, what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _confidences(answer: dict) -> list[float]:
    (image,) = answer["images"]
    return [r["confidence"] for r in image["results"]]


def test_a_rule_keeps_exactly_what_it_selects(
    team, inference_server, celery_worker_process, settings, tmp_path
):
    """Off: answered, nothing kept. On: a band below or above the model's confidence keeps
    nothing; a band around it keeps the two calls whose answers have a prediction in it, not
    the third (answered nothing at conf=1); a class filter stops another; an image already
    collected is not added twice. A dedicated endpoint collects by its own rule, its daily cap
    of 1 keeping the first image only. A full plan stops collection and the page says so."""
    settings.INFERENCE_URL = inference_server.url
    weights = confident_weights_save(tmp_path / "confident.pt").read_bytes()
    model = trained_model_row(
        workspace=team.workspace, class_names=["person", "bicycle", "car"], weights=weights
    )
    # Its hash, as every stored model has: the session's model server caches models by id and
    # hash, and an earlier test's model may have had this id.
    model.weights_sha256 = hashlib.sha256(weights).hexdigest()
    model.save(update_fields=["weights_sha256"])
    dataset = _dataset(team.workspace)
    _, raw = api_key_create(access=team.access("owner"), name="prod", scopes=["predict"])
    caller = Client(headers={"Authorization": f"Bearer {raw}"})
    editor = Client()
    editor.force_login(team.editor)
    shared_url = f"/api/v1/models/{model.pk}/predict"
    rule_url = reverse("model_collection", args=["acme", model.pk])
    a, b, c, d, e, f, g = IMAGES[:7]

    # Off (no rule, then a rule saved off): every call answered, nothing of it kept anywhere.
    media = _files(settings.MEDIA_ROOT)
    answers = {path: _predict(caller, shared_url, path) for path in (a, b)}
    # (a rule that would take every image, were it on)
    assert _rule(editor, rule_url, dataset=dataset.pk, conf_min=0, conf_max=1) == [
        "Collection is off: callers' images are not kept."
    ]
    _predict(caller, shared_url, c)
    time.sleep(1)  # what a worker would have taken by now
    # Not even offered: no image waiting, and no count of the day (a key that stays).
    assert not list(_redis().scan_iter("kestrel:collect:*"))
    assert not Image.objects.exists() and not CollectedImage.objects.exists()
    assert _files(settings.MEDIA_ROOT) == media

    # The model is sure of "person" (> 0.95) everywhere: a band below or above that keeps
    # nothing, and nothing is even handed to a worker.
    assert all(min(_confidences(answer)) > 0.95 for answer in answers.values())
    for band in ((0.5, 0.9), (0.2, 0.4)):
        _rule(
            editor, rule_url, enabled=True, dataset=dataset.pk, conf_min=band[0], conf_max=band[1]
        )
        _predict(caller, shared_url, a)
        assert _offered() == 0
    # A band around it: a and b are kept; c, answered at conf=1, has no prediction in it.
    messages = _rule(editor, rule_url, enabled=True, dataset=dataset.pk, conf_min=0.95, conf_max=1)
    assert messages[-1] == "Collecting the images the rule selects into “From production”."
    _predict(caller, shared_url, a)
    _predict(caller, shared_url, b)
    assert _predict(caller, shared_url, c, conf="1")["images"][0]["results"] == []
    _wait(lambda: CollectedImage.objects.count() == 2, "two collected images")
    images = Image.objects.filter(dataset=dataset).select_related("blob")
    assert {i.blob.sha256 for i in images} == {_sha(a), _sha(b)}
    assert all(i.status == LabelStatus.UNLABELLED and i.label_count == 0 for i in images)
    assert not Label.objects.filter(image__dataset=dataset).exists()  # never labels
    person = dataset.classes.get(name="person")
    for image in images:
        path = a if image.blob.sha256 == _sha(a) else b
        boxes = Suggestion.objects.filter(image=image)
        assert boxes.count() == len(_confidences(answers[path]))
        assert {(s.kind, s.dataset_class_id, s.model_id) for s in boxes} == {
            ("box", person.pk, model.pk)
        }
        assert all(len(s.data) == 4 and all(0 <= v <= 1 for v in s.data) for s in boxes)
        collected = image.collected
        assert collected.dataset_id == dataset.pk and collected.deployment_id is None
        assert collected.confidence == min(_confidences(answers[path]))
        assert collected.source == f"the shared API ({model.name})"
    assert not _payloads()

    # The labelling page shows where each came from.
    shown = CollectedImage.objects.first()
    page = editor.get(reverse("image_annotate", args=["acme", dataset.pk, shown.image_id]))
    html = page.content.decode()
    assert f"from the shared API ({model.name})" in html
    assert f"conf {shown.confidence:.2f}" in html
    assert shown.created_at.strftime("%Y-%m-%d %H:%M") in html

    # Classes: only "car", and the model sees persons: d is not kept, nothing is sent. Then
    # every class: d is kept, and an image already collected is not added twice.
    _rule(editor, rule_url, enabled=True, dataset=dataset.pk, conf_min=0, conf_max=1, classes="car")
    _predict(caller, shared_url, d)
    assert _offered() == 2  # a and b, before
    _rule(editor, rule_url, enabled=True, dataset=dataset.pk, conf_min=0, conf_max=1)
    _predict(caller, shared_url, a)
    _predict(caller, shared_url, d)  # one worker takes them in order: d is stored after
    _wait(lambda: CollectedImage.objects.count() == 3, "the third collected image")
    assert Image.objects.filter(dataset=dataset).count() == 3
    assert Image.objects.filter(dataset=dataset, blob__sha256=_sha(a)).count() == 1
    assert Image.objects.filter(dataset=dataset, blob__sha256=_sha(d)).exists()
    # The day's count: a, b and d (the duplicate's was given back).
    try_page = editor.get(reverse("model_try", args=["acme", model.pk])).content.decode()
    assert 'data-testid="collection-today">3<' in try_page

    # A dedicated endpoint of the same model, by its own rule: a daily cap of 1 keeps e, not f.
    street = _dataset(team.workspace, name="Street")
    deployment = Deployment.objects.create(
        workspace=team.workspace,
        model=model,
        slug="collect-test",
        name="Street cam",
        desired_running=True,
        state=DeploymentState.STARTING,
    )
    deployment = supervisor.process_start(deployment)
    try:
        assert deployment.state == DeploymentState.RUNNING, deployment.last_error
        _rule(
            editor,
            reverse("deployment_collection", args=["acme", deployment.pk]),
            enabled=True,
            dataset=street.pk,
            conf_min=0,
            conf_max=1,
            daily_cap=1,
        )
        _predict(caller, "/d/collect-test/predict", e)
        _predict(caller, "/d/collect-test/predict", f)
        _wait(lambda: CollectedImage.objects.count() == 4, "the endpoint's collected image")
        kept = CollectedImage.objects.select_related("image__blob").get(deployment=deployment)
        assert kept.image.blob.sha256 == _sha(e) and kept.dataset_id == street.pk
        assert kept.source == "deployment “Street cam”"
        boxes = Suggestion.objects.filter(image=kept.image)
        person = street.classes.get(name="person")
        assert boxes and {(s.kind, s.dataset_class_id) for s in boxes} == {("box", person.pk)}
        assert all(len(s.data) == 4 and all(0 <= v <= 1 for v in s.data) for s in boxes)
        page = editor.get(reverse("deployment_detail", args=["acme", deployment.pk]))
        html = page.content.decode()
        assert 'data-collecting="on"' in html and 'data-testid="collection-today">1<' in html
    finally:
        supervisor.process_stop(deployment)

    # The plan's storage is full: g is selected, not stored, and the page says why.
    plan = team.workspace.plan
    plan.storage_quota_bytes = workspace_storage_bytes(team.workspace)
    plan.save(update_fields=["storage_quota_bytes"])
    _predict(caller, shared_url, g)
    rule = CollectionRule.objects.get(model=model)
    _wait(
        lambda: CollectionRule.objects.filter(pk=rule.pk, storage_full_at__isnull=False).exists(),
        "the rule to say the storage is full",
    )
    # The worker took g after f (one worker, in order): f, over the endpoint's cap, was never
    # handed on, and g was not stored.
    assert CollectedImage.objects.count() == 4
    assert not Image.objects.filter(blob__sha256__in=[_sha(f), _sha(g)]).exists()
    try_page = editor.get(reverse("model_try", args=["acme", model.pk])).content.decode()
    assert 'data-testid="collection-storage-full"' in try_page
    offered = _offered()
    _predict(caller, shared_url, g)  # while full, nothing is offered
    assert _offered() == offered and not _payloads()


# --- the rule's checks, without a model server ----------------------------------------------


@pytest.fixture
def model(team):
    return trained_model_row(workspace=team.workspace, class_names=PERSON_CAR)


def _save(team, model, **kw):
    values = {
        "enabled": True,
        "dataset_id": None,
        "conf_min": 0.2,
        "conf_max": 0.6,
        "classes": [],
        "sample_rate": 1.0,
        "daily_cap": 10,
    } | kw
    return collection_rule_save(access=team.access("editor"), model=model, **values)


def test_a_rule_pointing_at_another_workspaces_dataset_is_refused(team, model, stranger, client):
    theirs = _dataset(Membership.objects.get(user=stranger).workspace, name="Theirs")
    client.force_login(team.editor)
    url = reverse("model_collection", args=["acme", model.pk])
    for dataset_id in (theirs.pk, theirs.pk + 1000):  # another team's, and none: the same words
        messages = _rule(client, url, enabled=True, dataset=dataset_id)
        # (the messages of both posts: the redirect that shows them is not followed)
        assert set(messages) == {
            "The collection rule was not saved: No such dataset in this workspace."
        }
    assert not CollectionRule.objects.exists()


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"dataset": "segment"}, "is a segment dataset"),
        ({"dataset": "no-classes"}, "None of"),
        ({"classes": ["car"], "dataset": "persons-only"}, "has no class “car”"),
        ({"classes": ["truck"]}, "“truck” is not a class"),
        ({"conf_min": 0.6, "conf_max": 0.6}, "lowest below its highest"),
        ({"conf_max": 1.5}, "within 0 to 1"),
        ({"sample_rate": 0.0}, "sampling rate"),
        ({"daily_cap": 0}, "daily cap"),
        ({"dataset": None}, "Choose the dataset"),
    ],
)
def test_a_bad_rule_is_refused_with_the_reason(team, model, change, words):
    datasets = {
        "ok": _dataset(team.workspace, name="ok"),
        "segment": _dataset(team.workspace, name="seg", task="segment"),
        "no-classes": _dataset(team.workspace, name="cats", classes=("cat",)),
        "persons-only": _dataset(team.workspace, name="persons", classes=("person",)),
    }
    change = dict(change)
    name = change.pop("dataset", "ok")
    change["dataset_id"] = datasets[name].pk if name else None
    with pytest.raises(Exception, match=words) as refused:
        _save(team, model, **change)
    assert type(refused.value).__name__ == "ServiceError"
    assert not CollectionRule.objects.exists()


def test_a_semantic_model_cannot_collect(team):
    semantic = trained_model_row(workspace=team.workspace, class_names=["road"], task="semantic")
    dataset = _dataset(team.workspace, task="semantic", classes=("road",))
    with pytest.raises(Exception, match="answers per pixel"):
        _save(team, semantic, dataset_id=dataset.pk)


def test_the_decision_reads_the_band_the_classes_and_the_rate(team, model):
    rule = _save(team, model, dataset_id=_dataset(team.workspace).pk, conf_min=0.3, conf_max=0.5)
    rows = [
        {"class": 0, "name": "person", "confidence": 0.9},
        {"class": 2, "name": "car", "confidence": 0.42},
    ]
    image = {"shape": [100, 200], "results": rows}
    assert answer_confidence(task="detect", image=image, rule=rule) == 0.42
    rule.classes = ["person"]
    assert answer_confidence(task="detect", image=image, rule=rule) is None
    # A classifier is judged by its top-1 alone.
    rule.classes = []
    assert answer_confidence(task="classify", image=image, rule=rule) is None
    image["results"] = [rows[1], {"class": 0, "name": "person", "confidence": 0.31}]
    assert answer_confidence(task="classify", image=image, rule=rule) == 0.42

    # A draw over the sampling rate: not collected, nothing written, nothing counted.
    CollectionRule.objects.filter(pk=rule.pk).update(sample_rate=0.5)
    answer = json.dumps(
        {
            "images": [
                {"shape": [100, 200], "results": [{"class": 2, "name": "car", "confidence": 0.4}]}
            ]
        }
    ).encode()
    kept = collection_offer(
        rule_id=rule.pk, model=model, deployment_id=None, image=b"x", answer=answer, draw=0.7
    )
    assert kept is False and not list(_redis().scan_iter("kestrel:collect:*"))


def test_predictions_become_suggestions_of_each_task():
    image = {
        "shape": [100, 200],
        "results": [
            {
                "class": 0,
                "name": "person",
                "confidence": 0.5,
                "box": {"x1": 20, "y1": 10, "x2": 60, "y2": 50},
                "segments": {"x": [20, 60, 60], "y": [10, 10, 50]},
                "keypoints": {"x": [40, 0], "y": [30, 0], "visible": [0.9, 0.1]},
            },
            {
                "class": 1,
                "name": "car",
                "confidence": 0.7,
                "box": {"x1": 0, "y1": 0, "x2": 1, "y2": 1},
            },
        ],
    }
    (box,) = answer_predictions(task="detect", image=image, classes=["person"])
    assert box == ("box", 0, [0.2, 0.3, 0.2, 0.4], 0.5)
    polygon = answer_predictions(task="segment", image=image, classes=["Person"])[0]
    assert polygon[:2] == ("polygon", 0) and polygon[2] == [0.1, 0.1, 0.3, 0.1, 0.3, 0.5]
    keypoints = answer_predictions(task="pose", image=image, classes=["person"])[0]
    assert keypoints[2] == [0.2, 0.3, 0.2, 0.4, 0.2, 0.3, 2.0, 0.0, 0.0, 0.0]
    obb_row = {
        "class": 0,
        "name": "person",
        "confidence": 0.5,
        "box": {"x1": 20, "y1": 10, "x2": 60, "y2": 10, "x3": 60, "y3": 50, "x4": 20, "y4": 50},
    }
    (obb,) = answer_predictions(
        task="obb", image={"shape": [100, 200], "results": [obb_row]}, classes=[]
    )
    assert obb[2] == [0.1, 0.1, 0.3, 0.1, 0.3, 0.5, 0.1, 0.5]
    (tag,) = answer_predictions(task="classify", image=image, classes=[])
    assert tag == ("tag", 1, [], 0.7)
