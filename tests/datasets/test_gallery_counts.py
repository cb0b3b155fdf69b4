"""How many images the gallery says match (counted up to EXACT_COUNT_MAX, PostgreSQL's estimate
past it, said as "about"), and that its pages, counts and image neighbours hold exactly the
images a filter by hand over every row picks, whatever the filter."""

import itertools
import re
import uuid

import pytest
from django.db import connection
from django.urls import reverse

from datasets.models import Blob, HealthFinding, Image, Label, LabelKind, LabelStatus, Split
from datasets.selectors import gallery as gallery_selectors
from datasets.services.gallery import image_label_counts_refresh
from tests.datasets.factories import DatasetClassFactory, DatasetFactory

pytestmark = pytest.mark.django_db

BOX = [0.5, 0.5, 0.2, 0.4]


def make_images(dataset, n: int, **fields) -> list[Image]:
    """n image rows of this dataset (their blobs rows only: the gallery never reads bytes)."""
    blobs = Blob.objects.bulk_create(
        Blob(sha256=uuid.uuid4().hex * 2, size=10, content_type="image/png", width=64, height=48)
        for _ in range(n)
    )
    return Image.objects.bulk_create(
        Image(dataset=dataset, blob=b, filename=f"{b.pk}.png", **fields) for b in blobs
    )


def label(images, dataset_class, kind=LabelKind.BOX) -> None:
    Label.objects.bulk_create(
        Label(image=im, dataset_class=dataset_class, kind=kind, data=BOX) for im in images
    )
    image_label_counts_refresh(image_ids=[im.pk for im in images])


