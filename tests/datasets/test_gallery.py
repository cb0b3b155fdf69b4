"""The gallery, image pages and bytes, bulk actions, classes and automatic splits, as users meet
them: through the pages, on the real database and storage."""

import io
import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from PIL import Image as PILImage

from datasets.models import DatasetClass, HealthFinding, Image, Label, LabelKind
from datasets.selectors import gallery as gallery_selectors
from datasets.services import gallery as services
from datasets.services.thumbnails import thumbnails_make
from tests.datasets.factories import (
    DatasetClassFactory,
    DatasetFactory,
    ImageFactory,
    LabelFactory,
    blob_for,
    png_bytes,
)

pytestmark = pytest.mark.django_db


# --- helpers ----------------------------------------------------------------------------------


def labelled(dataset, labels=(), **kwargs) -> Image:
    """An image with these (class, kind, data) labels and a correct label_count."""
    image = ImageFactory(dataset=dataset, **kwargs)
    for dataset_class, kind, data in labels:
        LabelFactory(image=image, dataset_class=dataset_class, kind=kind, data=data)
    Image.objects.filter(pk=image.pk).update(label_count=len(labels))
    image.refresh_from_db()
    return image


def url(name, dataset, **kwargs) -> str:
    return reverse(name, kwargs={"ws_slug": dataset.workspace.slug, "pk": dataset.pk, **kwargs})


def shown_ids(response) -> list[int]:
    assert response.status_code == 200
    return [int(i) for i in re.findall(r'data-image="(\d+)"', response.content.decode())]


def login(client, team, role="owner") -> Client:
    client.force_login(team.user(role))
    return client


@pytest.fixture
def ds(team):
    dataset = DatasetFactory(workspace=team.workspace, name="Birds")
    bird = DatasetClassFactory(dataset=dataset, index=0, name="bird")
    cat = DatasetClassFactory(dataset=dataset, index=1, name="cat")
    dog = DatasetClassFactory(dataset=dataset, index=2, name="dog")
    return dataset, bird, cat, dog


BOX = [0.5, 0.5, 0.2, 0.4]


# --- gallery pages ----------------------------------------------------------------------------


def test_keyset_pages_show_every_image_once(client, team, ds):
    dataset = ds[0]
    ids = [ImageFactory(dataset=dataset).pk for _ in range(130)]
    login(client, team, "viewer")

    first = client.get(url("dataset_gallery", dataset))
    page1 = shown_ids(first)
    assert len(page1) == 60
    assert "130 images" in first.content.decode()
    assert 'rel="prev"' not in first.content.decode()
    page2 = shown_ids(client.get(url("dataset_gallery", dataset), {"after": page1[-1]}))
    last = client.get(url("dataset_gallery", dataset), {"after": page2[-1]})
    page3 = shown_ids(last)

    assert page1 + page2 + page3 == sorted(ids)
    assert 'rel="next"' not in last.content.decode()
    back = shown_ids(client.get(url("dataset_gallery", dataset), {"before": page3[0]}))
    assert back == page2
    assert shown_ids(client.get(url("dataset_gallery", dataset), {"before": page2[0]})) == page1


def test_a_page_emptied_by_a_bulk_action_falls_back_to_the_first(client, team, ds):
    dataset = ds[0]
    ids = [ImageFactory(dataset=dataset, split="val").pk for _ in range(62)]
    login(client, team, "editor")
    response = client.post(
        url("dataset_images_bulk", dataset),
        {
            "action": "delete",
            "confirm": "yes",
            "images": ids[60:],
            "back": f"split=val&after={ids[59]}",
        },
    )
    landing = client.get(response["Location"])
    assert landing.status_code == 302
    assert landing["Location"] == url("dataset_gallery", dataset) + "?split=val"
    assert len(shown_ids(client.get(landing["Location"]))) == 60


def test_next_and_previous_links_keep_the_filters(client, team, ds):
    dataset = ds[0]
    for i in range(130):
        ImageFactory(dataset=dataset, split="val" if i % 2 else "train")
    login(client, team, "viewer")
    body = client.get(url("dataset_gallery", dataset), {"split": "val"}).content.decode()
    next_href = re.search(r'href="([^"]+)" rel="next"', body).group(1).replace("&amp;", "&")
    assert "split=val" in next_href
    page2 = shown_ids(client.get(next_href))
    assert len(page2) == 5  # 65 val images: 60, then 5
    assert all(Image.objects.get(pk=i).split == "val" for i in page2)


