"""Authorisation-matrix rows for the workspace's recipes page (tests/test_authz_matrix.py):
every member sees the list; those who may train (editors up) rename and delete, back to the
list. @recipe is one of the team's recipes."""

from tests.authz import Row, _ws
from training.models import WorkspaceRecipe
from workspaces.models import Workspace

ROUTES = [
    Row("recipe_list", "get", "viewer", 200, _ws()),
    Row("recipe_rename", "post", "editor", 302, _ws(pk="@recipe"), {"name": "Renamed"}),
    Row("recipe_delete", "get", "editor", 200, _ws(pk="@recipe")),
    Row("recipe_delete", "post", "editor", 302, _ws(pk="@recipe")),
]


def recipes_ctx(values: dict) -> dict:
    recipe = WorkspaceRecipe.objects.create(
        workspace=Workspace.objects.get(slug="acme"),
        name="Night best",
        epochs=2,
        imgsz=64,
        batch=2,
        patience=100,
        optimizer="auto",
    )
    return {"recipe": recipe.pk}


CTX = [recipes_ctx]
