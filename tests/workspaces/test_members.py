import pytest
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from core.errors import ServiceError
from workspaces.models import Membership, Role
from workspaces.services.members import membership_change_role, membership_leave, membership_remove
from workspaces.services.workspaces import workspace_transfer_ownership


def _membership(team, role):
    return Membership.objects.get(workspace=team.workspace, user=team.user(role))


@pytest.mark.django_db
def test_last_owner_cannot_leave_but_can_after_making_another_owner(team):
    with pytest.raises(ServiceError, match="last owner"):
        membership_leave(access=team.access("owner"))
    assert _membership(team, "owner").role == Role.OWNER

    membership_change_role(
        access=team.access("owner"), membership=_membership(team, "admin"), role=Role.OWNER
    )
    membership_leave(access=team.access("owner"))
    assert not Membership.objects.filter(user=team.owner, workspace=team.workspace).exists()


@pytest.mark.django_db
def test_last_owner_leave_from_the_page_shows_why(team, client):
    client.force_login(team.owner)
    response = client.post(reverse("workspace_leave", kwargs={"ws_slug": "acme"}), follow=True)
    assert b"You are the last owner" in response.content
    assert Membership.objects.filter(user=team.owner, workspace=team.workspace).exists()


@pytest.mark.django_db
def test_last_owner_cannot_be_demoted_or_removed(team):
    Membership.objects.filter(pk=_membership(team, "admin").pk).update(role=Role.OWNER)
    second_owner = team.access("admin")  # now an owner
    membership_change_role(
        access=second_owner, membership=_membership(team, "owner"), role=Role.ADMIN
    )
    with pytest.raises(ServiceError):  # cannot demote themselves, the only owner left
        membership_change_role(
            access=second_owner, membership=_membership(team, "admin"), role=Role.EDITOR
        )
    assert Membership.objects.filter(workspace=team.workspace, role=Role.OWNER).count() == 1


@pytest.mark.django_db
def test_admin_cannot_touch_an_owner_nor_grant_ownership(team):
    owner = _membership(team, "owner")
    with pytest.raises(PermissionDenied, match="Only an owner"):
        membership_change_role(access=team.access("admin"), membership=owner, role=Role.VIEWER)
    with pytest.raises(PermissionDenied, match="Only an owner"):
        membership_remove(access=team.access("admin"), membership=owner)
    with pytest.raises(ServiceError, match="cannot give"):
        membership_change_role(
            access=team.access("admin"), membership=_membership(team, "editor"), role=Role.OWNER
        )
    assert _membership(team, "owner").role == Role.OWNER
    assert _membership(team, "editor").role == Role.EDITOR


@pytest.mark.django_db
def test_forged_role_on_the_role_form_is_refused(team, client):
    client.force_login(team.admin)
    editor = _membership(team, "editor")
    url = reverse("member_role", kwargs={"ws_slug": "acme", "pk": editor.pk})
    response = client.post(url, {"role": "owner"}, follow=True)
    assert b"Choose one of the roles offered" in response.content
    response = client.post(url, {"role": "root"}, headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert b"Choose one of the roles offered" in response.content
    assert b'id="member-' in response.content and b"<html" not in response.content
    editor.refresh_from_db()
    assert editor.role == Role.EDITOR


@pytest.mark.django_db
def test_admin_changes_a_role_with_htmx_and_gets_the_row_back(team, client):
    client.force_login(team.admin)
    viewer = _membership(team, "viewer")
    response = client.post(
        reverse("member_role", kwargs={"ws_slug": "acme", "pk": viewer.pk}),
        {"role": "editor"},
        headers={"HX-Request": "true"},
    )
    assert response.status_code == 200
    assert f'id="member-{viewer.pk}"'.encode() in response.content
    assert b'value="editor" selected' in response.content
    viewer.refresh_from_db()
    assert viewer.role == Role.EDITOR


@pytest.mark.django_db
def test_admin_removes_a_member_who_then_gets_404(team, client):
    client.force_login(team.admin)
    editor = _membership(team, "editor")
    client.post(reverse("member_remove", kwargs={"ws_slug": "acme", "pk": editor.pk}))
    assert not Membership.objects.filter(pk=editor.pk).exists()
    client.force_login(team.editor)
    assert client.get(reverse("workspace_detail", kwargs={"ws_slug": "acme"})).status_code == 404


@pytest.mark.django_db
def test_member_of_another_workspace_cannot_be_reached_by_id(team, stranger, client):
    foreign = Membership.objects.get(user=stranger)
    client.force_login(team.owner)
    url = reverse("member_remove", kwargs={"ws_slug": "acme", "pk": foreign.pk})
    assert client.post(url).status_code == 404
    assert Membership.objects.filter(pk=foreign.pk).exists()


@pytest.mark.django_db
def test_transfer_ownership_keeps_old_owner_as_admin(team, client):
    client.force_login(team.owner)
    editor = _membership(team, "editor")
    client.post(
        reverse("workspace_transfer", kwargs={"ws_slug": "acme"}), {"membership": editor.pk}
    )
    assert _membership(team, "editor").role == Role.OWNER
    assert _membership(team, "owner").role == Role.ADMIN
    with pytest.raises(PermissionDenied):
        workspace_transfer_ownership(access=team.access("owner"), membership=editor)


@pytest.mark.django_db
def test_delete_workspace_needs_the_typed_slug(team, client):
    client.force_login(team.owner)
    url = reverse("workspace_delete", kwargs={"ws_slug": "acme"})
    response = client.post(url, {"confirm": "wrong"}, follow=True)
    assert b"Type acme to confirm" in response.content
    assert Membership.objects.filter(workspace=team.workspace).count() == 4
    client.post(url, {"confirm": "acme"})
    assert not Membership.objects.filter(workspace__slug="acme").exists()


@pytest.mark.django_db
def test_workspace_switcher_lists_only_my_workspaces(team, stranger, client):
    client.force_login(team.viewer)
    page = client.get(reverse("workspace_detail", kwargs={"ws_slug": "acme"})).content.decode()
    assert "/w/acme/" in page
    assert "/w/elsewhere/" not in page
    assert "Elsewhere" not in page


@pytest.mark.django_db
def test_create_team_workspace_from_the_page(team, client):
    client.force_login(team.viewer)
    response = client.post(reverse("workspace_create"), {"name": "Acme Vision"})
    assert response.status_code == 302
    assert response["Location"] == "/w/acme-vision/"  # slug taken? no: "acme" was
    membership = Membership.objects.get(user=team.viewer, workspace__slug="acme-vision")
    assert membership.role == Role.OWNER
    response = client.post(reverse("workspace_create"), {"name": "Acme Vision"})
    assert response["Location"] == "/w/acme-vision-2/"