def test_filters_combine(client, team, ds):
    dataset, bird, cat, _ = ds
    bird_train = labelled(dataset, [(bird, LabelKind.BOX, BOX)], split="train")
    bird_val = labelled(dataset, [(bird, LabelKind.BOX, BOX)], split="val")
    cat_val = labelled(dataset, [(cat, LabelKind.BOX, BOX)], split="val")
    empty_val = labelled(dataset, [], split="val")
    other = DatasetFactory(workspace=team.workspace)
    labelled(other, [(DatasetClassFactory(dataset=other), LabelKind.BOX, BOX)])
    HealthFinding.objects.create(
        dataset=dataset,
        kind="tiny_box",
        severity="warning",
        message="Tiny boxes",
        image_ids=[bird_val.pk, empty_val.pk],
    )
    login(client, team, "viewer")
    gallery = url("dataset_gallery", dataset)

    def ids(**params):
        return sorted(shown_ids(client.get(gallery, params)))

    assert ids() == sorted([bird_train.pk, bird_val.pk, cat_val.pk, empty_val.pk])
    assert ids(split="val") == sorted([bird_val.pk, cat_val.pk, empty_val.pk])
    assert ids(**{"class": bird.pk}) == sorted([bird_train.pk, bird_val.pk])
    assert ids(split="val", **{"class": bird.pk}) == [bird_val.pk]
    assert ids(labelled="no") == [empty_val.pk]
    assert ids(labelled="yes", split="val") == sorted([bird_val.pk, cat_val.pk])
    assert ids(problems="1") == sorted([bird_val.pk, empty_val.pk])
    assert ids(problems="1", labelled="yes") == [bird_val.pk]
    assert ids(split="nonsense", labelled="maybe", **{"class": "x"}) == ids()  # ignored
    assert "match these filters" in client.get(gallery, {"split": "val"}).content.decode()


def _count(client, target, params=None) -> int:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(target, params or {})
    assert response.status_code == 200
    return len(ctx.captured_queries)


@pytest.mark.parametrize(
    "params", [{}, {"split": "train", "labelled": "yes", "problems": "1", "class": "CLS"}]
)
def test_query_count_does_not_grow_with_images(client, team, ds, params):
    dataset, bird, cat, _ = ds
    params = {k: (bird.pk if v == "CLS" else v) for k, v in params.items()}
    HealthFinding.objects.create(
        dataset=dataset, kind="k", severity="error", message="m", image_ids=[]
    )

    def grow(n):
        for _ in range(n):
            image = labelled(dataset, [(bird, LabelKind.BOX, BOX), (cat, LabelKind.POLYGON, BOX)])
            finding = HealthFinding.objects.get(dataset=dataset)
            finding.image_ids = [*finding.image_ids, image.pk]
            finding.save()

    login(client, team, "editor")
    target = url("dataset_gallery", dataset)
    grow(5)
    few = _count(client, target, params)
    grow(95)
    assert len(shown_ids(client.get(target, params))) == 60
    many = _count(client, target, params)
    assert many == few
    assert few <= 14
    second_page = _count(client, target, {**params, "after": Image.objects.first().pk})
    assert second_page <= few + 1  # one "is there a previous page" query


def test_overlays_draw_each_label_kind_in_its_class_colour(client, team, ds):
    dataset, bird, cat, dog = ds
    labelled(
        dataset,
        [
            (bird, LabelKind.BOX, [0.5, 0.5, 0.2, 0.4]),
            (cat, LabelKind.POLYGON, [0.1, 0.1, 0.3, 0.1, 0.2, 0.3]),
            (dog, LabelKind.KEYPOINTS, [0.5, 0.5, 0.2, 0.2, 0.45, 0.45, 2, 0, 0, 0]),
            (bird, LabelKind.BOX, ["bad", 1, 2, 3]),  # bad data draws nothing and breaks nothing
        ],
    )
    login(client, team, "viewer")
    body = client.get(url("dataset_gallery", dataset)).content.decode()
    svg = re.search(r"<svg class=\"overlay\".*?</svg>", body, re.S).group(0)
    assert 'viewBox="0 0 1 1" preserveAspectRatio="none"' in svg
    assert (
        '<rect x="0.4" y="0.3" width="0.2" height="0.4" vector-effect="non-scaling-stroke"/>'
        in (svg)
    )
    assert 'points="0.1,0.1 0.3,0.1 0.2,0.3"' in svg
    assert 'd="M0.45 0.45h0"' in svg  # the one visible keypoint
    assert (
        f'stroke="{gallery_selectors.PALETTE[0]}"' in svg
        and f'stroke="{gallery_selectors.PALETTE[1]}"' in svg
    )
    assert "<title>cat</title>" in svg
    assert svg.count("<g ") == 3


