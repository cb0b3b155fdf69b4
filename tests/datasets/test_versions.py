"""Dataset versions: immutable manifests, numbering, what changed, pages and API."""

import gzip
import hashlib
import json
import threading

import pytest
from django.core.exceptions import PermissionDenied
from django.core.files.storage import default_storage
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from core.errors import ServiceError
from datasets.models import Blob, DatasetVersion, Image, Label
from datasets.services.versions import (
    manifest_build,
    version_create,
    version_manifest_load,
)
from tests.datasets.factories import (
    DatasetClassFactory,
    DatasetFactory,
    ImageFactory,
    LabelFactory,
)
from workspaces.services.keys import api_key_create


def _dataset(team, images: int = 3, name: str = "Birds"):
    dataset = DatasetFactory(workspace=team.workspace, name=name)
    bird = DatasetClassFactory(dataset=dataset, index=0, name="bird")
    nest = DatasetClassFactory(dataset=dataset, index=1, name="nest")
    for i in range(images):
        image = ImageFactory(dataset=dataset, split="val" if i == 0 else "train")
        LabelFactory(image=image, dataset_class=bird, data=[0.5, 0.5, 0.2, 0.2])
    return dataset, bird, nest


def _many_images(dataset, cls, n: int) -> None:
    """`n` more images with two labels each, written in bulk (blob rows only, no bytes)."""
    start = Blob.objects.count()
    blobs = Blob.objects.bulk_create(
        Blob(
            sha256=hashlib.sha256(f"many-{start + i}".encode()).hexdigest(),
            size=1,
            content_type="image/jpeg",
            width=640,
            height=480,
        )
        for i in range(n)
    )
    images = Image.objects.bulk_create(
        Image(dataset=dataset, blob=b, filename=f"{i}.jpg", label_count=2)
        for i, b in enumerate(blobs)
    )
    Label.objects.bulk_create(
        Label(image=img, dataset_class=cls, kind="box", data=[0.5, 0.5, 0.1, j / 10])
        for img in images
        for j in (1, 2)
    )


@pytest.mark.django_db
def test_a_version_freezes_a_canonical_manifest_by_its_hash(team):
    dataset, bird, nest = _dataset(team)
    LabelFactory(
        image=dataset.images.first(), dataset_class=nest, kind="polygon", data=[0, 0, 1, 0, 1, 1]
    )
    version = version_create(access=team.access("editor"), dataset=dataset, note="  first  ")
    assert version.number == 1 and version.note == "first"
    assert version.created_by == team.editor
    assert version.manifest_key == f"manifests/{version.content_hash}.json.gz"
    with default_storage.open(version.manifest_key, "rb") as f:
        raw = gzip.decompress(f.read())
    assert hashlib.sha256(raw).hexdigest() == version.content_hash
    manifest = json.loads(raw)
    assert raw.decode() == json.dumps(manifest, sort_keys=True, separators=(",", ":"))
    assert manifest == version_manifest_load(version) == manifest_build(dataset=dataset)
    assert manifest["dataset"] == "Birds" and manifest["task"] == "detect"
    assert manifest["classes"] == ["bird", "nest"] and manifest["keypoint_shape"] is None
    shas = [img["sha256"] for img in manifest["images"]]
    assert shas == sorted(shas) and len(shas) == 3
    image = manifest["images"][0]
    assert set(image) == {"sha256", "filename", "split", "width", "height", "labels"}
    assert (image["width"], image["height"]) == (64, 48)
    assert {"class": 0, "kind": "box", "data": [0.5, 0.5, 0.2, 0.2]} in image["labels"]
    assert version.summary == {
        "images": 3,
        "labels": 4,
        "classes": 2,
        "splits": {"train": 2, "val": 1},
        "labels_per_class": {"bird": 3, "nest": 1},
    }


@pytest.mark.django_db
def test_numbers_count_up_and_an_unchanged_dataset_is_refused(team):
    dataset, bird, _ = _dataset(team)
    access = team.access("editor")
    v1 = version_create(access=access, dataset=dataset)
    with pytest.raises(ServiceError, match="Nothing changed since version 1"):
        version_create(access=access, dataset=dataset, note="again")
    label = LabelFactory(image=dataset.images.first(), dataset_class=bird)
    v2 = version_create(access=access, dataset=dataset)
    label.delete()
    v3 = version_create(access=access, dataset=dataset)
    assert [v1.number, v2.number, v3.number] == [1, 2, 3]
    # Back to v1's content: same hash, so the same stored manifest, written once.
    assert v3.content_hash == v1.content_hash and v3.manifest_key == v1.manifest_key
    assert v2.content_hash != v1.content_hash
    assert DatasetVersion.objects.filter(dataset=dataset).count() == 3


