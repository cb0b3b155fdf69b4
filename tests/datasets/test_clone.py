"""Explore (the public catalog), public dataset pages, and cloning."""

import hashlib
import os
import time

import pytest
from django.conf import settings
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from core.errors import ServiceError
from datasets.models import Blob, Dataset, DatasetClass, Image, Label
from datasets.services.clone import dataset_clone
from datasets.services.versions import manifest_build, version_create
from tests.datasets.factories import (
    DatasetClassFactory,
    DatasetFactory,
    ImageFactory,
    LabelFactory,
)
from tests.workspaces.factories import MembershipFactory, WorkspaceFactory
from workspaces.selectors import workspace_access_for_user
from workspaces.services.keys import api_key_create


def _dataset(workspace, name="Kestrels", public=False, images=3, task="detect"):
    dataset = DatasetFactory(workspace=workspace, name=name, is_public=public, task=task)
    bird = DatasetClassFactory(dataset=dataset, index=0, name="bird")
    DatasetClassFactory(dataset=dataset, index=1, name="nest")
    for i in range(images):
        image = ImageFactory(dataset=dataset, split="val" if i == 0 else "train")
        LabelFactory(image=image, dataset_class=bird, data=[0.5, 0.5, 0.1 * (i + 1), 0.2])
    return dataset


def _stored_files() -> int:
    return sum(len(files) for _, _, files in os.walk(settings.MEDIA_ROOT))


def _client(user=None) -> Client:
    client = Client()
    if user is not None:
        client.force_login(user)
    return client


def _without_name(manifest: dict) -> dict:
    return {k: v for k, v in manifest.items() if k != "dataset"}


# --- the service --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_clone_copies_rows_shares_blobs_and_leaves_the_source_alone(team, stranger):
    source = _dataset(team.workspace, public=True)
    source.images.update(label_count=1)
    before = manifest_build(dataset=source)
    label_ids = sorted(Label.objects.filter(image__dataset=source).values_list("id", flat=True))
    blobs, files = Blob.objects.count(), _stored_files()

    target = workspace_access_for_user(user=stranger, slug="elsewhere")
    with CaptureQueriesContext(connection) as ctx:
        clone = dataset_clone(access=target, source=source)
    assert len(ctx.captured_queries) <= 12

    assert clone.workspace.slug == "elsewhere" and clone.name == "Kestrels"
    assert clone.cloned_from == source and clone.created_by == stranger and not clone.is_public
    assert _without_name(manifest_build(dataset=clone)) == _without_name(before)
    assert Blob.objects.count() == blobs and _stored_files() == files
    assert set(clone.images.values_list("blob_id", flat=True)) == set(
        source.images.values_list("blob_id", flat=True)
    )
    counts = "blob_id", "label_count", "filename", "split"
    assert set(clone.images.values_list(*counts)) == set(source.images.values_list(*counts))
    assert manifest_build(dataset=source) == before
    assert (
        sorted(Label.objects.filter(image__dataset=source).values_list("id", flat=True))
        == label_ids
    )
    # The clone's labels point at the clone's own classes and images.
    assert not Label.objects.filter(image__dataset=clone).exclude(dataset_class__dataset=clone)


@pytest.mark.django_db
def test_clone_names_within_one_workspace(team):
    source = _dataset(team.workspace)
    access = team.access("editor")
    assert dataset_clone(access=access, source=source).name == "Kestrels (copy)"
    assert dataset_clone(access=access, source=source).name == "Kestrels (copy 2)"
    assert dataset_clone(access=access, source=source, name="Mine").name == "Mine"
    with pytest.raises(ServiceError, match="already exists"):
        dataset_clone(access=access, source=source, name="mine")


@pytest.mark.django_db
def test_a_private_dataset_clones_only_within_its_workspace(team, stranger):
    source = _dataset(team.workspace)
    elsewhere = workspace_access_for_user(user=stranger, slug="elsewhere")
    with pytest.raises(ServiceError, match="private"):
        dataset_clone(access=elsewhere, source=source)
    # Not even a member of both may carry it out of its workspace.
    MembershipFactory(workspace=elsewhere.workspace, user=team.editor, role="editor")
    with pytest.raises(ServiceError, match="private"):
        dataset_clone(
            access=workspace_access_for_user(user=team.editor, slug="elsewhere"), source=source
        )
    assert not Dataset.objects.filter(workspace=elsewhere.workspace).exists()


