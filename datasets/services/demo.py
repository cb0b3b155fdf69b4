"""The demo dataset: coloured shapes on noisy backgrounds, generated, with exact boxes.

Small and easy on purpose: a YOLO detector learns it from scratch in about two minutes of a
2-core CPU, so a new install can go from data to a trained model without finding any data first
(the first `make run` trains one: training.services.demo_model).
"""

import io
import random

from django.db import transaction
from PIL import Image as PILImage
from PIL import ImageDraw, ImageFilter

from core.errors import ServiceError
from core.storage import storage_put
from datasets.models import Blob, Dataset, DatasetClass, Image, Label, LabelKind, LabelStatus, Task
from datasets.services.images import image_check
from datasets.services.thumbnails import thumbnails_make
from datasets.services.versions import _version_freeze
from workspaces.models import Workspace

DEMO_WORKSPACE = "Demo Team"
DEMO_NAME = "Shapes (demo)"
CLASSES = ["circle", "square", "triangle"]
SIZE = 160
TRAIN, VAL = 100, 20
SEED = 20240601
COLOURS = [
    (220, 50, 47),
    (38, 139, 210),
    (133, 153, 0),
    (181, 137, 0),
    (211, 54, 130),
    (42, 161, 152),
    (108, 113, 196),
    (240, 240, 240),
    (30, 30, 30),
]


def _background(rng: random.Random) -> PILImage.Image:
    base = tuple(rng.randint(60, 200) for _ in range(3))
    img = PILImage.new("RGB", (SIZE, SIZE), base)
    # Noise from the seeded generator (Pillow's effect_noise is not seedable).
    noise = PILImage.frombytes("L", (SIZE, SIZE), rng.randbytes(SIZE * SIZE)).convert("RGB")
    img = PILImage.blend(img, noise, rng.uniform(0.2, 0.4))
    return img.filter(ImageFilter.GaussianBlur(0.6))


def _overlaps(box: tuple[int, int, int, int], boxes: list[tuple[int, int, int, int]]) -> bool:
    x0, y0, x1, y1 = box
    return any(x0 < b[2] + 4 and b[0] < x1 + 4 and y0 < b[3] + 4 and b[1] < y1 + 4 for b in boxes)


def _draw_shape(draw: ImageDraw.ImageDraw, cls: int, box, colour) -> tuple[float, ...]:
    """Draw class `cls` inside `box`; return the exact pixel box of what was drawn."""
    x0, y0, x1, y1 = box
    if cls == 0:
        draw.ellipse((x0, y0, x1 - 1, y1 - 1), fill=colour)
        return x0, y0, x1, y1
    if cls == 1:
        draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=colour)
        return x0, y0, x1, y1
    points = [((x0 + x1 - 1) / 2, y0), (x1 - 1, y1 - 1), (x0, y1 - 1)]
    draw.polygon(points, fill=colour)
    return x0, y0, x1, y1


def demo_images(seed: int = SEED) -> list[tuple[bytes, list[tuple[int, list[float]]]]]:
    """(JPEG bytes, [(class, [cx, cy, w, h])]) for every demo image, the same on every call."""
    rng = random.Random(seed)  # noqa: S311 - pictures, not secrets
    out = []
    for _ in range(TRAIN + VAL):
        img = _background(rng)
        draw = ImageDraw.Draw(img)
        boxes: list[tuple[int, int, int, int]] = []
        labels = []
        for _ in range(rng.randint(1, 3)):
            for _attempt in range(30):
                side = rng.randint(28, 64)
                x0, y0 = rng.randint(2, SIZE - side - 2), rng.randint(2, SIZE - side - 2)
                box = (x0, y0, x0 + side, y0 + side)
                if not _overlaps(box, boxes):
                    break
            else:
                continue
            cls = rng.randrange(len(CLASSES))
            colour = rng.choice(COLOURS)
            bx0, by0, bx1, by1 = _draw_shape(draw, cls, box, colour)
            boxes.append(box)
            labels.append(
                (
                    cls,
                    [
                        (bx0 + bx1) / 2 / SIZE,
                        (by0 + by1) / 2 / SIZE,
                        (bx1 - bx0) / SIZE,
                        (by1 - by0) / SIZE,
                    ],
                )
            )
        buf = io.BytesIO()
        img.save(buf, format="JPEG", quality=90)
        out.append((buf.getvalue(), labels))
    return out


def blob_store(data: bytes) -> Blob:
    """The Blob for these image bytes, stored once by their sha256 (bytes saved if missing)."""
    checked = image_check(data)
    blob, _ = Blob.objects.get_or_create(
        sha256=checked.sha256,
        defaults={
            "size": len(checked.data),
            "content_type": checked.content_type,
            "width": checked.width,
            "height": checked.height,
        },
    )
    storage_put(blob.storage_key, checked.data, sha256=checked.sha256)  # kept only if whole
    return blob


def _demo_workspace() -> Workspace:
    workspace = Workspace.objects.filter(name=DEMO_WORKSPACE, is_personal=False).first()
    if workspace is None:
        raise ServiceError(f"There is no “{DEMO_WORKSPACE}” workspace; run seed_demo first.")
    return workspace


@transaction.atomic
def demo_dataset_seed() -> Dataset:
    """Create the public “Shapes (demo)” dataset in the demo team, once; return it."""
    workspace = _demo_workspace()
    existing = Dataset.objects.for_workspace(workspace).filter(name__iexact=DEMO_NAME).first()
    if existing is not None:
        return existing
    dataset = Dataset.objects.create(
        workspace=workspace,
        name=DEMO_NAME,
        task=Task.DETECT,
        is_public=True,
        created_by=workspace.created_by,
        description=(
            f"{TRAIN + VAL} generated {SIZE}×{SIZE} pictures of circles, squares and triangles "
            "in colours on noisy backgrounds, with exact boxes. Small enough to train a "
            "detector from scratch on a CPU in a couple of minutes."
        ),
    )
    classes = DatasetClass.objects.bulk_create(
        DatasetClass(dataset=dataset, index=i, name=name) for i, name in enumerate(CLASSES)
    )
    images, labels = [], []
    for n, (data, shapes) in enumerate(demo_images()):
        image = Image(
            dataset=dataset,
            blob=blob_store(data),
            filename=f"shapes_{n:03d}.jpg",
            split="train" if n < TRAIN else "val",
            label_count=len(shapes),
            status=LabelStatus.LABELLED if shapes else LabelStatus.UNLABELLED,
        )
        images.append(image)
        labels.append(shapes)
    Image.objects.bulk_create(images)
    Label.objects.bulk_create(
        Label(image=image, dataset_class=classes[cls], kind=LabelKind.BOX, data=box)
        for image, shapes in zip(images, labels, strict=True)
        for cls, box in shapes
    )
    thumbnails_make(blob_ids=[image.blob_id for image in images])
    _version_freeze(dataset=dataset, note="Generated demo data", user=workspace.created_by)
    return dataset
