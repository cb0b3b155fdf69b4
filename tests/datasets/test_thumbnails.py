"""Thumbnails: real JPEG bytes at the blob's thumbnail key, at most 256 px, made once."""

import io
import logging

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from PIL import Image as PILImage

from datasets.models import Blob
from datasets.services.thumbnails import thumbnail_placeholder, thumbnails_make
from datasets.tasks import thumbnails_make_task
from tests.datasets.factories import blob_for, png_bytes

pytestmark = pytest.mark.django_db


def jpeg_bytes(width: int = 640, height: int = 480, seed: int = 0) -> bytes:
    img = PILImage.linear_gradient("L").resize((width, height)).convert("RGB")
    img.paste(
        ((seed * 37) % 256, (seed * 91) % 256, 200),
        (width // 4, height // 4, width // 2, height // 2),
    )
    out = io.BytesIO()
    img.save(out, format="JPEG", quality=90)
    return out.getvalue()


def stored_thumbnail(blob: Blob) -> PILImage.Image:
    with default_storage.open(blob.thumbnail_key, "rb") as f:
        data = f.read()
    assert data[:3] == b"\xff\xd8\xff"
    img = PILImage.open(io.BytesIO(data))
    img.load()
    return img


def test_makes_jpeg_thumbnails_at_most_256px_keeping_the_aspect_ratio():
    wide = blob_for(jpeg_bytes(640, 480), "image/jpeg")
    tall = blob_for(png_bytes(300, 1200), "image/png")
    small = blob_for(png_bytes(64, 48, color=(1, 2, 3)), "image/png")

    assert thumbnails_make(blob_ids=[wide.pk, tall.pk, small.pk]) == 3

    sizes = {}
    for blob in (wide, tall, small):
        blob.refresh_from_db()
        assert blob.has_thumbnail
        img = stored_thumbnail(blob)
        assert img.format == "JPEG" and img.mode == "RGB"
        sizes[blob.pk] = img.size
    assert sizes[wide.pk] == (256, 192)
    assert sizes[tall.pk] == (64, 256)
    assert sizes[small.pk] == (64, 48)  # never enlarged


def test_the_thumbnail_looks_like_the_image():
    data = io.BytesIO()
    PILImage.new("RGB", (800, 600), (20, 200, 40)).save(data, format="JPEG")
    blob = blob_for(data.getvalue(), "image/jpeg")
    thumbnails_make(blob_ids=[blob.pk])
    r, g, b = stored_thumbnail(blob).convert("RGB").getpixel((100, 100))
    assert abs(r - 20) < 12 and abs(g - 200) < 12 and abs(b - 40) < 12


def test_is_idempotent_and_replaces_whatever_sits_at_the_key():
    blob = blob_for(jpeg_bytes(seed=7), "image/jpeg")
    default_storage.save(blob.thumbnail_key, ContentFile(b"stale bytes"))

    assert thumbnails_make(blob_ids=[blob.pk]) == 1
    assert thumbnails_make(blob_ids=[blob.pk]) == 0  # already made: skipped

    assert stored_thumbnail(blob).size == (256, 192)
    _, names = default_storage.listdir(blob.thumbnail_key.rsplit("/", 1)[0])
    assert [n for n in names if n.startswith(blob.sha256)] == [f"{blob.sha256}.jpg"]


def test_one_bad_blob_does_not_stop_the_others(caplog):
    good = blob_for(jpeg_bytes(seed=1), "image/jpeg")
    missing = blob_for(jpeg_bytes(seed=2), "image/jpeg")
    default_storage.delete(missing.storage_key)
    garbage = Blob.objects.create(
        sha256="f" * 64, size=9, content_type="image/png", width=10, height=10
    )
    default_storage.save(garbage.storage_key, ContentFile(b"not a png"))

    with caplog.at_level(logging.ERROR, logger="datasets.services.thumbnails"):
        made = thumbnails_make(blob_ids=[missing.pk, garbage.pk, good.pk, 10**9])

    assert made == 1
    assert Blob.objects.get(pk=good.pk).has_thumbnail
    assert not Blob.objects.get(pk=missing.pk).has_thumbnail
    assert not Blob.objects.get(pk=garbage.pk).has_thumbnail
    assert len([r for r in caplog.records if "thumbnail of blob" in r.getMessage()]) == 2


def test_the_celery_task_makes_them():
    blobs = [blob_for(jpeg_bytes(seed=s), "image/jpeg") for s in range(3)]
    result = thumbnails_make_task.apply(args=[[b.pk for b in blobs]])
    assert result.get() == 3
    assert Blob.objects.filter(pk__in=[b.pk for b in blobs], has_thumbnail=True).count() == 3


@pytest.mark.parametrize("mode", ["L", "LA", "P", "CMYK", "I;16", "RGBA"])
def test_any_stored_mode_becomes_a_jpeg(mode):
    img = PILImage.new(mode, (400, 300))
    out = io.BytesIO()
    img.save(out, format="TIFF" if mode in ("CMYK", "I;16") else "PNG")
    blob = blob_for(out.getvalue(), "image/tiff")
    assert thumbnails_make(blob_ids=[blob.pk]) == 1
    assert stored_thumbnail(blob).size == (256, 192)


def test_placeholder_is_a_webp():
    img = PILImage.open(io.BytesIO(thumbnail_placeholder()))
    assert img.format == "WEBP"


def test_thumbnails_made_as_webp_before_are_made_again_as_jpeg_and_collected_with_the_blob(
    django_capture_on_commit_callbacks,
):
    import importlib

    from django.apps import apps

    from datasets.services.datasets import blobs_collect_garbage

    blob = blob_for(jpeg_bytes(seed=11), "image/jpeg")
    default_storage.save(blob.thumbnail_key_webp, ContentFile(b"RIFF....WEBP"))
    Blob.objects.filter(pk=blob.pk).update(has_thumbnail=True)
    migration = importlib.import_module("datasets.migrations.0009_thumbnails_jpeg")
    migration.thumbnails_remade(apps, None)
    assert not Blob.objects.get(pk=blob.pk).has_thumbnail
    assert thumbnails_make(blob_ids=[blob.pk]) == 1
    assert stored_thumbnail(blob).size == (256, 192)

    # No image refers to the blob: its bytes and both thumbnails go with it.
    with django_capture_on_commit_callbacks(execute=True):
        assert blobs_collect_garbage() >= 1
    for key in (blob.storage_key, blob.thumbnail_key, blob.thumbnail_key_webp):
        assert not default_storage.exists(key), key


@pytest.mark.django_db
def test_an_import_makes_the_thumbnails_as_it_checks_the_images(team, tmp_path):
    """The same picture the worker would make, from the import's own decode; turned upright
    where EXIF said so, a GIF's first frame; the worker has none left to make."""
    from datasets.services.datasets import dataset_create
    from datasets.services.ingest import dataset_import_path
    from datasets.services.thumbnails import thumbnail_render
    from tests.datasets.archives import jpeg_bytes as small_jpeg
    from tests.datasets.archives import zip_of

    gif = io.BytesIO()
    PILImage.new("P", (300, 150), 3).save(gif, format="GIF")
    files = {
        "wide.jpg": jpeg_bytes(640, 480, seed=21),
        "tall.png": png_bytes(300, 1200, color=(9, 99, 199)),
        "turned.jpg": small_jpeg(640, 320, color=(20, 40, 60), exif_orientation=6),
        "first-frame.gif": gif.getvalue(),
    }
    access = team.access("editor")
    dataset = dataset_create(access=access, name="Thumbs in one pass", task="detect")
    imp = dataset_import_path(
        access=access, dataset=dataset, path=zip_of(files, tmp_path / "t.zip")
    )
    assert imp.status == "succeeded", imp.error
    sizes = {}
    for image in dataset.images.select_related("blob"):
        blob = image.blob
        assert blob.has_thumbnail
        thumb = stored_thumbnail(blob)
        assert thumb.format == "JPEG" and thumb.mode == "RGB"
        sizes[image.filename] = thumb.size
        with default_storage.open(blob.storage_key, "rb") as f:
            again = PILImage.open(io.BytesIO(thumbnail_render(f.read())))
        assert again.size == thumb.size  # what the worker makes for the stored bytes
    assert sizes == {
        "wide.jpg": (256, 192),
        "tall.png": (64, 256),
        "turned.jpg": (128, 256),  # stored upright: 320 wide, 640 tall
        "first-frame.gif": (256, 128),
    }
    assert thumbnails_make(blob_ids=[i.blob_id for i in dataset.images.all()]) == 0
