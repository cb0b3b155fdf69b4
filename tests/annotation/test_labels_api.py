"""The labels API the editor saves through: validation, revisions, permissions by role and
workspace, suggestions hidden when they duplicate a label."""

import pytest
from django.test import Client

from annotation.models import Suggestion
from datasets.models import Image, Label, LabelStatus
from tests.datasets.factories import DatasetClassFactory, DatasetFactory, ImageFactory
from tests.training.factories import trained_model_row

pytestmark = pytest.mark.django_db


@pytest.fixture
def ds(team):
    dataset = DatasetFactory(workspace=team.workspace, task="detect", name="Birds")
    bird = DatasetClassFactory(dataset=dataset, index=0, name="bird")
    nest = DatasetClassFactory(dataset=dataset, index=1, name="nest")
    image = ImageFactory(dataset=dataset)  # 64 × 48 px
    return dataset, bird, nest, image


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _put(client, image, body):
    return client.put(f"/api/v1/images/{image.pk}/labels", body, content_type="application/json")


def test_get_returns_labels_revision_and_status(team, ds):
    _, bird, _, image = ds
    Label.objects.create(image=image, dataset_class=bird, kind="box", data=[0.5, 0.5, 0.2, 0.2])
    body = _client(team.viewer).get(f"/api/v1/images/{image.pk}/labels").json()
    assert body["revision"] == 0
    assert body["status"] == "unlabelled"
    assert body["labels"] == [{"kind": "box", "class_id": bird.pk, "data": [0.5, 0.5, 0.2, 0.2]}]
    assert body["suggestions"] == []


