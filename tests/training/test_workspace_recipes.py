"""A workspace's saved recipes (training.models.WorkspaceRecipe) on their own page: everyone in
the workspace sees each one's arguments and who saved it; those who may train rename one (checked
as a new one's name is) or delete one after confirming. Another workspace's recipe is as unknown
as a missing one: the same 404."""

import html
import re

import pytest
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.test import Client
from django.urls import reverse

from core.errors import ServiceError
from training.models import WorkspaceRecipe
from training.recipes import workspace_recipes
from training.services.recipes import workspace_recipe_delete, workspace_recipe_rename
from workspaces.models import Membership

pytestmark = pytest.mark.django_db


def _recipe(workspace, name: str, user=None, **fields) -> WorkspaceRecipe:
    values = {
        "epochs": 20,
        "imgsz": 128,
        "batch": 8,
        "patience": 10,
        "optimizer": "SGD",
        "extra_args": {"lr0": 0.003},
        "description": "Trial 4 of Night",
        **fields,
    }
    return WorkspaceRecipe.objects.create(workspace=workspace, name=name, created_by=user, **values)


@pytest.fixture
def night(team):
    return _recipe(team.workspace, "Night best", team.editor)


@pytest.fixture
def theirs(stranger):
    workspace = Membership.objects.get(user=stranger).workspace
    return _recipe(workspace, "Their best", stranger)


def _url(route: str, **kwargs) -> str:
    return reverse(route, kwargs={"ws_slug": "acme", **kwargs})


def _page(response) -> str:
    return html.unescape(response.content.decode())


# --- services ---------------------------------------------------------------------------------


def test_rename_gives_the_recipe_a_new_name_the_form_offers(team, night):
    renamed = workspace_recipe_rename(
        access=team.access("editor"), recipe_id=night.pk, name="  Night   final "
    )
    assert renamed.name == "Night final"
    night.refresh_from_db()
    assert night.name == "Night final" and night.epochs == 20  # nothing else changes
    offered = workspace_recipes(workspace=team.workspace)
    assert [(r.slug, r.name) for r in offered] == [(f"saved-{night.pk}", "Night final")]


def test_rename_is_checked_as_a_new_recipes_name_is(team, night):
    _recipe(team.workspace, "Day best")
    access = team.access("editor")
    cases = {
        "Day best": "This workspace has a recipe named “Day best” already; pick another name.",
        "   ": "Name the recipe.",
        "x" * 101: "A recipe's name is at most 100 characters.",
    }
    for name, message in cases.items():
        with pytest.raises(ServiceError) as refused:
            workspace_recipe_rename(access=access, recipe_id=night.pk, name=name)
        assert str(refused.value) == message
    night.refresh_from_db()
    assert night.name == "Night best"
    # Its own name again, or 100 characters, is fine.
    assert workspace_recipe_rename(access=access, recipe_id=night.pk, name="Night best")
    assert workspace_recipe_rename(access=access, recipe_id=night.pk, name="y" * 100)


def test_a_name_another_workspace_uses_is_free_here(team, night, theirs):
    renamed = workspace_recipe_rename(
        access=team.access("editor"), recipe_id=night.pk, name="Their best"
    )
    assert renamed.name == "Their best"


def test_delete_removes_the_recipe_from_the_form(team, night):
    kept = _recipe(team.workspace, "Day best")
    deleted = workspace_recipe_delete(access=team.access("editor"), recipe_id=night.pk)
    assert deleted.name == "Night best"
    assert list(WorkspaceRecipe.objects.all()) == [kept]
    assert [r.name for r in workspace_recipes(workspace=team.workspace)] == ["Day best"]


def test_a_viewer_may_neither_rename_nor_delete(team, night):
    access = team.access("viewer")
    with pytest.raises(PermissionDenied):
        workspace_recipe_rename(access=access, recipe_id=night.pk, name="Mine")
    with pytest.raises(PermissionDenied):
        workspace_recipe_delete(access=access, recipe_id=night.pk)
    night.refresh_from_db()
    assert night.name == "Night best"


def test_another_workspaces_recipe_is_unknown_here(team, night, theirs):
    access = team.access("owner")
    for recipe_id in (theirs.pk, theirs.pk + night.pk + 1000):
        with pytest.raises(Http404):
            workspace_recipe_rename(access=access, recipe_id=recipe_id, name="Taken over")
        with pytest.raises(Http404):
            workspace_recipe_delete(access=access, recipe_id=recipe_id)
    theirs.refresh_from_db()
    assert theirs.name == "Their best"


# --- pages ------------------------------------------------------------------------------------


