"""The generated demo dataset “Shapes (demo)”."""

import io

import pytest
from django.core.files.storage import default_storage
from django.test import Client
from django.urls import reverse
from PIL import Image as PILImage
from PIL import ImageDraw

from core.errors import ServiceError
from datasets.models import Blob, Dataset, Image, Label
from datasets.services.demo import _draw_shape, demo_dataset_seed, demo_images
from tests.workspaces.factories import WorkspaceFactory


@pytest.mark.django_db
def test_demo_needs_the_demo_team(plans):
    with pytest.raises(ServiceError, match="Demo Team"):
        demo_dataset_seed()
    assert not Dataset.objects.exists()


@pytest.mark.django_db
def test_demo_dataset_is_made_once_public_with_real_jpegs(plans):
    WorkspaceFactory(name="Demo Team", slug="demo-team")
    dataset = demo_dataset_seed()
    assert dataset.name == "Shapes (demo)" and dataset.is_public and dataset.task == "detect"
    assert list(dataset.classes.values_list("name", flat=True)) == ["circle", "square", "triangle"]
    assert dataset.images.filter(split="train").count() == 100
    assert dataset.images.filter(split="val").count() == 20
    labels = Label.objects.filter(image__dataset=dataset)
    assert 120 <= labels.count() <= 360
    assert set(labels.values_list("kind", flat=True)) == {"box"}
    for cls in dataset.classes.all():  # every class is well represented
        assert labels.filter(dataset_class=cls).count() > 50
    for image in dataset.images.select_related("blob")[:5]:
        assert image.blob.content_type == "image/jpeg" and image.blob.has_thumbnail
        with default_storage.open(image.blob.storage_key, "rb") as f:
            with PILImage.open(io.BytesIO(f.read())) as img:
                assert (img.format, img.size) == ("JPEG", (160, 160))
        assert image.label_count == image.labels.count() >= 1
    assert dataset.versions.get().number == 1

    counts = Dataset.objects.count(), Image.objects.count(), Blob.objects.count()
    assert demo_dataset_seed() == dataset
    assert (Dataset.objects.count(), Image.objects.count(), Blob.objects.count()) == counts

    explore = Client().get(reverse("explore")).content.decode()
    assert "Shapes (demo)" in explore and "120 images" in explore


def test_demo_images_are_the_same_every_time():
    first, again = demo_images(), demo_images()
    assert len(first) == 120
    assert [data for data, _ in first] == [data for data, _ in again]
    for _, shapes in first:
        for cls, (cx, cy, w, h) in shapes:
            assert cls in (0, 1, 2)
            assert 0 < cx - w / 2 and cx + w / 2 < 1 and 0 < cy - h / 2 and cy + h / 2 < 1


@pytest.mark.parametrize("cls", [0, 1, 2])
def test_boxes_fit_what_is_drawn_exactly(cls):
    mask = PILImage.new("L", (160, 160))
    box = _draw_shape(ImageDraw.Draw(mask), cls, (17, 30, 61, 74), 255)
    assert mask.getbbox() == box == (17, 30, 61, 74)