@pytest.mark.django_db
def test_the_same_content_in_another_order_has_the_same_hash(team):
    a, bird_a, nest_a = _dataset(team, images=0, name="Same")
    first = ImageFactory(dataset=a)
    LabelFactory(image=first, dataset_class=bird_a, data=[0.1, 0.1, 0.1, 0.1])
    LabelFactory(image=first, dataset_class=nest_a, data=[0.2, 0.2, 0.2, 0.2])
    va = version_create(access=team.access("editor"), dataset=a)
    a.delete()
    b, bird_b, nest_b = _dataset(team, images=0, name="Same")
    again = Image.objects.create(dataset=b, blob=first.blob, filename=first.filename)
    LabelFactory(image=again, dataset_class=nest_b, data=[0.2, 0.2, 0.2, 0.2])
    LabelFactory(image=again, dataset_class=bird_b, data=[0.1, 0.1, 0.1, 0.1])
    vb = version_create(access=team.access("editor"), dataset=b)
    assert vb.content_hash == va.content_hash


@pytest.mark.django_db
def test_a_viewer_cannot_save_a_version(team):
    dataset, _, _ = _dataset(team)
    with pytest.raises(PermissionDenied):
        version_create(access=team.access("viewer"), dataset=dataset)
    assert not DatasetVersion.objects.exists()


@pytest.mark.django_db
def test_saving_ten_thousand_images_takes_a_handful_of_queries(team):
    dataset, bird, _ = _dataset(team, images=0)
    _many_images(dataset, bird, 20)

    def queries() -> int:
        with CaptureQueriesContext(connection) as ctx:
            version_create(access=team.access("editor"), dataset=dataset)
        return len(ctx.captured_queries)

    few = queries()
    _many_images(dataset, bird, 9_980)
    many = queries()
    # Images are read in batches of 5,000: one more query for images and labels per batch.
    assert few <= 10 and many <= few + 3
    latest = DatasetVersion.objects.filter(dataset=dataset).first()
    assert latest.summary["images"] == 10_000 and latest.summary["labels"] == 20_000
    shas = [img["sha256"] for img in version_manifest_load(latest)["images"]]
    assert len(set(shas)) == 10_000 and shas == sorted(shas)