def test_the_list_shows_each_recipes_arguments_and_who_saved_it_without_buttons_to_viewers(
    client, team, night, theirs, django_assert_num_queries
):
    client.force_login(team.viewer)
    with django_assert_num_queries(4) as one:  # the session comes from the cache
        client.get(_url("recipe_list"))
    _recipe(team.workspace, "Day best", None, batch=-1, extra_args={})
    for n in range(5):
        _recipe(team.workspace, f"Trial {n}", team.owner)
    with django_assert_num_queries(len(one.captured_queries)):  # not one more per recipe
        page = _page(client.get(_url("recipe_list")))
    assert page.count('data-testid="recipe-args"') == 7
    assert page.index("Day best") < page.index("Night best")  # by name
    assert "epochs 20, imgsz 128, batch 8, patience 10, optimizer SGD, lr0 0.003" in page
    assert "batch auto" in page
    assert "Trial 4 of Night" in page and "editor@acme.test" in page
    assert "a former member" in page  # the one whose saver left
    assert "Their best" not in page
    assert 'data-testid="recipe-rename"' not in page
    assert 'data-testid="recipe-delete"' not in page


def test_the_list_says_how_to_save_one_when_there_are_none(client, team):
    client.force_login(team.viewer)
    assert "No recipes saved yet" in _page(client.get(_url("recipe_list")))


def test_the_training_pages_link_to_the_recipes(client, team):
    from tests.training.factories import small_version
    from workspaces.models import Project

    small_version(access=team.access("owner"))
    project = Project.objects.create(workspace=team.workspace, name="Detector")
    client.force_login(team.editor)
    recipes = f'href="{_url("recipe_list")}"'
    assert recipes in client.get(_url("job_list")).content.decode()
    form = client.get(_url("job_create", pk=project.pk)).content.decode()
    assert recipes in form
    # beside the recipes the form offers
    assert form.index('data-testid="recipes"') < form.index(recipes)


def test_an_editor_renames_a_recipe_from_the_list(client, team, night):
    _recipe(team.workspace, "Day best")
    client.force_login(team.editor)
    page = _page(client.get(_url("recipe_list")))
    assert f'action="{_url("recipe_rename", pk=night.pk)}"' in page
    response = client.post(_url("recipe_rename", pk=night.pk), {"name": "Night final"}, follow=True)
    assert response.redirect_chain == [(_url("recipe_list"), 302)]
    assert "Renamed the recipe “Night best” to “Night final”." in _page(response)
    night.refresh_from_db()
    assert night.name == "Night final"

    refused = client.post(_url("recipe_rename", pk=night.pk), {"name": "Day best"}, follow=True)
    assert "This workspace has a recipe named “Day best” already; pick another name." in _page(
        refused
    )
    assert client.post(_url("recipe_rename", pk=night.pk), {}, follow=True).status_code == 200
    night.refresh_from_db()
    assert night.name == "Night final"


def test_an_editor_deletes_a_recipe_after_confirming(client, team, night):
    client.force_login(team.editor)
    delete_url = _url("recipe_delete", pk=night.pk)
    assert f'href="{delete_url}"' in client.get(_url("recipe_list")).content.decode()
    confirm = _page(client.get(delete_url))
    assert "Delete the recipe “Night best”?" in confirm
    assert "epochs 20, imgsz 128" in confirm
    assert WorkspaceRecipe.objects.filter(pk=night.pk).exists()  # asking deletes nothing

    response = client.post(delete_url, follow=True)
    assert response.redirect_chain == [(_url("recipe_list"), 302)]
    assert "Deleted the recipe “Night best”" in _page(response)
    assert not WorkspaceRecipe.objects.exists()


def test_rename_and_delete_need_the_csrf_token(team, night):
    client = Client(enforce_csrf_checks=True)
    client.force_login(team.editor)
    assert client.post(_url("recipe_delete", pk=night.pk)).status_code == 403
    assert client.post(_url("recipe_rename", pk=night.pk), {"name": "X"}).status_code == 403
    night.refresh_from_db()
    assert night.name == "Night best"


def test_a_viewer_is_refused_rename_and_delete(client, team, night):
    client.force_login(team.viewer)
    assert client.post(_url("recipe_rename", pk=night.pk), {"name": "X"}).status_code == 403
    assert client.get(_url("recipe_delete", pk=night.pk)).status_code == 403
    assert client.post(_url("recipe_delete", pk=night.pk)).status_code == 403
    night.refresh_from_db()
    assert night.name == "Night best"


def test_another_workspaces_recipe_is_the_same_404_as_an_unknown_one(
    client, team, night, theirs, stranger
):
    client.force_login(team.owner)
    unknown = theirs.pk + night.pk + 1000
    for method, route, data in (
        ("post", "recipe_rename", {"name": "Taken over"}),
        ("get", "recipe_delete", {}),
        ("post", "recipe_delete", {}),
    ):
        answers = [getattr(client, method)(_url(route, pk=pk), data) for pk in (theirs.pk, unknown)]
        assert [a.status_code for a in answers] == [404, 404]
        pages = [re.sub(r"[-\w]{20,}", "", _page(a)) for a in answers]  # the CSRF token
        assert pages[0] == pages[1] and "Their best" not in pages[0]
    theirs.refresh_from_db()
    assert theirs.name == "Their best"
    # A stranger reaches none of the team's recipes, nor its list.
    client.force_login(stranger)
    assert client.get(_url("recipe_list")).status_code == 404
    assert client.post(_url("recipe_delete", pk=night.pk)).status_code == 404