@pytest.mark.django_db
def test_cloning_ten_thousand_images_is_fast_and_shares_blobs(team, stranger):
    source = DatasetFactory(workspace=team.workspace, name="Big", is_public=True)
    classes = DatasetClass.objects.bulk_create(
        DatasetClass(dataset=source, index=i, name=f"c{i}") for i in range(5)
    )
    shared = ImageFactory(dataset=source).blob  # every row below points at stored bytes
    blobs = Blob.objects.bulk_create(
        Blob(
            sha256=hashlib.sha256(f"big-{i}".encode()).hexdigest(),
            size=shared.size,
            content_type="image/png",
            width=64,
            height=48,
        )
        for i in range(9_999)
    )
    images = Image.objects.bulk_create(
        Image(dataset=source, blob=b, filename=f"{i}.png", label_count=2)
        for i, b in enumerate(blobs)
    )
    Label.objects.bulk_create(
        Label(image=img, dataset_class=classes[(i + j) % 5], kind="box", data=[0.5, 0.5, 0.1, 0.1])
        for i, img in enumerate(images)
        for j in range(2)
    )
    blob_count = Blob.objects.count()
    target = workspace_access_for_user(user=stranger, slug="elsewhere")

    started = time.perf_counter()
    clone = dataset_clone(access=target, source=source)
    elapsed = time.perf_counter() - started
    print(f"\ncloned 10,000 images and 19,998 labels in {elapsed:.2f} s")

    assert clone.images.count() == 10_000
    assert Label.objects.filter(image__dataset=clone).count() == 19_998
    assert Blob.objects.count() == blob_count
    assert elapsed < 10  # about 0.2 s on a laptop; the goal is under 2 s


# --- Explore ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_explore_lists_public_datasets_from_every_workspace_to_anyone(team, stranger):
    _dataset(team.workspace, name="Acme Birds", public=True, images=2)
    _dataset(team.workspace, name="Acme Secret")
    other = WorkspaceFactory(name="Other Lab")
    shown = _dataset(other, name="Lab Cells", public=True, images=5, task="segment")

    response = _client().get(reverse("explore"))
    assert response.status_code == 200
    text = response.content.decode()
    assert "Acme Birds" in text and "Lab Cells" in text and "Acme Secret" not in text
    assert "Acme Vision" in text and "Other Lab" in text
    assert "Segment · 5 images" in text
    first = shown.images.order_by("id").first()
    thumb = reverse("public_image_thumb", kwargs={"pk": shown.pk, "image_pk": first.pk})
    assert f'src="{thumb}"' in text
    assert text.count("/thumb/") == 2 + 4  # up to four per dataset

    filtered = _client().get(reverse("explore"), {"q": "cells"}).content.decode()
    assert "Lab Cells" in filtered and "Acme Birds" not in filtered
    by_task = _client().get(reverse("explore"), {"task": "detect"}).content.decode()
    assert "Acme Birds" in by_task and "Lab Cells" not in by_task


@pytest.mark.django_db
def test_explore_reads_constant_queries_and_pages(team):
    def grow(n: int) -> None:
        for _ in range(n):
            _dataset(team.workspace, name=f"P{Dataset.objects.count():03d}", public=True, images=5)

    grow(2)
    client = _client()
    with CaptureQueriesContext(connection) as few:
        assert client.get(reverse("explore")).status_code == 200
    grow(30)
    with CaptureQueriesContext(connection) as many:
        response = client.get(reverse("explore"))
    assert len(many.captured_queries) == len(few.captured_queries) <= 6
    text = response.content.decode()
    assert "Page 1 of 2" in text and "P000" in text and "P031" not in text
    page2 = client.get(reverse("explore"), {"page": 2, "q": "P"}).content.decode()
    assert "P031" in page2 and "q=P" in page2


# --- the public page ----------------------------------------------------------------------------


@pytest.mark.django_db
def test_public_dataset_page_for_anyone(team):
    dataset = _dataset(team.workspace, name="Open Birds", public=True)
    version_create(access=team.access("editor"), dataset=dataset, note="release")
    response = _client().get(reverse("public_dataset", args=[dataset.pk]))
    assert response.status_code == 200
    text = response.content.decode()
    assert "Open Birds" in text and "by Acme Vision" in text and "3 images" in text
    assert "<td>bird</td><td>1</td>" not in text  # counts are per class
    assert (
        "<td>0</td><td>bird</td><td>3</td>" in text and "<td>1</td><td>nest</td><td>0</td>" in text
    )
    assert "release" in text and "/thumb/" in text
    assert "Log in" in text and 'name="workspace"' not in text

    private = _dataset(team.workspace, name="Hidden")
    assert _client().get(reverse("public_dataset", args=[private.pk])).status_code == 404
    assert _client(team.owner).get(reverse("public_dataset", args=[private.pk])).status_code == 404


