"""Review: editors submit, reviewers (admins, or editors flagged as reviewers) approve or reject
with a comment; the labelling page shows progress by status and by person; the gallery
filters by status."""

import pytest
from django.test import Client

from datasets.models import Image, LabelStatus
from tests.datasets.factories import DatasetClassFactory, DatasetFactory, ImageFactory
from workspaces.models import Membership

pytestmark = pytest.mark.django_db


@pytest.fixture
def images(team):
    dataset = DatasetFactory(workspace=team.workspace, task="detect", name="Birds")
    DatasetClassFactory(dataset=dataset, index=0, name="bird")
    return dataset, [ImageFactory(dataset=dataset) for _ in range(3)]


def _client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _review(client, image, action, comment=""):
    return client.post(
        f"/api/v1/images/{image.pk}/review",
        {"action": action, "comment": comment},
        content_type="application/json",
    )


def _label(client, image):
    response = client.put(
        f"/api/v1/images/{image.pk}/labels",
        {"revision": Image.objects.get(pk=image.pk).revision, "labels": []},
        content_type="application/json",
    )
    assert response.status_code == 200


def test_submit_approve_and_reject_with_a_comment(team, images):
    _, (first, second, _) = images
    editor, admin = _client(team.editor), _client(team.admin)
    response = _review(editor, first, "submit")
    assert response.status_code == 400
    assert "before submitting" in response.json()["detail"]

    _label(editor, first)
    assert _review(editor, first, "submit").json()["status"] == "in_review"
    assert "already in review" in _review(editor, first, "submit").json()["detail"]

    # An editor who is not a reviewer cannot approve, and is told how to become one.
    response = _review(editor, first, "approve")
    assert response.status_code == 403
    assert "reviewer" in response.json()["detail"]

    assert _review(admin, first, "approve").json() == {"status": "approved", "review_comment": ""}
    first.refresh_from_db()
    assert first.reviewed_by == team.admin and first.reviewed_at is not None

    _label(editor, second)
    _review(editor, second, "submit")
    response = _review(admin, second, "reject")
    assert response.status_code == 400 and "needs a comment" in response.json()["detail"]
    response = _review(admin, second, "reject", "The bird's tail is outside the box.")
    assert response.json()["status"] == "rejected"
    # Fixing it sends it back to labelled, ready to submit again.
    _label(editor, second)
    second.refresh_from_db()
    assert second.status == LabelStatus.LABELLED
    assert _review(editor, second, "submit").json()["status"] == "in_review"


def test_an_editor_flagged_as_reviewer_may_review_and_a_viewer_may_not(team, images):
    _, (image, _, _) = images
    _label(_client(team.editor), image)
    assert _review(_client(team.viewer), image, "approve").status_code == 403
    assert _review(_client(team.viewer), image, "submit").status_code == 403
    Membership.objects.filter(user=team.editor).update(is_reviewer=True)
    assert _review(_client(team.editor), image, "approve").json()["status"] == "approved"


def test_unknown_action_and_long_comment(team, images):
    _, (image, _, _) = images
    admin = _client(team.admin)
    assert "Choose submit" in _review(admin, image, "publish").json()["detail"]
    assert _review(admin, image, "reject", "x" * 3000).status_code == 400


def test_members_page_makes_an_editor_a_reviewer(team):
    admin = _client(team.admin)
    member = Membership.objects.get(user=team.editor)
    page = admin.get("/w/acme/members/").content.decode()
    assert f'data-testid="make-reviewer-{member.pk}"' in page
    response = admin.post(f"/w/acme/members/{member.pk}/reviewer/", {"is_reviewer": "1"})
    assert response.status_code == 302
    member.refresh_from_db()
    assert member.is_reviewer
    viewer = Membership.objects.get(user=team.viewer)
    admin.post(f"/w/acme/members/{viewer.pk}/reviewer/", {"is_reviewer": "1"})
    viewer.refresh_from_db()
    assert not viewer.is_reviewer
    # Only those who manage members may change it.
    other = Membership.objects.get(user=team.admin)
    assert (
        _client(team.editor)
        .post(f"/w/acme/members/{other.pk}/reviewer/", {"is_reviewer": "1"})
        .status_code
        == 403
    )


def test_labelling_page_counts_by_status_and_person(team, images):
    dataset, (a, b, c) = images
    editor, admin = _client(team.editor), _client(team.admin)
    for image in (a, b):
        _label(editor, image)
        _review(editor, image, "submit")
    _review(admin, a, "approve")
    page = _client(team.viewer).get(f"/w/acme/datasets/{dataset.pk}/labelling/").content.decode()
    assert 'data-testid="status-approved">1<' in page
    assert 'data-testid="status-in_review">1<' in page
    assert 'data-testid="status-unlabelled">1<' in page
    assert "editor@acme.test" in page and "admin@acme.test" in page
    # The dataset page shows the same counts.
    detail = _client(team.viewer).get(f"/w/acme/datasets/{dataset.pk}/").content.decode()
    assert 'data-testid="status-in_review">1<' in detail
    # The gallery filters by status.
    gallery = _client(team.viewer).get(f"/w/acme/datasets/{dataset.pk}/images/?status=in_review")
    assert gallery.content.decode().count('class="tile"') == 1
    assert f'data-image="{b.pk}"' in gallery.content.decode()


def test_review_queue_opens_the_first_waiting_image_and_moves_on(team, images):
    dataset, (a, b, c) = images
    editor = _client(team.editor)
    for image in (a, c):
        _label(editor, image)
        _review(editor, image, "submit")
    response = _client(team.admin).get(f"/w/acme/datasets/{dataset.pk}/review/")
    assert response.status_code == 302
    assert (
        response["Location"]
        == f"/w/acme/datasets/{dataset.pk}/images/{a.pk}/annotate/?queue=review"
    )
    page = _client(team.admin).get(response["Location"])
    data = page.context["editor_data"]
    assert data["nav"]["queue"] == "review"
    assert data["nav"]["next"].endswith(f"/images/{c.pk}/annotate/?queue=review")
    assert data["nav"]["total"] == 2 and data["can_review"] is True
    # Nothing waiting: back to the labelling page with a message.
    Image.objects.filter(dataset=dataset).update(status=LabelStatus.APPROVED)
    response = _client(team.admin).get(f"/w/acme/datasets/{dataset.pk}/review/", follow=True)
    assert "Nothing is waiting for review" in response.content.decode()
