"""The dataset page and the editor count a big dataset as the gallery does (issue 19): exactly
up to EXACT_COUNT_MAX, PostgreSQL's estimate past it said as "about" (SQLite, with no estimate,
counts), and an editor position past the limit says only what it knows."""

import re

import pytest
from django.db import connection
from django.urls import reverse
from django.utils.html import escape

from datasets.models import LabelStatus, Split
from datasets.selectors import counts as count_selectors
from datasets.selectors import gallery as gallery_selectors
from tests.datasets.factories import DatasetClassFactory, DatasetFactory
from tests.datasets.test_gallery_counts import label, make_images, statistics_refresh

pytestmark = pytest.mark.django_db
LIMIT = 50


@pytest.fixture(autouse=True)
def small_limit(monkeypatch):
    monkeypatch.setattr(gallery_selectors, "EXACT_COUNT_MAX", LIMIT)
    monkeypatch.setattr(count_selectors, "EXACT_COUNT_MAX", LIMIT)


def _about(text: str) -> int:
    return int(re.fullmatch(r"about ([\d,]+)", text).group(1).replace(",", ""))


def _close(text: str, truth: int) -> bool:
    return abs(_about(text) - truth) <= truth * 0.2


def test_a_small_dataset_is_counted_exactly_on_its_page(client, team):
    dataset = DatasetFactory(workspace=team.workspace)
    bird = DatasetClassFactory(dataset=dataset, index=0, name="bird")
    DatasetClassFactory(dataset=dataset, index=1, name="cat")
    label(make_images(dataset, 7, split=Split.VAL), bird)
    make_images(dataset, 13)
    statistics_refresh()
    client.force_login(team.viewer)
    page = client.get(reverse("dataset_detail", kwargs={"ws_slug": "acme", "pk": dataset.pk}))
    body = page.content.decode()
    assert '<span data-testid="image-total">20</span> images' in body
    assert "<dt>train</dt><dd>13</dd><dt>val</dt><dd>7</dd>" in body
    assert "<td>bird</td><td>7</td>" in body and "<td>cat</td><td>0</td>" in body
    assert 'data-testid="status-unlabelled">20</span>' in body  # status is not label_count
    assert "An estimate" not in body


def test_past_the_limit_the_dataset_page_estimates_and_says_so(client, team):
    dataset = DatasetFactory(workspace=team.workspace)
    bird = DatasetClassFactory(dataset=dataset, index=0, name="bird")
    birds = make_images(dataset, 120, split=Split.VAL, status=LabelStatus.APPROVED)
    make_images(dataset, 180)
    label(birds, bird)
    make_images(DatasetFactory(workspace=team.workspace), 60)  # another dataset's rows
    statistics_refresh()
    client.force_login(team.viewer)
    page = client.get(reverse("dataset_detail", kwargs={"ws_slug": "acme", "pk": dataset.pk}))
    context = page.context
    total, splits = context["image_total"], context["splits"]
    (classes,) = context["classes"]
    statuses = {s["value"]: s for s in context["progress"]["statuses"]}
    body = page.content.decode()
    if connection.vendor == "postgresql":
        assert not total.exact and _close(total.text, 300)
        assert _close(splits["train"].text, 180) and _close(splits["val"].text, 120)
        assert not classes.label_count.exact and _close(classes.label_count.text, 120)
        assert not statuses["approved"]["exact"] and _close(statuses["approved"]["count_text"], 120)
        assert f'title="{escape(total.note)}">{total.text}</span> images' in body
    else:  # no estimate to be had: counted
        assert (total.text, splits["train"].text, splits["val"].text) == ("300", "180", "120")
        assert classes.label_count.text == "120" and statuses["approved"]["count_text"] == "120"
        assert "An estimate" not in body
    assert statuses[LabelStatus.IN_REVIEW]["count_text"] == "0"  # none: exact, whatever else


def _editor(client, dataset, image, query=""):
    url = reverse(
        "image_annotate", kwargs={"ws_slug": "acme", "pk": dataset.pk, "image_pk": image.pk}
    )
    page = client.get(url + query)
    assert page.status_code == 200
    nav = page.context["editor_data"]["nav"]
    shown = re.search(r'data-testid="position"[^>]*>([^<]*)<', page.content.decode()).group(1)
    return nav, shown


def test_the_editors_position_and_total_are_exact_up_to_the_limit_and_say_what_is_known_past_it(
    client, team
):
    dataset = DatasetFactory(workspace=team.workspace)
    bird = DatasetClassFactory(dataset=dataset, index=0, name="bird")
    images = make_images(dataset, 200)
    label(images[::2], bird)
    statistics_refresh()
    client.force_login(team.editor)

    nav, shown = _editor(client, dataset, images[10])
    assert nav["exact"] is (connection.vendor != "postgresql")
    assert nav["next"].endswith(f"/images/{images[11].pk}/annotate/")
    if connection.vendor == "postgresql":
        assert shown.startswith("11 / about ") and _close(shown.split(" / ")[1], 200)
    else:
        assert shown == "11 / 200"

    nav, shown = _editor(client, dataset, images[150], f"?class={bird.pk}")  # the 76th bird
    assert nav["prev"].endswith(f"/images/{images[148].pk}/annotate/?class={bird.pk}")
    assert nav["next"].endswith(f"/images/{images[152].pk}/annotate/?class={bird.pk}")
    if connection.vendor == "postgresql":
        assert shown.startswith(f"{LIMIT + 1}+ / about ") and _close(shown.split(" / ")[1], 100)
    else:
        assert shown == "76 / 100"

    url = reverse(
        "image_annotate", kwargs={"ws_slug": "acme", "pk": dataset.pk, "image_pk": images[0].pk}
    )
    (bird_out,) = client.get(url).context["editor_data"]["classes"]
    if connection.vendor == "postgresql":
        assert _close(bird_out["count_text"], 100)
    else:
        assert (bird_out["count"], bird_out["count_text"]) == (100, "100")


def test_the_classes_page_and_a_public_datasets_page_count_up_to_the_limit(client, team):
    dataset = DatasetFactory(workspace=team.workspace, is_public=True)
    bird = DatasetClassFactory(dataset=dataset, index=0, name="bird")
    cat = DatasetClassFactory(dataset=dataset, index=1, name="cat")
    birds = make_images(dataset, 80)
    label(birds, bird)
    label(birds[:10], bird)  # a second bird on ten of them: 90 labels on 80 images
    label(make_images(dataset, 5), cat)
    statistics_refresh()
    client.force_login(team.viewer)
    page = client.get(reverse("dataset_classes", kwargs={"ws_slug": "acme", "pk": dataset.pk}))
    by_name = {c.name: c for c in page.context["classes"]}
    assert (by_name["cat"].label_count.text, by_name["cat"].image_count.text) == ("5", "5")
    # Distinct images have no estimate, on any database: what is known is said.
    assert by_name["bird"].image_count.text == f"more than {LIMIT}"
    if connection.vendor == "postgresql":
        assert _close(by_name["bird"].label_count.text, 90)
    else:
        assert by_name["bird"].label_count.text == "90"

    client.logout()  # anyone may open a public dataset's page
    public = client.get(reverse("public_dataset", kwargs={"pk": dataset.pk}))
    assert public.status_code == 200
    total = public.context["image_total"]
    if connection.vendor == "postgresql":
        assert _close(total.text, 85)
    else:
        assert total.text == "85"