@pytest.mark.django_db
def test_anyone_signed_in_clones_a_public_dataset_into_their_workspace(team, stranger):
    source = _dataset(team.workspace, name="Open Birds", public=True)
    client = _client(stranger)
    page = client.get(reverse("public_dataset", args=[source.pk])).content.decode()
    assert '<option value="elsewhere">Elsewhere</option>' in page
    assert '<option value="acme"' not in page

    response = client.post(
        reverse("public_dataset_clone", args=[source.pk]), {"workspace": "elsewhere"}
    )
    clone = Dataset.objects.get(workspace__slug="elsewhere")
    assert response.status_code == 302
    assert response["Location"] == reverse("dataset_detail", args=["elsewhere", clone.pk])
    detail = client.get(response["Location"]).content.decode()
    assert "cloned from Open Birds" in detail
    assert reverse("public_dataset", args=[source.pk]) in detail  # the source, linked

    # Into a workspace they are not in: 404, nothing made.
    response = client.post(reverse("public_dataset_clone", args=[source.pk]), {"workspace": "acme"})
    assert response.status_code == 404
    assert Dataset.objects.filter(cloned_from=source).count() == 1


@pytest.mark.django_db
def test_a_viewer_may_not_clone_into_their_workspace(team):
    source = _dataset(team.workspace, name="Open Birds", public=True)
    viewer = _client(team.viewer)
    page = viewer.get(reverse("public_dataset", args=[source.pk])).content.decode()
    assert "You need the editor role" in page
    response = viewer.post(reverse("public_dataset_clone", args=[source.pk]), {"workspace": "acme"})
    assert response.status_code == 403
    assert Dataset.objects.count() == 1


@pytest.mark.django_db
def test_clone_page_inside_the_workspace(team, stranger):
    source = _dataset(team.workspace)
    editor = _client(team.editor)
    url = reverse("dataset_clone", args=["acme", source.pk])
    page = editor.get(url).content.decode()
    assert "Clone Kestrels" in page and "only within its own workspace" in page
    response = editor.post(url, {"workspace": "acme", "name": "Kestrels v2 work"})
    clone = Dataset.objects.get(name="Kestrels v2 work")
    assert response["Location"] == reverse("dataset_detail", args=["acme", clone.pk])
    assert clone.cloned_from == source

    # A private source, even public-page routes, stays hidden from a stranger.
    stranger_client = _client(stranger)
    assert stranger_client.get(url).status_code == 404
    assert stranger_client.post(url, {"workspace": "elsewhere"}).status_code == 404
    clone_url = reverse("public_dataset_clone", args=[source.pk])
    assert stranger_client.post(clone_url, {"workspace": "elsewhere"}).status_code == 404
    assert not Dataset.objects.filter(workspace__slug="elsewhere").exists()


@pytest.mark.django_db
def test_anonymous_clone_goes_to_login(team):
    source = _dataset(team.workspace, public=True)
    response = _client().post(reverse("public_dataset_clone", args=[source.pk]), {"workspace": "x"})
    assert response.status_code == 302 and reverse("account_login") in response["Location"]


# --- API ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_api_clone_with_a_key_and_with_a_session(team, stranger):
    public = _dataset(WorkspaceFactory(name="Lab"), name="Open Cells", public=True)
    private = _dataset(WorkspaceFactory(name="Lab 2"), name="Closed")
    _, raw = api_key_create(access=team.access("admin"), name="w", scopes=["write"])
    api = Client(headers={"Authorization": f"Bearer {raw}"})

    created = api.post(
        f"/api/v1/datasets/{public.pk}/clone", {"name": "Cells"}, content_type="application/json"
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["workspace"] == "acme" and body["name"] == "Cells" and body["images"] == 3
    assert body["classes"] == ["bird", "nest"]
    missing = api.post(f"/api/v1/datasets/{private.pk}/clone", {}, content_type="application/json")
    assert missing.status_code == 404

    own = _dataset(team.workspace, name="Own")
    response = api.post(f"/api/v1/datasets/{own.pk}/clone", {}, content_type="application/json")
    assert response.status_code == 201 and response.json()["name"] == "Own (copy)"

    session = _client(stranger)
    MembershipFactory(workspace=WorkspaceFactory(slug="second"), user=stranger, role="owner")
    response = session.post(
        f"/api/v1/datasets/{public.pk}/clone", {}, content_type="application/json"
    )
    assert response.status_code == 400 and "workspace" in response.json()["detail"]
    response = session.post(
        f"/api/v1/datasets/{public.pk}/clone",
        {"workspace": "second"},
        content_type="application/json",
    )
    assert response.status_code == 201 and response.json()["workspace"] == "second"
    response = session.post(
        f"/api/v1/datasets/{own.pk}/clone", {"workspace": "second"}, content_type="application/json"
    )
    assert response.status_code == 404