@pytest.mark.django_db(transaction=True)
def test_concurrent_saves_never_share_a_number(team):
    dataset, bird, _ = _dataset(team)
    access = team.access("editor")
    version_create(access=access, dataset=dataset)
    LabelFactory(image=dataset.images.first(), dataset_class=bird)  # something to save

    start = threading.Barrier(4)
    outcomes: list = []

    def save(note: str) -> None:
        try:
            start.wait()
            outcomes.append(version_create(access=access, dataset=dataset, note=note).number)
        except Exception as e:  # noqa: BLE001 - every outcome is recorded and checked
            outcomes.append(e)
        finally:
            connection.close()

    threads = [threading.Thread(target=save, args=(f"t{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    numbers = [o for o in outcomes if isinstance(o, int)]
    refused = [o for o in outcomes if isinstance(o, ServiceError)]
    assert numbers == [2], outcomes  # one saves version 2; the rest see it and save nothing
    assert len(refused) == 3 and all("Nothing changed since version 2" in str(e) for e in refused)
    assert list(
        DatasetVersion.objects.filter(dataset=dataset).order_by("number").values_list("number")
    ) == [(1,), (2,)]


@pytest.mark.django_db(transaction=True)
def test_a_save_waits_for_a_concurrent_one_and_numbers_after_it(team):
    """One connection holds the dataset row (as a save does) while another saves."""
    from django.db import connections, transaction

    dataset, bird, _ = _dataset(team)
    access = team.access("editor")
    version_create(access=access, dataset=dataset)
    LabelFactory(image=dataset.images.first(), dataset_class=bird)
    locked, release, result = threading.Event(), threading.Event(), {}

    def holder() -> None:
        try:
            with transaction.atomic():
                list(dataset.__class__.objects.select_for_update().filter(pk=dataset.pk))
                DatasetVersion.objects.create(
                    dataset=dataset, number=2, content_hash="x" * 64, manifest_key="m"
                )
                locked.set()
                release.wait(10)
        finally:
            connections["default"].close()

    def saver() -> None:
        try:
            result["number"] = version_create(access=access, dataset=dataset).number
        finally:
            connections["default"].close()

    t1 = threading.Thread(target=holder)
    t1.start()
    assert locked.wait(10)
    t2 = threading.Thread(target=saver)
    t2.start()
    t2.join(0.5)
    assert t2.is_alive()  # waiting for the row lock
    release.set()
    t1.join()
    t2.join(10)
    assert result == {"number": 3}


# --- pages --------------------------------------------------------------------------------------


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_save_from_the_dataset_page_then_see_the_version(team):
    dataset, bird, _ = _dataset(team)
    editor = _client(team.editor)
    page = editor.get(reverse("dataset_detail", args=["acme", dataset.pk])).content.decode()
    assert "Save version" in page and "No versions saved yet" in page
    assert reverse("dataset_export", args=["acme", dataset.pk, "coco"]) in page

    too_long = editor.post(
        reverse("version_create", args=["acme", dataset.pk]), {"note": "x" * 201}, follow=True
    )
    assert "at most 200 characters" in too_long.content.decode()
    assert not DatasetVersion.objects.exists()

    response = editor.post(reverse("version_create", args=["acme", dataset.pk]), {"note": "clean"})
    assert response.status_code == 302
    assert response["Location"] == reverse("version_detail", args=["acme", dataset.pk, 1])
    page = editor.get(response["Location"]).content.decode()
    assert "Version 1" in page and "clean" in page and "editor@acme.test" in page
    assert DatasetVersion.objects.get().content_hash[:12] in page

    response = editor.post(reverse("version_create", args=["acme", dataset.pk]), follow=True)
    assert "Nothing changed since version 1" in response.content.decode()
    assert DatasetVersion.objects.count() == 1

    viewer_page = _client(team.viewer).get(reverse("dataset_detail", args=["acme", dataset.pk]))
    assert "Save version" not in viewer_page.content.decode()
    assert "v1" in viewer_page.content.decode()


@pytest.mark.django_db
def test_version_page_shows_what_changed(team):
    dataset, bird, nest = _dataset(team, images=3)
    access = team.access("editor")
    version_create(access=access, dataset=dataset)
    images = list(dataset.images.order_by("id"))
    removed = images[0]
    removed_sha = removed.blob.sha256
    removed.delete()
    images[1].split = "test"
    images[1].save()
    added = ImageFactory(dataset=dataset, filename="new-one.png")
    LabelFactory(image=added, dataset_class=nest)
    LabelFactory(image=added, dataset_class=nest, data=[0.2, 0.2, 0.1, 0.1])
    version_create(access=access, dataset=dataset, note="second")

    page = _client(team.viewer).get(reverse("version_detail", args=["acme", dataset.pk, 2]))
    text = page.content.decode()
    assert "Changes since" in text
    assert "+1</span> image added" in text and "−1</span> image removed" in text
    assert "new-one.png" in text and removed_sha[:12] in text
    assert "train → test" in text
    # bird lost the removed image's label; nest gained two.
    assert '<td>bird</td><td class="plus">+0</td><td class="minus">−1</td>' in text
    assert '<td>nest</td><td class="plus">+2</td><td class="minus">−0</td>' in text


@pytest.mark.django_db
def test_version_list_page_has_constant_queries(team):
    dataset, bird, _ = _dataset(team)
    client = _client(team.viewer)
    url = reverse("version_list", args=["acme", dataset.pk])

    def grow(n: int) -> None:
        for _ in range(n):
            LabelFactory(image=dataset.images.first(), dataset_class=bird)
            version_create(access=team.access("editor"), dataset=dataset)

    grow(1)
    with CaptureQueriesContext(connection) as few:
        assert client.get(url).status_code == 200
    grow(5)
    with CaptureQueriesContext(connection) as many:
        response = client.get(url)
    assert len(many.captured_queries) == len(few.captured_queries) <= 12
    text = response.content.decode()
    assert (
        text.count('href="' + reverse("version_export", args=["acme", dataset.pk, 6, "yolo"])) == 1
    )
    assert "Save version" not in text  # a viewer


@pytest.mark.django_db
def test_version_pages_of_another_workspace_are_404(team, stranger):
    dataset, _, _ = _dataset(team)
    version_create(access=team.access("editor"), dataset=dataset)
    client = _client(stranger)
    for url in (
        reverse("version_list", args=["acme", dataset.pk]),
        reverse("version_detail", args=["acme", dataset.pk, 1]),
        reverse("version_export", args=["acme", dataset.pk, 1, "yolo"]),
    ):
        assert client.get(url).status_code == 404
    assert client.post(reverse("version_create", args=["acme", dataset.pk])).status_code == 404
    other = DatasetFactory(workspace=team.workspace)
    viewer = _client(team.viewer)
    assert viewer.get(reverse("version_detail", args=["acme", other.pk, 1])).status_code == 404


# --- API ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_api_saves_and_lists_versions(team):
    dataset, _, _ = _dataset(team)
    _, raw = api_key_create(access=team.access("admin"), name="w", scopes=["read", "write"])
    api = Client(headers={"Authorization": f"Bearer {raw}"})
    url = f"/api/v1/datasets/{dataset.pk}/versions"
    created = api.post(url, {"note": "from CI"}, content_type="application/json")
    assert created.status_code == 201
    body = created.json()
    assert body["number"] == 1 and body["note"] == "from CI"
    assert body["summary"]["images"] == 3 and body["created_by"] == "admin@acme.test"
    again = api.post(url, {}, content_type="application/json")
    assert again.status_code == 400 and "Nothing changed" in again.json()["detail"]
    listing = api.get(url).json()
    assert [v["number"] for v in listing] == [1]