def test_overlay_titles_escape_hostile_class_names_on_both_pages(client, team, ds):
    """The overlay is built in Python, not by the template's autoescaping: a class name is the
    one part of it a user types."""
    dataset = ds[0]
    hostile = DatasetClassFactory(dataset=dataset, index=3, name='"><script>alert(1)</script>')
    image = labelled(dataset, [(hostile, LabelKind.BOX, BOX)])
    login(client, team, "viewer")
    pages = (
        url("dataset_gallery", dataset),
        url("dataset_image_detail", dataset, image_pk=image.pk),
    )
    for page in pages:
        body = client.get(page).content.decode()
        svg = re.search(r"<svg class=\"overlay\".*?</svg>", body, re.S).group(0)
        assert "<script>" not in svg
        assert "<title>&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;</title>" in svg


def test_tile_links_keep_the_filter(client, team, ds):
    dataset, bird = ds[0], ds[1]
    image = labelled(dataset, [(bird, LabelKind.BOX, BOX)], split="val")
    login(client, team, "viewer")
    body = client.get(url("dataset_gallery", dataset) + "?split=val").content.decode()
    detail = url("dataset_image_detail", dataset, image_pk=image.pk)
    thumb = url("dataset_image_thumb", dataset, image_pk=image.pk)
    annotate = reverse(
        "image_annotate",
        kwargs={"ws_slug": dataset.workspace.slug, "pk": dataset.pk, "image_pk": image.pk},
    )
    assert f'href="{detail}?split=val"' in body
    assert f'src="{thumb}"' in body
    assert f'href="{annotate}?split=val"' in body


def test_thumbnails_missing_are_asked_for_once(
    client, team, ds, django_capture_on_commit_callbacks
):
    dataset = ds[0]
    ImageFactory(dataset=dataset)
    login(client, team, "viewer")
    with django_capture_on_commit_callbacks() as callbacks:
        client.get(url("dataset_gallery", dataset))
        client.get(url("dataset_gallery", dataset))
    assert len(callbacks) == 1  # the thumbnail task, enqueued on commit, not twice


# --- image bytes --------------------------------------------------------------------------------


def test_original_is_served_safely_with_etag_and_304(client, team, ds):
    dataset = ds[0]
    data = png_bytes(32, 24, color=(9, 9, 9))
    image = ImageFactory(dataset=dataset, blob=blob_for(data), filename='"><x.png')
    login(client, team, "viewer")
    target = url("dataset_image_file", dataset, image_pk=image.pk)

    response = client.get(target)
    assert response.status_code == 200
    assert b"".join(response.streaming_content) == data
    assert response["Content-Type"] == "image/png"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Content-Disposition"] == f'inline; filename="image-{image.pk}.png"'
    assert response["ETag"] == f'"{image.blob.sha256}"'
    assert response["Cache-Control"].startswith("private, max-age=")

    again = client.get(target, headers={"If-None-Match": f'"{image.blob.sha256}"'})
    assert again.status_code == 304
    assert again["ETag"] == f'"{image.blob.sha256}"'
    assert client.get(target, headers={"If-None-Match": '"other"'}).status_code == 200


def test_content_type_is_the_stored_one(client, team, ds):
    dataset = ds[0]
    out = io.BytesIO()
    PILImage.new("RGB", (40, 30), (1, 99, 3)).save(out, format="JPEG")
    image = ImageFactory(dataset=dataset, blob=blob_for(out.getvalue(), "image/jpeg"))
    login(client, team, "viewer")
    response = client.get(url("dataset_image_file", dataset, image_pk=image.pk))
    assert response["Content-Type"] == "image/jpeg"
    assert response["Content-Disposition"].endswith(f'filename="image-{image.pk}.jpg"')


