"""The workspace's own training recipes (saved from a sweep's page): the list, renaming one and
deleting one. Everyone in the workspace sees them; those who may train rename and delete."""

from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from core.errors import ServiceError
from core.http import HtmxHttpRequest
from training.recipes import saved_recipe, workspace_recipe_get, workspace_recipe_rows
from training.services.recipes import (
    RECIPE_NAME_MAX,
    workspace_recipe_delete,
    workspace_recipe_rename,
)
from workspaces.decorators import workspace_view
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess


@workspace_view(Perm.READ)
@require_GET
def recipe_list(request: HtmxHttpRequest, access: WorkspaceAccess) -> HttpResponse:
    rows = [
        {"recipe": row, "arguments": saved_recipe(row).arguments()}
        for row in workspace_recipe_rows(workspace=access.workspace)
    ]
    return render(
        request,
        "training/recipe_list.html",
        {
            "access": access,
            "rows": rows,
            "can_train": access.can(Perm.TRAIN),
            "name_max": RECIPE_NAME_MAX,
        },
    )


@workspace_view(Perm.TRAIN)
@require_POST
def recipe_rename(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    old = workspace_recipe_get(workspace=access.workspace, pk=pk).name
    try:
        recipe = workspace_recipe_rename(
            access=access, recipe_id=pk, name=request.POST.get("name", "")
        )
    except ServiceError as e:
        messages.error(request, str(e))
    else:
        if recipe.name != old:
            messages.success(request, f"Renamed the recipe “{old}” to “{recipe.name}”.")
    return redirect("recipe_list", ws_slug=access.workspace.slug)


@workspace_view(Perm.TRAIN)
@require_http_methods(["GET", "POST"])
def recipe_delete(request: HtmxHttpRequest, access: WorkspaceAccess, pk: int) -> HttpResponse:
    """GET asks to confirm; POST deletes."""
    if request.method == "POST":
        recipe = workspace_recipe_delete(access=access, recipe_id=pk)
        messages.success(
            request,
            f"Deleted the recipe “{recipe.name}”: the training form no longer offers it.",
        )
        return redirect("recipe_list", ws_slug=access.workspace.slug)
    recipe = workspace_recipe_get(workspace=access.workspace, pk=pk)
    return render(
        request,
        "training/recipe_delete.html",
        {"access": access, "recipe": recipe, "arguments": saved_recipe(recipe).arguments()},
    )