def statistics_refresh() -> None:
    """What autovacuum does soon after a bulk load; SQLite keeps none the gallery reads."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE datasets_image")
            cursor.execute("ANALYZE datasets_label")


def gallery_total(client, dataset, **params) -> tuple[str, bool]:
    """The count line of the gallery as a reader sees it, and whether it is marked an estimate."""
    target = reverse(
        "dataset_gallery", kwargs={"ws_slug": dataset.workspace.slug, "pk": dataset.pk}
    )
    response = client.get(target, params)
    assert response.status_code == 200
    body = response.content.decode()
    line = re.search(r'data-testid="gallery-total">(.*?)</p>', body, re.S).group(1)
    return re.sub(r"<[^>]+>", "", line).strip(), 'data-testid="count-estimate"' in line


@pytest.fixture
def small_limit(monkeypatch):
    monkeypatch.setattr(gallery_selectors, "EXACT_COUNT_MAX", 50)
    return 50


# --- what the count says ----------------------------------------------------------------------


def test_the_count_text_says_about_only_for_an_estimate():
    assert gallery_selectors.ImageCount(1234, exact=True).text == "1,234"
    assert gallery_selectors.ImageCount(1_234_567, exact=False).text == "about 1,200,000"
    assert gallery_selectors.ImageCount(999_637, exact=False).text == "about 1,000,000"
    assert gallery_selectors.ImageCount(95, exact=False).text == "about 95"
    assert gallery_selectors.ImageCount(10_000, False, more_than=True).text == "more than 10,000"


def test_up_to_the_limit_the_count_is_exact_and_never_about(client, team, small_limit):
    dataset = DatasetFactory(workspace=team.workspace)
    bird = DatasetClassFactory(dataset=dataset, index=0, name="bird")
    val = make_images(dataset, 20, split=Split.VAL)
    make_images(dataset, small_limit - 20)
    label(val, bird)
    label(val[:5], bird)  # a second bird on five of them: still 20 images
    statistics_refresh()
    client.force_login(team.user("viewer"))

    assert gallery_total(client, dataset) == ("50 images", False)
    assert gallery_total(client, dataset, split="val") == ("20 images match these filters", False)
    assert gallery_total(client, dataset, **{"class": bird.pk}) == (
        "20 images match these filters",
        False,
    )
    assert gallery_total(client, dataset, labelled="no") == ("30 images match these filters", False)


def test_past_the_limit_postgresql_estimates_and_says_so_sqlite_counts(client, team, small_limit):
    dataset = DatasetFactory(workspace=team.workspace)
    bird = DatasetClassFactory(dataset=dataset, index=0, name="bird")
    birds = make_images(dataset, 120, split=Split.VAL)
    make_images(dataset, 80)
    label(birds, bird)
    other = DatasetFactory(workspace=team.workspace)
    make_images(other, 30)  # another dataset's rows in the same table are not counted
    statistics_refresh()
    client.force_login(team.user("viewer"))

    plain, plain_estimated = gallery_total(client, dataset)
    by_class, class_estimated = gallery_total(client, dataset, **{"class": bird.pk})
    by_split, split_estimated = gallery_total(client, dataset, split="val")
    small, small_estimated = gallery_total(client, other)

    assert (small, small_estimated) == ("30 images", False)
    if connection.vendor == "postgresql":
        assert plain_estimated and class_estimated and split_estimated
        for text, truth in ((plain, 200), (by_class, 120), (by_split, 120)):
            shown = int(re.fullmatch(r"About ([\d,]+) images.*", text).group(1).replace(",", ""))
            assert abs(shown - truth) <= truth * 0.2, (text, truth)
    else:  # no estimate to be had: counted
        assert (plain, plain_estimated) == ("200 images", False)
        assert (by_class, class_estimated) == ("120 images match these filters", False)
        assert (by_split, split_estimated) == ("120 images match these filters", False)


def test_statistics_older_than_an_import_say_more_than_the_limit(client, team, small_limit):
    """Statistics taken before this dataset had images estimate next to none; as more than the
    limit were just read, that estimate cannot be right: the page says what it knows."""
    make_images(DatasetFactory(workspace=team.workspace), 100)
    statistics_refresh()
    dataset = DatasetFactory(workspace=team.workspace)
    make_images(dataset, small_limit + 10)
    client.force_login(team.user("viewer"))

    if connection.vendor == "postgresql":
        assert gallery_total(client, dataset) == (f"More than {small_limit} images", True)
    else:
        assert gallery_total(client, dataset) == (f"{small_limit + 10} images", False)


def test_correlated_filters_the_planner_underestimates_say_more_than_the_limit(
    client, team, small_limit
):
    """Every val image is a bird here; the planner, taking split and class as independent,
    would estimate a fifth of the truth: across kinds of filter the page says what it counted."""
    dataset = DatasetFactory(workspace=team.workspace)
    bird = DatasetClassFactory(dataset=dataset, index=0, name="bird")
    cat = DatasetClassFactory(dataset=dataset, index=1, name="cat")
    val = make_images(dataset, small_limit + 10, split=Split.VAL)
    train = make_images(dataset, 4 * (small_limit + 10))
    label(val, bird)
    label(train, cat)
    statistics_refresh()
    client.force_login(team.user("viewer"))

    both = gallery_total(client, dataset, split="val", **{"class": bird.pk})
    if connection.vendor == "postgresql":
        assert both == (f"More than {small_limit} images match these filters", True)
    else:
        assert both == (f"{small_limit + 10} images match these filters", False)


def test_the_page_costs_the_same_queries_counted_or_estimated(
    client, team, small_limit, django_assert_max_num_queries
):
    dataset = DatasetFactory(workspace=team.workspace)
    make_images(dataset, small_limit + 150)
    statistics_refresh()
    client.force_login(team.user("viewer"))
    target = reverse(
        "dataset_gallery", kwargs={"ws_slug": dataset.workspace.slug, "pk": dataset.pk}
    )
    with django_assert_max_num_queries(14):  # as tests/datasets/test_gallery.py's pages
        assert client.get(target).status_code == 200


# --- the images each filter picks -------------------------------------------------------------


@pytest.fixture
def mixed(team):
    """A dataset of every kind of image the filters tell apart, its ids interleaved with another
    dataset's (gaps in the keyset), with runs of images of one class (a page boundary inside)."""
    dataset = DatasetFactory(workspace=team.workspace, name="Mixed")
    bird, cat, dog = (
        DatasetClassFactory(dataset=dataset, index=i, name=name)
        for i, name in enumerate(("bird", "cat", "dog"))
    )
    other = DatasetFactory(workspace=team.workspace, name="Other")
    other_class = DatasetClassFactory(dataset=other, index=0, name="bird")
    splits = itertools.cycle(Split.values)
    statuses = itertools.cycle([LabelStatus.UNLABELLED, LabelStatus.LABELLED, LabelStatus.APPROVED])
    kinds = [(), (bird,), (bird, bird), (cat,), (bird, cat), (dog,), (cat, dog, dog), ()]
    for i in range(48):
        (image,) = make_images(dataset, 1, split=next(splits), status=next(statuses))
        classes = kinds[i % len(kinds)] if i < 30 else (bird,)  # 18 birds in a row
        for dataset_class in classes:
            label([image], dataset_class, LabelKind.TAG if dataset_class == dog else LabelKind.BOX)
        if i % 3 == 0:
            (stranger,) = make_images(other, 1, split=Split.VAL)
            label([stranger], other_class)
    ids = list(Image.objects.filter(dataset=dataset).values_list("pk", flat=True))
    HealthFinding.objects.create(
        dataset=dataset, kind="tiny_box", severity="warning", message="m", image_ids=ids[::4]
    )
    return dataset, (bird, cat, dog, other_class)