def test_thumbnail_is_a_placeholder_until_made_then_the_jpeg(client, team, ds):
    dataset = ds[0]
    image = ImageFactory(dataset=dataset, blob=blob_for(png_bytes(600, 300, color=(5, 6, 7))))
    login(client, team, "viewer")
    target = url("dataset_image_thumb", dataset, image_pk=image.pk)

    placeholder = client.get(target)
    assert placeholder.status_code == 200
    assert placeholder["Content-Type"] == "image/webp"
    assert placeholder["Cache-Control"] == "no-store"
    assert "ETag" not in placeholder
    assert PILImage.open(io.BytesIO(placeholder.content)).size == (4, 3)

    thumbnails_make(blob_ids=[image.blob_id])
    real = client.get(target)
    body = b"".join(real.streaming_content)
    assert real["Content-Type"] == "image/jpeg"
    assert real["X-Content-Type-Options"] == "nosniff"
    assert PILImage.open(io.BytesIO(body)).size == (256, 128)
    etag = real["ETag"]
    assert etag.startswith(f'"{image.blob.sha256}')
    assert client.get(target, headers={"If-None-Match": etag}).status_code == 304


def test_an_image_is_reached_only_through_its_own_dataset(client, team, ds):
    dataset = ds[0]
    other = DatasetFactory(workspace=team.workspace)
    foreign = ImageFactory(dataset=other)
    login(client, team, "owner")
    for name in ("dataset_image_file", "dataset_image_thumb", "dataset_image_detail"):
        assert client.get(url(name, dataset, image_pk=foreign.pk)).status_code == 404


def test_public_dataset_images_are_served_to_anyone(client, team, ds):
    dataset = ds[0]
    image = ImageFactory(dataset=dataset)
    file_url = reverse("public_image_file", kwargs={"pk": dataset.pk, "image_pk": image.pk})
    thumb_url = reverse("public_image_thumb", kwargs={"pk": dataset.pk, "image_pk": image.pk})
    assert client.get(file_url).status_code == 404  # private: not even its members here
    dataset.is_public = True
    dataset.save()

    response = client.get(file_url)
    assert response.status_code == 200
    assert response["Content-Type"] == "image/png"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["ETag"] == f'"{image.blob.sha256}"'
    assert client.get(thumb_url)["Content-Type"] == "image/webp"
    other = ImageFactory(dataset=DatasetFactory(workspace=team.workspace))
    wrong = reverse("public_image_file", kwargs={"pk": dataset.pk, "image_pk": other.pk})
    assert client.get(wrong).status_code == 404


# --- image page ---------------------------------------------------------------------------------


def test_image_page_shows_labels_facts_and_neighbours_within_the_filter(client, team, ds):
    dataset, bird, cat, _ = ds
    a = labelled(dataset, [(bird, LabelKind.BOX, [0.51234, 0.5, 0.2, 0.4])], split="val")
    labelled(dataset, [], split="train")
    b = labelled(dataset, [(cat, LabelKind.BOX, BOX), (bird, LabelKind.TAG, [])], split="val")
    c = labelled(dataset, [], split="val")
    login(client, team, "viewer")

    body = client.get(url("dataset_image_detail", dataset, image_pk=b.pk), {"split": "val"})
    html = body.content.decode()
    prev = url("dataset_image_detail", dataset, image_pk=a.pk) + "?split=val"
    nxt = url("dataset_image_detail", dataset, image_pk=c.pk) + "?split=val"
    assert f'rel="prev" href="{prev}"' in html
    assert f'rel="next" href="{nxt}"' in html
    assert b.blob.sha256 in html
    assert "64 × 48 px" in html
    assert "0.500, 0.500, 0.200, 0.400" in html
    assert "Image class" in html  # the tag's kind
    first = client.get(url("dataset_image_detail", dataset, image_pk=a.pk)).content.decode()
    assert "0.512, 0.500" in first
    assert 'rel="prev"' not in first


def test_hostile_file_names_are_shown_escaped_and_visible(client, team, ds):
    dataset = ds[0]
    name = "<script>alert(1)</script>\u202egnp.exe"
    image = ImageFactory(dataset=dataset, filename=name)
    login(client, team, "editor")
    for page in (
        client.get(url("dataset_gallery", dataset)),
        client.get(url("dataset_image_detail", dataset, image_pk=image.pk)),
    ):
        html = page.content.decode()
        assert "<script>alert(1)" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;\\u202egnp.exe" in html
        assert "\u202e" not in html
    file_response = client.get(url("dataset_image_file", dataset, image_pk=image.pk))
    assert "script" not in file_response["Content-Disposition"]


