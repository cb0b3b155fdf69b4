import pytest
from django.urls import reverse

from tests.workspaces.factories import ProjectFactory
from workspaces.models import Project


@pytest.mark.django_db
def test_editor_creates_renames_and_deletes_a_project(team, client):
    client.force_login(team.editor)
    response = client.post(
        reverse("project_create", kwargs={"ws_slug": "acme"}),
        {"name": "Birds", "description": "Kestrels and others"},
    )
    project = Project.objects.get(workspace=team.workspace)
    assert response["Location"] == f"/w/acme/projects/{project.pk}/"
    detail = client.get(response["Location"])
    assert b"Kestrels and others" in detail.content

    client.post(
        reverse("project_edit", kwargs={"ws_slug": "acme", "pk": project.pk}),
        {"name": "Raptors", "description": "renamed"},
    )
    project.refresh_from_db()
    assert (project.name, project.description) == ("Raptors", "renamed")

    url = reverse("project_delete", kwargs={"ws_slug": "acme", "pk": project.pk})
    assert b"Type the project name" in client.get(url).content
    wrong = client.post(url, {"confirm": "raptors"})
    assert b"to confirm" in wrong.content
    assert Project.objects.filter(pk=project.pk).exists()
    client.post(url, {"confirm": "Raptors"})
    assert not Project.objects.filter(pk=project.pk).exists()


@pytest.mark.django_db
def test_duplicate_project_name_is_a_clear_error(team, client):
    ProjectFactory(workspace=team.workspace, name="Birds")
    client.force_login(team.editor)
    response = client.post(reverse("project_create", kwargs={"ws_slug": "acme"}), {"name": "birds"})
    assert response.status_code == 200
    assert b"already exists" in response.content
    assert Project.objects.count() == 1


@pytest.mark.django_db
def test_same_name_is_fine_in_another_workspace(team, stranger, client):
    ProjectFactory(workspace=stranger.memberships.get().workspace, name="Birds")
    client.force_login(team.editor)
    client.post(reverse("project_create", kwargs={"ws_slug": "acme"}), {"name": "Birds"})
    assert Project.objects.filter(name="Birds").count() == 2


@pytest.mark.django_db
def test_project_of_another_workspace_is_404_even_through_my_workspace(team, stranger, client):
    theirs = ProjectFactory(workspace=stranger.memberships.get().workspace, name="Secret")
    client.force_login(team.owner)
    for name in ["project_detail", "project_edit", "project_delete"]:
        url = reverse(name, kwargs={"ws_slug": "acme", "pk": theirs.pk})
        assert client.get(url).status_code == 404
    assert (
        client.post(
            reverse("project_delete", kwargs={"ws_slug": "acme", "pk": theirs.pk}),
            {"confirm": "Secret"},
        ).status_code
        == 404
    )
    assert Project.objects.filter(pk=theirs.pk).exists()


@pytest.mark.django_db
def test_viewer_sees_projects_without_edit_buttons(team, client):
    project = ProjectFactory(workspace=team.workspace, name="Birds")
    client.force_login(team.viewer)
    page = client.get(reverse("project_detail", kwargs={"ws_slug": "acme", "pk": project.pk}))
    assert page.status_code == 200
    assert b"/edit/" not in page.content
    assert (
        client.get(
            reverse("project_edit", kwargs={"ws_slug": "acme", "pk": project.pk})
        ).status_code
        == 403
    )


@pytest.mark.django_db
def test_project_list_paginates_with_constant_queries(team, client, django_assert_num_queries):
    ProjectFactory.create_batch(30, workspace=team.workspace)
    client.force_login(team.viewer)
    url = reverse("project_list", kwargs={"ws_slug": "acme"})
    # user, membership+workspace+plan, count, page of projects, switcher workspaces (the
    # session is read from the cache: SESSION_ENGINE)
    with django_assert_num_queries(5):
        page1 = client.get(url)
    assert page1.content.count(b"/w/acme/projects/") >= 25
    assert b"Page 1 of 2" in page1.content
    with django_assert_num_queries(5):
        page2 = client.get(url + "?page=2")
    assert b"Page 2 of 2" in page2.content


@pytest.mark.django_db
def test_empty_states_say_what_to_do_next(team, client):
    client.force_login(team.editor)
    page = client.get(reverse("project_list", kwargs={"ws_slug": "acme"}))
    assert b"No projects yet" in page.content and b"Create one" in page.content
    client.force_login(team.viewer)
    page = client.get(reverse("project_list", kwargs={"ws_slug": "acme"}))
    assert b"An editor of this workspace can create one" in page.content
