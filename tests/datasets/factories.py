import hashlib
import io

import factory
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from PIL import Image as PILImage

from datasets.models import Blob, Dataset, DatasetClass, Image, Label, LabelKind
from tests.workspaces.factories import WorkspaceFactory


def png_bytes(width: int = 64, height: int = 48, color=(200, 80, 40)) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (width, height), color).save(out, format="PNG")
    return out.getvalue()


def blob_for(data: bytes, content_type: str = "image/png") -> Blob:
    """A stored blob for these bytes (bytes really in storage, as the ingest leaves them)."""
    sha = hashlib.sha256(data).hexdigest()
    with PILImage.open(io.BytesIO(data)) as img:
        width, height = img.size
    blob, created = Blob.objects.get_or_create(
        sha256=sha,
        defaults={
            "size": len(data),
            "content_type": content_type,
            "width": width,
            "height": height,
        },
    )
    if not default_storage.exists(blob.storage_key):
        default_storage.save(blob.storage_key, ContentFile(data))
    return blob


class DatasetFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Dataset

    workspace = factory.SubFactory(WorkspaceFactory)
    name = factory.Sequence(lambda n: f"Dataset {n}")
    task = "detect"


class DatasetClassFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = DatasetClass

    dataset = factory.SubFactory(DatasetFactory)
    index = factory.Sequence(lambda n: n)
    name = factory.Sequence(lambda n: f"class{n}")


_colour = iter(range(10**9))


class ImageFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Image

    dataset = factory.SubFactory(DatasetFactory)
    blob = factory.LazyFunction(lambda: blob_for(png_bytes(color=(next(_colour) % 256, 10, 10))))
    filename = factory.Sequence(lambda n: f"img{n}.png")
    split = "train"


class LabelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Label

    image = factory.SubFactory(ImageFactory)
    dataset_class = factory.SubFactory(DatasetClassFactory)
    kind = LabelKind.BOX
    data = factory.LazyFunction(lambda: [0.5, 0.5, 0.25, 0.25])