# --- bulk actions -------------------------------------------------------------------------------


def test_bulk_move_to_a_split_moves_only_the_ticked_images_of_this_dataset(client, team, ds):
    dataset = ds[0]
    images = [ImageFactory(dataset=dataset) for _ in range(4)]
    foreign = ImageFactory(dataset=DatasetFactory(workspace=team.workspace))
    login(client, team, "editor")
    response = client.post(
        url("dataset_images_bulk", dataset),
        {
            "action": "move",
            "to_split": "test",
            "images": [images[0].pk, images[2].pk, foreign.pk],
            "back": "split=train&after=1&evil=https://x",
        },
    )
    assert response.status_code == 302
    assert response["Location"] == url("dataset_gallery", dataset) + "?split=train&after=1"
    splits = dict(Image.objects.values_list("pk", "split"))
    assert [splits[i.pk] for i in images] == ["test", "train", "test", "train"]
    assert splits[foreign.pk] == "train"


def test_select_all_on_the_page_moves_the_whole_page(client, team, ds):
    dataset = ds[0]
    for _ in range(65):
        ImageFactory(dataset=dataset)
    login(client, team, "editor")
    html = client.get(url("dataset_gallery", dataset)).content.decode()
    page_ids = re.findall(r'name="page_images" value="(\d+)"', html)
    assert len(page_ids) == 60
    client.post(
        url("dataset_images_bulk", dataset),
        {"action": "move", "to_split": "val", "all_on_page": "1", "page_images": page_ids},
    )
    assert Image.objects.filter(dataset=dataset, split="val").count() == 60


def test_bulk_delete_asks_first_then_deletes_with_labels(client, team, ds):
    dataset, bird, _, _ = ds
    doomed = labelled(dataset, [(bird, LabelKind.BOX, BOX)], filename="doomed<b>.png")
    kept = labelled(dataset, [(bird, LabelKind.BOX, BOX)])
    login(client, team, "editor")
    bulk = url("dataset_images_bulk", dataset)

    ask = client.post(bulk, {"action": "delete", "images": [doomed.pk]})
    assert ask.status_code == 200
    assert "Delete 1 image?" in ask.content.decode()
    assert "doomed&lt;b&gt;.png" in ask.content.decode()
    assert Image.objects.filter(pk=doomed.pk).exists()

    done = client.post(bulk, {"action": "delete", "images": [doomed.pk], "confirm": "yes"})
    assert done.status_code == 302
    assert not Image.objects.filter(pk=doomed.pk).exists()
    assert not Label.objects.filter(image_id=doomed.pk).exists()
    assert Image.objects.filter(pk=kept.pk).exists()
    follow = client.get(done["Location"]).content.decode()
    assert "Deleted 1 image." in follow


def test_bulk_without_images_says_so(client, team, ds):
    dataset = ds[0]
    login(client, team, "editor")
    response = client.post(
        url("dataset_images_bulk", dataset), {"action": "move", "to_split": "val"}, follow=True
    )
    assert "Tick at least one image." in response.content.decode()


def test_viewers_get_no_checkboxes_or_forms(client, team, ds):
    dataset = ds[0]
    ImageFactory(dataset=dataset)
    html = login(client, team, "viewer").get(url("dataset_gallery", dataset)).content.decode()
    assert 'name="images"' not in html
    assert "Auto-split" not in html
    html = login(Client(), team, "editor").get(url("dataset_gallery", dataset)).content.decode()
    assert 'name="images"' in html and "Auto-split" in html


# --- classes ------------------------------------------------------------------------------------


def _classes(dataset) -> list[tuple[int, str]]:
    return list(DatasetClass.objects.filter(dataset=dataset).values_list("index", "name"))


def test_class_page_lists_label_counts(client, team, ds):
    dataset, bird, cat, _ = ds
    labelled(dataset, [(bird, LabelKind.BOX, BOX), (bird, LabelKind.BOX, BOX)])
    labelled(dataset, [(bird, LabelKind.BOX, BOX), (cat, LabelKind.BOX, BOX)])
    html = login(client, team, "viewer").get(url("dataset_classes", dataset)).content.decode()
    rows = re.findall(r'<tr data-class="(\d+)">(.*?)</tr>', html, re.S)
    counts = {int(pk): re.findall(r">(\d+)<", row) for pk, row in rows}
    assert counts[bird.pk][-2:] == ["3", "2"]  # labels, images
    assert counts[cat.pk][-2:] == ["1", "1"]
    assert "Rename" not in html and "Merge" not in html


