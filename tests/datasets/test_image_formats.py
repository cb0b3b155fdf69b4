"""Image formats people have (issue 19): JPEG, PNG, WebP, BMP and TIFF as they are; a GIF's first
frame as PNG; AVIF (and HEIC/HEIF where the pillow-heif plugin is installed) as JPEG, upright;
a HEIC photo the server cannot read is refused with the reason, never as "not an image"."""

import io

import pytest
from django.core.files.storage import default_storage
from PIL import Image as PILImage

from datasets.models import Blob, Image
from datasets.services.datasets import dataset_create
from datasets.services.images import ImageRejected, image_check
from datasets.services.ingest import dataset_import_path
from tests.datasets.archives import zip_of

pytestmark = pytest.mark.django_db


def _encoded(fmt: str, color=(200, 30, 30), size=(40, 30), **options) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", size, color).save(out, format=fmt, **options)
    return out.getvalue()


def _animated_gif() -> bytes:
    first = PILImage.new("RGB", (32, 24), (255, 0, 0))
    second = PILImage.new("RGB", (32, 24), (0, 0, 255))
    out = io.BytesIO()
    first.save(out, format="GIF", save_all=True, append_images=[second], duration=100, loop=0)
    return out.getvalue()


def _stored(blob: Blob) -> PILImage.Image:
    with default_storage.open(blob.storage_key) as f:
        image = PILImage.open(io.BytesIO(f.read()))
        image.load()
        return image


def test_every_format_people_have_is_imported_and_converted_where_needed(team, tmp_path):
    files = {
        "a.jpg": _encoded("JPEG"),
        "b.png": _encoded("PNG", color=(1, 2, 3)),
        "c.webp": _encoded("WEBP", color=(4, 5, 6)),
        "d.bmp": _encoded("BMP", color=(7, 8, 9)),
        "e.tiff": _encoded("TIFF", color=(10, 11, 12)),
        "f.gif": _animated_gif(),
        "g.avif": _encoded("AVIF", color=(20, 200, 20), size=(48, 32)),
    }
    access = team.access("editor")
    dataset = dataset_create(access=access, name="Formats", task="detect")
    imp = dataset_import_path(
        access=access, dataset=dataset, path=zip_of(files, tmp_path / "f.zip")
    )
    assert imp.report["images_imported"] == 7, imp.report["skipped"]
    types = dict(
        Image.objects.filter(dataset=dataset).values_list("filename", "blob__content_type")
    )
    assert types == {
        "a.jpg": "image/jpeg",
        "b.png": "image/png",
        "c.webp": "image/webp",
        "d.bmp": "image/bmp",
        "e.tiff": "image/tiff",
        "f.gif": "image/png",
        "g.avif": "image/jpeg",
    }
    gif = _stored(Blob.objects.get(images__dataset=dataset, images__filename="f.gif"))
    assert gif.format == "PNG" and gif.size == (32, 24)
    assert gif.convert("RGB").getpixel((5, 5)) == (255, 0, 0)  # the first frame
    avif = Blob.objects.get(images__dataset=dataset, images__filename="g.avif")
    assert (avif.width, avif.height) == (48, 32)
    stored = _stored(avif)
    assert stored.format == "JPEG"
    red, green, blue = stored.getpixel((10, 10))
    assert green > 150 and red < 60 and blue < 60


def test_a_heic_photo_without_the_plugin_is_refused_by_name():
    # An ISO media file of brand heic, as an iPhone writes it (its image data cut short).
    heic = b"\x00\x00\x00\x18ftypheic\x00\x00\x00\x00mif1heic" + b"\x00" * 64
    try:
        import pillow_heif  # noqa: F401
    except ImportError:
        with pytest.raises(ImageRejected, match="a HEIC/HEIF photo: this server cannot read it"):
            image_check(heic)
    else:  # the plugin is there: a truncated HEIC is unreadable, said as such
        with pytest.raises(ImageRejected):
            image_check(heic)
    with pytest.raises(ImageRejected, match="not an image"):
        image_check(b"GIF87a but not really")