def by_hand(dataset):
    """Picks the ids a filter would, decided row by row in Python."""
    classes_of: dict[int, set[int]] = {}
    for image_id, class_id in Label.objects.values_list("image_id", "dataset_class_id"):
        classes_of.setdefault(image_id, set()).add(class_id)
    problems = set()
    findings = HealthFinding.objects.filter(dataset=dataset).values_list("image_ids", flat=True)
    for image_ids in findings:
        problems.update(image_ids)
    images = list(Image.objects.filter(dataset=dataset).order_by("pk"))

    def pick(flt: gallery_selectors.GalleryFilter) -> list[int]:
        return [
            image.pk
            for image in images
            if (not flt.split or image.split == flt.split)
            and (not flt.class_id or flt.class_id in classes_of.get(image.pk, ()))
            and (flt.labelled != "yes" or image.label_count > 0)
            and (flt.labelled != "no" or image.label_count == 0)
            and (not flt.status or image.status == flt.status)
            and (not flt.problems or image.pk in problems)
        ]

    return pick


def walk(dataset, flt, *, size: int) -> tuple[list[int], list[int]]:
    """Every page forwards from the first, and backwards from past the last, as the gallery's
    links do, checking each page's previous/next flags."""
    classes = gallery_selectors.dataset_classes(dataset=dataset)
    forward, after, first = [], None, True
    while True:
        page = gallery_selectors.gallery_page(
            dataset=dataset, flt=flt, after=after, size=size, classes=classes
        )
        forward += [im.pk for im in page.images]
        assert page.has_previous == (not first and bool(page.images))
        if not page.has_next:
            break
        after, first = page.last_id, False
    backward, before = [], (forward[-1] + 1 if forward else 1)
    while True:
        page = gallery_selectors.gallery_page(
            dataset=dataset, flt=flt, before=before, size=size, classes=classes
        )
        backward = [im.pk for im in page.images] + backward
        assert page.has_next == (bool(forward) and before != forward[-1] + 1)
        if not page.has_previous:
            break
        before = page.first_id
    return forward, backward


def test_every_filter_pages_counts_and_steps_through_the_images_it_picks_by_hand(mixed):
    dataset, (bird, cat, dog, other_class) = mixed
    class_ids = [None, bird.pk, cat.pk, dog.pk, other_class.pk]
    pick = by_hand(dataset)
    picked_some = 0
    for split, class_id, labelled, status, problems in itertools.product(
        ["", *Split.values],
        class_ids,
        ["", "yes", "no"],
        ["", LabelStatus.APPROVED],
        [False, True],
    ):
        flt = gallery_selectors.GalleryFilter(
            split=split, class_id=class_id, labelled=labelled, status=status, problems=problems
        )
        expected = pick(flt)
        picked_some += bool(expected)
        forward, backward = walk(dataset, flt, size=5)
        assert forward == expected, flt
        assert backward == expected, flt
        count = gallery_selectors.gallery_page(dataset=dataset, flt=flt).count
        assert (count.value, count.exact) == (len(expected), True), flt
    assert picked_some >= 90  # of 240 (48 ask for the other dataset's class: none)


@pytest.mark.parametrize(
    "params",
    [{}, {"class": "bird"}, {"class": "cat", "split": "train"}, {"labelled": "no"}],
    ids=["all", "bird", "cat-train", "unlabelled"],
)
def test_the_image_page_steps_to_the_neighbours_within_the_filter(mixed, params):
    dataset, (bird, cat, *_) = mixed
    named = {"bird": bird.pk, "cat": cat.pk}
    params = {k: str(named.get(v, v)) for k, v in params.items()}
    flt = gallery_selectors.GalleryFilter.from_query(params)
    expected = by_hand(dataset)(flt)
    assert len(expected) >= 2
    for i, image_id in enumerate(expected):
        detail = gallery_selectors.image_detail(
            dataset=dataset, image=Image.objects.get(pk=image_id), flt=flt
        )
        assert detail["previous_id"] == (expected[i - 1] if i else None)
        assert detail["next_id"] == (expected[i + 1] if i + 1 < len(expected) else None)