def test_add_and_rename_classes_with_unique_names(client, team, ds):
    dataset, bird, _, _ = ds
    login(client, team, "editor")
    client.post(url("dataset_class_add", dataset), {"name": "  hawk "})
    assert _classes(dataset)[-1] == (3, "hawk")
    dup = client.post(url("dataset_class_add", dataset), {"name": "cat"}, follow=True)
    assert "There is already a class named “cat”." in dup.content.decode()
    assert len(_classes(dataset)) == 4

    client.post(url("dataset_class_rename", dataset, class_pk=bird.pk), {"name": "sparrow"})
    assert _classes(dataset)[0] == (0, "sparrow")
    clash = client.post(
        url("dataset_class_rename", dataset, class_pk=bird.pk), {"name": "dog"}, follow=True
    )
    assert "There is already a class named “dog”." in clash.content.decode()
    blank = client.post(
        url("dataset_class_rename", dataset, class_pk=bird.pk), {"name": " "}, follow=True
    )
    assert "Give the class a name." in blank.content.decode()
    assert _classes(dataset)[0] == (0, "sparrow")


def test_merge_moves_labels_and_compacts_indexes(client, team, ds):
    dataset, bird, cat, dog = ds
    hawk = DatasetClassFactory(dataset=dataset, index=3, name="hawk")
    one = labelled(dataset, [(cat, LabelKind.BOX, BOX), (dog, LabelKind.BOX, BOX)])
    two = labelled(dataset, [(hawk, LabelKind.BOX, BOX)])
    login(client, team, "editor")

    response = client.post(
        url("dataset_class_merge", dataset), {"source": cat.pk, "into": hawk.pk}, follow=True
    )
    assert "Merged cat into hawk." in response.content.decode()
    assert _classes(dataset) == [(0, "bird"), (1, "dog"), (2, "hawk")]
    assert Label.objects.filter(dataset_class=hawk).count() == 2
    assert not DatasetClass.objects.filter(pk=cat.pk).exists()
    assert Image.objects.get(pk=one.pk).label_count == 2  # moved, not removed
    assert Image.objects.get(pk=two.pk).label_count == 1
    # the labels that were on hawk (index 3) are on hawk still, now index 2
    assert Label.objects.get(image=two).dataset_class.index == 2


def test_merging_tags_keeps_one_tag_per_image(client, team, ds):
    dataset, bird, cat, _ = ds
    both = labelled(dataset, [(bird, LabelKind.TAG, []), (cat, LabelKind.TAG, [])])
    login(client, team, "editor")
    client.post(url("dataset_class_merge", dataset), {"source": bird.pk, "into": cat.pk})
    assert list(Label.objects.filter(image=both).values_list("dataset_class__name", flat=True)) == [
        "cat"
    ]
    assert Image.objects.get(pk=both.pk).label_count == 1


def test_merge_refuses_itself_and_unknown_classes(client, team, ds):
    dataset, bird, _, _ = ds
    other_class = DatasetClassFactory(dataset=DatasetFactory(workspace=team.workspace))
    login(client, team, "editor")
    merge = url("dataset_class_merge", dataset)
    itself = client.post(merge, {"source": bird.pk, "into": bird.pk}, follow=True)
    assert "cannot merge into itself" in itself.content.decode()
    assert client.post(merge, {"source": bird.pk, "into": other_class.pk}).status_code == 404
    assert client.post(merge, {"source": 10**9, "into": bird.pk}).status_code == 404
    assert len(_classes(dataset)) == 3