def test_save_replaces_labels_bumps_revision_and_marks_labelled(team, ds):
    _, bird, nest, image = ds
    client = _client(team.editor)
    response = _put(
        client,
        image,
        {
            "revision": 0,
            "labels": [
                {"kind": "box", "class_id": bird.pk, "data": [0.5, 0.5, 0.5, 0.5]},
                {"kind": "box", "class_id": nest.pk, "data": [0.25, 0.25, 0.1, 0.1]},
            ],
        },
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["revision"] == 1 and body["status"] == "labelled"
    image.refresh_from_db()
    assert image.label_count == 2 and image.labelled_by == team.editor
    assert sorted(
        Label.objects.filter(image=image).values_list("dataset_class__name", flat=True)
    ) == [
        "bird",
        "nest",
    ]
    # Saving again from revision 1 replaces them.
    response = _put(client, image, {"revision": 1, "labels": []})
    assert response.json()["revision"] == 2
    assert not Label.objects.filter(image=image).exists()


def test_stale_revision_is_refused_and_nothing_is_written(team, ds):
    _, bird, _, image = ds
    _put(_client(team.admin), image, {"revision": 0, "labels": []})  # someone else saved first
    response = _put(
        _client(team.editor),
        image,
        {"revision": 0, "labels": [{"kind": "box", "class_id": bird.pk, "data": [0.5] * 4}]},
    )
    assert response.status_code == 409
    assert "admin@acme.test" in response.json()["detail"]
    assert "not saved" in response.json()["detail"]
    assert response.json()["revision"] == 1
    assert not Label.objects.filter(image=image).exists()


def test_shapes_outside_the_image_are_clipped(team, ds):
    _, bird, _, image = ds
    response = _put(
        _client(team.editor),
        image,
        {
            "revision": 0,
            "labels": [{"kind": "box", "class_id": bird.pk, "data": [1.0, 1.0, 1.0, 1.0]}],
        },
    )
    assert response.status_code == 200
    assert response.json()["labels"][0]["data"] == [0.75, 0.75, 0.5, 0.5]


@pytest.mark.parametrize(
    ("label", "message"),
    [
        ({"kind": "box", "data": [0.5, 0.5, 0.0, 0.3]}, "empty"),
        ({"kind": "box", "data": [2.0, 2.0, 0.2, 0.2]}, "outside"),
        ({"kind": "box", "data": [0.5, 0.5, 0.2]}, "4 numbers"),
        ({"kind": "box", "data": [0.5, "x", 0.2, 0.2]}, "numbers"),
        ({"kind": "box", "data": [0.5, 0.5, -0.2, 0.2]}, "negative"),
        ({"kind": "polygon", "data": [0.1, 0.1, 0.2, 0.2, 0.3, 0.1]}, "takes box"),
        ({"kind": "circle", "data": [0.5, 0.5]}, "unknown kind"),
        ({"kind": "box", "class_id": 999_999, "data": [0.5] * 4}, "not one of this dataset"),
        ({"kind": "box", "class_id": "bird", "data": [0.5] * 4}, "must be a number"),
    ],
)
def test_bad_labels_are_refused_with_a_reason_and_nothing_is_written(team, ds, label, message):
    _, bird, _, image = ds
    good = {"kind": "box", "class_id": bird.pk, "data": [0.5, 0.5, 0.2, 0.2]}
    response = _put(
        _client(team.editor),
        image,
        {"revision": 0, "labels": [good, {"class_id": bird.pk, **label}]},
    )
    assert response.status_code == 400
    body = response.json()
    assert body["errors"][0]["index"] == 1
    assert message in body["errors"][0]["message"]
    assert body["detail"].startswith("Label 2:") and "Nothing was saved" in body["detail"]
    image.refresh_from_db()
    assert image.revision == 0 and not Label.objects.filter(image=image).exists()


def test_another_datasets_class_is_refused(team, ds):
    _, _, _, image = ds
    other = DatasetClassFactory(dataset=DatasetFactory(workspace=team.workspace), name="x")
    response = _put(
        _client(team.editor),
        image,
        {"revision": 0, "labels": [{"kind": "box", "class_id": other.pk, "data": [0.5] * 4}]},
    )
    assert response.status_code == 400


def test_polygons_need_three_points_and_area(team):
    dataset = DatasetFactory(workspace=team.workspace, task="segment")
    cls = DatasetClassFactory(dataset=dataset, index=0, name="leaf")
    image = ImageFactory(dataset=dataset)
    client = _client(team.editor)
    for data, reason in [
        ([0.1, 0.1, 0.5, 0.5], "at least 3 points"),
        ([0.1, 0.1, 0.2, 0.2, 0.3, 0.3], "no area"),
        ([0.1, 0.1, 0.2], "an x and a y"),
    ]:
        response = _put(
            client,
            image,
            {"revision": 0, "labels": [{"kind": "polygon", "class_id": cls.pk, "data": data}]},
        )
        assert response.status_code == 400 and reason in response.json()["errors"][0]["message"]
    triangle = [-0.5, 0.1, 0.9, 0.1, 0.5, 1.5]
    response = _put(
        client,
        image,
        {"revision": 0, "labels": [{"kind": "polygon", "class_id": cls.pk, "data": triangle}]},
    )
    assert response.status_code == 200
    assert response.json()["labels"][0]["data"] == [0.0, 0.1, 0.9, 0.1, 0.5, 1.0]


def test_keypoints_obb_and_tags(team):
    pose = DatasetFactory(workspace=team.workspace, task="pose", keypoint_shape=[2, 3])
    person = DatasetClassFactory(dataset=pose, index=0, name="person")
    image = ImageFactory(dataset=pose)
    client = _client(team.editor)
    data = [0.5, 0.5, 0.4, 0.4, 0.4, 0.4, 2, 0.7, 0.7, 0]
    response = _put(
        client,
        image,
        {"revision": 0, "labels": [{"kind": "keypoints", "class_id": person.pk, "data": data}]},
    )
    assert response.status_code == 200
    assert response.json()["labels"][0]["data"][4:] == [0.4, 0.4, 2.0, 0.0, 0.0, 0.0]
    bad = [0.5, 0.5, 0.4, 0.4, 0.4, 0.4, 5, 0.7, 0.7, 0]
    response = _put(
        client,
        image,
        {"revision": 1, "labels": [{"kind": "keypoints", "class_id": person.pk, "data": bad}]},
    )
    assert response.status_code == 400 and "visibility" in response.json()["detail"]

    classify = DatasetFactory(workspace=team.workspace, task="classify")
    cat = DatasetClassFactory(dataset=classify, index=0, name="cat")
    image = ImageFactory(dataset=classify)
    tag = {"kind": "tag", "class_id": cat.pk, "data": []}
    response = _put(client, image, {"revision": 0, "labels": [tag, tag]})
    assert response.status_code == 200 and len(response.json()["labels"]) == 1

    obb = DatasetFactory(workspace=team.workspace, task="obb")
    ship = DatasetClassFactory(dataset=obb, index=0, name="ship")
    image = ImageFactory(dataset=obb)
    corners = [0.2, 0.1, 0.6, 0.3, 0.5, 0.5, 0.1, 0.3]
    response = _put(
        client,
        image,
        {"revision": 0, "labels": [{"kind": "obb", "class_id": ship.pk, "data": corners}]},
    )
    assert response.status_code == 200 and response.json()["labels"][0]["data"] == corners


def test_a_viewer_cannot_save_and_a_stranger_cannot_see(team, ds, stranger):
    _, bird, _, image = ds
    body = {"revision": 0, "labels": [{"kind": "box", "class_id": bird.pk, "data": [0.5] * 4}]}
    response = _put(_client(team.viewer), image, body)
    assert response.status_code == 403
    assert _client(stranger).get(f"/api/v1/images/{image.pk}/labels").status_code == 404
    assert _put(_client(stranger), image, body).status_code == 404
    assert Client().get(f"/api/v1/images/{image.pk}/labels").status_code == 401
    assert not Label.objects.filter(image=image).exists()


def test_not_json_is_a_clear_error(team, ds):
    _, _, _, image = ds
    response = _client(team.editor).put(
        f"/api/v1/images/{image.pk}/labels", "labels=1", content_type="application/json"
    )
    assert response.status_code == 400 and response.json()["detail"] == "Send a JSON object."
    response = _put(_client(team.editor), image, {"labels": []})
    assert response.status_code == 400 and "revision" in response.json()["detail"]


def test_editing_approved_labels_sends_them_back_to_labelled(team, ds):
    _, _, _, image = ds
    Image.objects.filter(pk=image.pk).update(status=LabelStatus.APPROVED)
    response = _put(_client(team.editor), image, {"revision": 0, "labels": []})
    assert response.json()["status"] == "labelled"


def test_suggestions_duplicating_a_label_are_hidden_and_decisions_delete_them(team, ds):
    dataset, bird, nest, image = ds
    model = trained_model_row(workspace=team.workspace, class_names=["bird", "nest"])
    Label.objects.create(image=image, dataset_class=bird, kind="box", data=[0.5, 0.5, 0.4, 0.4])
    same = Suggestion.objects.create(
        image=image,
        dataset_class=bird,
        kind="box",
        data=[0.5, 0.5, 0.38, 0.4],
        confidence=0.9,
        model=model,
    )
    other_class = Suggestion.objects.create(
        image=image,
        dataset_class=nest,
        kind="box",
        data=[0.5, 0.5, 0.4, 0.4],
        confidence=0.8,
        model=model,
    )
    elsewhere = Suggestion.objects.create(
        image=image,
        dataset_class=bird,
        kind="box",
        data=[0.1, 0.1, 0.1, 0.1],
        confidence=0.3,
        model=model,
    )
    client = _client(team.editor)
    shown = client.get(f"/api/v1/images/{image.pk}/labels").json()["suggestions"]
    assert [s["id"] for s in shown] == [other_class.pk, elsewhere.pk]
    assert shown[0]["confidence"] == 0.8 and shown[0]["model"] == model.name
    labels = [
        {"kind": "box", "class_id": bird.pk, "data": [0.5, 0.5, 0.4, 0.4]},
        {"kind": "box", "class_id": nest.pk, "data": [0.5, 0.5, 0.4, 0.4]},
    ]
    response = _put(
        client,
        image,
        {
            "revision": 0,
            "labels": labels,
            "accepted_suggestions": [other_class.pk],
            "rejected_suggestions": [elsewhere.pk],
        },
    )
    assert response.status_code == 200
    assert list(Suggestion.objects.values_list("pk", flat=True)) == [same.pk]
    assert response.json()["suggestions"] == []
