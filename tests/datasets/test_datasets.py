import pytest
from django.urls import reverse

from datasets.models import Dataset, DatasetClass
from tests.datasets.factories import DatasetFactory, ImageFactory, LabelFactory


@pytest.mark.django_db
def test_editor_creates_a_dataset_with_classes_from_the_page(team, client):
    client.force_login(team.editor)
    response = client.post(
        reverse("dataset_create", kwargs={"ws_slug": "acme"}),
        {"name": "Birds", "task": "detect", "classes": "kestrel\nhawk, owl"},
    )
    dataset = Dataset.objects.get(name="Birds")
    assert response["Location"] == f"/w/acme/datasets/{dataset.pk}/"
    assert list(dataset.classes.values_list("index", "name")) == [
        (0, "kestrel"),
        (1, "hawk"),
        (2, "owl"),
    ]
    page = client.get(response["Location"])
    assert b"kestrel" in page.content and b"No images yet" in page.content


@pytest.mark.django_db
def test_duplicate_classes_and_names_are_clear_errors(team, client):
    client.force_login(team.editor)
    url = reverse("dataset_create", kwargs={"ws_slug": "acme"})
    response = client.post(url, {"name": "A", "task": "detect", "classes": "x\nx"})
    assert b"listed twice" in response.content
    client.post(url, {"name": "A", "task": "detect"})
    response = client.post(url, {"name": "a", "task": "detect"})
    assert b"already exists" in response.content
    response = client.post(url, {"name": "B", "task": "teleport"})
    assert b"Select a valid choice" in response.content
    assert Dataset.objects.count() == 1


@pytest.mark.django_db
def test_detail_shows_splits_and_class_counts(team, client):
    dataset = DatasetFactory(workspace=team.workspace, name="Counted")
    bird = DatasetClass.objects.create(dataset=dataset, index=0, name="bird")
    for split in ["train", "train", "val"]:
        LabelFactory(image=ImageFactory(dataset=dataset, split=split), dataset_class=bird)
    client.force_login(team.viewer)
    page = client.get(reverse("dataset_detail", kwargs={"ws_slug": "acme", "pk": dataset.pk}))
    splits = page.context["splits"]
    assert {split: (n.value, n.exact) for split, n in splits.items()} == {
        "train": (2, True),
        "val": (1, True),
    }
    assert page.context["classes"][0].label_total == 3
    assert page.context["image_total"].text == "3"
    assert b"<dt>train</dt><dd>2</dd><dt>val</dt><dd>1</dd>" in page.content
    assert b"/edit/" not in page.content  # viewers get no edit button


@pytest.mark.django_db
def test_dataset_list_query_count_is_constant(team, client, django_assert_max_num_queries):
    DatasetFactory.create_batch(3, workspace=team.workspace)
    client.force_login(team.viewer)
    url = reverse("dataset_list", kwargs={"ws_slug": "acme"})
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as few:
        client.get(url)
    DatasetFactory.create_batch(20, workspace=team.workspace)
    with CaptureQueriesContext(connection) as many:
        client.get(url)
    assert len(few) == len(many)


@pytest.mark.django_db
def test_api_creates_and_reads_a_dataset(team):
    from django.test import Client

    from workspaces.services.keys import api_key_create

    _, raw = api_key_create(access=team.access("admin"), name="k", scopes=["read", "write"])
    api = Client(headers={"Authorization": f"Bearer {raw}"})
    created = api.post(
        "/api/v1/datasets",
        {"name": "From API", "task": "segment", "classes": ["a", "b"]},
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["workspace"] == "acme" and body["classes"] == ["a", "b"] and body["images"] == 0
    got = api.get(f"/api/v1/datasets/{body['id']}").json()
    assert got["task"] == "segment"
    bad = api.post(
        "/api/v1/datasets", {"name": "X", "task": "nope"}, content_type="application/json"
    )
    assert bad.status_code == 422


@pytest.mark.django_db(transaction=True)
def test_blobs_nothing_refers_to_are_collected_with_their_bytes(team):
    from django.core.files.storage import default_storage

    from datasets.models import Blob
    from datasets.services.datasets import blobs_collect_garbage
    from tests.datasets.factories import blob_for, png_bytes

    dataset = DatasetFactory(workspace=team.workspace, name="GC")
    kept = ImageFactory(dataset=dataset).blob
    shared = blob_for(png_bytes(color=(1, 2, 3)))
    ImageFactory(dataset=dataset, blob=shared)
    ImageFactory(dataset=DatasetFactory(workspace=team.workspace, name="GC2"), blob=shared)
    orphan = blob_for(png_bytes(color=(3, 2, 1)))
    assert default_storage.exists(orphan.storage_key)

    assert blobs_collect_garbage() == 1
    assert not Blob.objects.filter(pk=orphan.pk).exists()
    assert not default_storage.exists(orphan.storage_key)
    assert default_storage.exists(kept.storage_key) and default_storage.exists(shared.storage_key)

    Dataset.objects.get(name="GC").delete()  # the shared blob is still used by GC2
    assert blobs_collect_garbage() == 1  # only `kept` is gone now
    assert Blob.objects.filter(pk=shared.pk).exists()
    assert not Blob.objects.filter(pk=kept.pk).exists()