def test_delete_class_needs_its_name_and_fixes_label_counts(client, team, ds):
    dataset, bird, cat, dog = ds
    both = labelled(dataset, [(bird, LabelKind.BOX, BOX), (cat, LabelKind.BOX, BOX)])
    only_cat = labelled(dataset, [(cat, LabelKind.BOX, BOX), (cat, LabelKind.BOX, BOX)])
    just_dog = labelled(dataset, [(dog, LabelKind.BOX, BOX)])
    login(client, team, "editor")
    target = url("dataset_class_delete", dataset, class_pk=cat.pk)

    ask = client.get(target).content.decode()
    assert "Its 3 labels on 2 images are deleted with it" in ask
    wrong = client.post(target, {"confirm": "CAT"})
    assert wrong.status_code == 200
    assert "Type the class name “cat” to confirm." in wrong.content.decode()
    assert DatasetClass.objects.filter(pk=cat.pk).exists()

    done = client.post(target, {"confirm": "cat"})
    assert done.status_code == 302
    assert _classes(dataset) == [(0, "bird"), (1, "dog")]
    counts = dict(Image.objects.values_list("pk", "label_count"))
    assert counts == {both.pk: 1, only_cat.pk: 0, just_dog.pk: 1}
    assert Label.objects.get(image=just_dog).dataset_class.index == 1
    assert client.post(target, {"confirm": "cat"}).status_code == 404


# --- automatic splits ---------------------------------------------------------------------------


def test_auto_split_is_exact_and_deterministic(client, team, ds):
    dataset = ds[0]
    for _ in range(50):
        ImageFactory(dataset=dataset)
    login(client, team, "editor")
    target = url("dataset_split_auto", dataset)

    def split_with(seed, train=80, val=20, test=0):
        response = client.post(target, {"train": train, "val": val, "test": test, "seed": seed})
        assert response.status_code == 302
        return dict(Image.objects.filter(dataset=dataset).values_list("pk", "split"))

    first = split_with(0)
    assert sorted(first.values()).count("train") == 40
    assert sorted(first.values()).count("val") == 10
    Image.objects.filter(dataset=dataset).update(split="test")  # scramble
    assert split_with(0) == first
    assert split_with(1) != first
    three = split_with(7, 70, 20, 10)
    assert [list(three.values()).count(s) for s in ("train", "val", "test")] == [35, 10, 5]


def test_auto_split_refuses_percentages_not_adding_to_100(client, team, ds):
    dataset = ds[0]
    ImageFactory(dataset=dataset, split="train")
    login(client, team, "editor")
    response = client.post(
        url("dataset_split_auto", dataset),
        {"train": 80, "val": 30, "test": 0, "seed": 0},
        follow=True,
    )
    assert "add up to 110, not 100" in response.content.decode()
    assert Image.objects.get(dataset=dataset).split == "train"


def test_split_quotas_follow_the_ratio_on_small_sets():
    assert services.split_quotas(10, [80, 20, 0]) == [8, 2, 0]
    assert services.split_quotas(3, [80, 20, 0]) == [2, 1, 0]
    assert services.split_quotas(1, [70, 20, 10]) == [1, 0, 0]
    assert services.split_quotas(7, [34, 33, 33]) == [3, 2, 2]
    assert services.split_quotas(0, [80, 20, 0]) == [0, 0, 0]


# --- the dataset page strip ---------------------------------------------------------------------


def test_dataset_page_strip_links_to_gallery_and_classes(client, team, ds):
    dataset = ds[0]
    images = [ImageFactory(dataset=dataset) for _ in range(12)]
    html = login(client, team, "viewer").get(url("dataset_detail", dataset)).content.decode()
    assert url("dataset_gallery", dataset) in html
    assert url("dataset_classes", dataset) in html
    thumbs = re.findall(r'<img src="([^"]+/thumb/)"', html)
    assert thumbs == [url("dataset_image_thumb", dataset, image_pk=i.pk) for i in images[:8]]


@pytest.mark.django_db
def test_gallery_shows_the_images_of_one_health_finding(team, client):
    from datasets.models import HealthFinding

    dataset = DatasetFactory(workspace=team.workspace, name="Findings")
    named, other, elsewhere = (ImageFactory(dataset=dataset) for _ in range(3))
    finding = HealthFinding.objects.create(
        dataset=dataset, kind="tiny_box", severity="warning", message="m", image_ids=[named.pk]
    )
    HealthFinding.objects.create(
        dataset=dataset, kind="leakage", severity="error", message="m", image_ids=[other.pk]
    )
    client.force_login(team.viewer)
    url = reverse("dataset_gallery", kwargs={"ws_slug": "acme", "pk": dataset.pk})
    page = client.get(f"{url}?problem={finding.pk}")
    shown = {image.pk for image in page.context["page"].images}
    assert shown == {named.pk}
    assert b"Only the images of one health finding" in page.content
    all_problems = {image.pk for image in client.get(f"{url}?problems=1").context["page"].images}
    assert all_problems == {named.pk, other.pk} and elsewhere.pk not in all_problems
