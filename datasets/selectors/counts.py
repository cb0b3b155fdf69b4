"""How many images and labels a dataset's pages show: exact up to EXACT_COUNT_MAX (reading at
most that many + 1 rows per count), and past it PostgreSQL's estimate, said to be one, where
its statistics can give one (migration 0006's joint statistics on dataset, split and status;
a class's labels by the label table's own). At a million images the exact counts took most of
the dataset page's time and the editor's (bench/gallery.py, p50: 392 and 308 ms, 682 ms with a
class filter; 32, 23 and 27 ms since). SQLite has no estimate: there every count is exact, as
it was.
"""

from django.db.models import IntegerField, OuterRef, Subquery

from datasets.models import (
    Dataset,
    DatasetClass,
    Image,
    Label,
    LabelStatus,
    PixelMap,
    Split,
    Task,
)
from datasets.selectors.gallery import EXACT_COUNT_MAX, ImageCount, image_count


class _CountOf(Subquery):
    """COUNT(*) of a subquery's rows: of a sliced one, at most its slice."""

    template = "(SELECT COUNT(*) FROM (%(subquery)s) AS counted)"
    output_field = IntegerField()


def dataset_image_count(*, dataset: Dataset) -> ImageCount:
    return image_count(Image.objects.filter(dataset=dataset))


def split_counts(*, dataset: Dataset) -> dict[str, ImageCount]:
    """Each split that holds images, in train, val, test order."""
    images = Image.objects.filter(dataset=dataset)
    counts = {split: image_count(images.filter(split=split)) for split in Split.values}
    return {split: count for split, count in counts.items() if count.value}


def status_counts(*, dataset: Dataset) -> dict[str, ImageCount]:
    images = Image.objects.filter(dataset=dataset)
    return {status: image_count(images.filter(status=status)) for status in LabelStatus.values}


def class_label_counts(*, dataset: Dataset, images: bool = False) -> list[DatasetClass]:
    """The dataset's classes in index order, each with `label_count` (an ImageCount of its
    labels) and `label_total` (its value); with `images`, `image_count` and `image_total`
    of the images it labels, past the cap only "more than" (no statistics say how many
    distinct images a class's labels are on). One query counts every class up to the cap.
    A semantic dataset has no label rows: a class's "labels" are the masks it occurs in."""
    if dataset.task == Task.SEMANTIC:
        return _mask_class_counts(dataset=dataset, images=images)
    labels = Label.objects.filter(dataset_class=OuterRef("pk")).order_by()
    cap = EXACT_COUNT_MAX + 1
    annotations = {"capped_labels": _CountOf(labels.values("pk")[:cap])}
    if images:
        annotations["capped_images"] = _CountOf(labels.values("image_id").distinct()[:cap])
    classes = list(dataset.classes.annotate(**annotations).order_by("index"))
    for dataset_class in classes:
        if dataset_class.capped_labels <= EXACT_COUNT_MAX:
            count = ImageCount(dataset_class.capped_labels, exact=True)
        else:
            count = image_count(Label.objects.filter(dataset_class=dataset_class))
        dataset_class.label_count, dataset_class.label_total = count, count.value
        if images:
            counted = dataset_class.capped_images
            count = (
                ImageCount(counted, exact=True)
                if counted <= EXACT_COUNT_MAX
                else ImageCount(EXACT_COUNT_MAX, exact=False, more_than=True)
            )
            dataset_class.image_count, dataset_class.image_total = count, count.value
    return classes


def _mask_class_counts(*, dataset: Dataset, images: bool) -> list[DatasetClass]:
    """Each class with the masks that contain it (PixelMap.stats has a key per class present),
    counted up to the cap: one query per class, and semantic datasets have a few classes."""
    maps = PixelMap.objects.filter(image__dataset=dataset).order_by().values("pk")
    classes = list(dataset.classes.order_by("index"))
    for dataset_class in classes:
        counted = maps.filter(stats__has_key=str(dataset_class.index))[: EXACT_COUNT_MAX + 1]
        n = counted.count()
        count = (
            ImageCount(n, exact=True)
            if n <= EXACT_COUNT_MAX
            else ImageCount(EXACT_COUNT_MAX, exact=False, more_than=True)
        )
        dataset_class.label_count, dataset_class.label_total = count, count.value
        if images:
            dataset_class.image_count, dataset_class.image_total = count, count.value
    return classes
