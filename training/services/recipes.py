"""A workspace's own training recipes (training.models.WorkspaceRecipe): saved with arguments
checked as the training form checks what a person types, so a recipe never fills the form with
what a start would refuse."""

import dataclasses

from django.db import IntegrityError, transaction

from core.errors import ServiceError
from training.models import WeightsSource, WorkspaceRecipe
from training.recipes import workspace_recipe_get
from training.services.arguments import TrainParams, train_params_validate
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

RECIPE_NAME_MAX = 100


def _recipe_name(name: str) -> str:
    """The name as saved, runs of spaces made one, or why it cannot be a recipe's name."""
    name = " ".join(name.split())
    if not name:
        raise ServiceError("Name the recipe.")
    if len(name) > RECIPE_NAME_MAX:
        raise ServiceError(f"A recipe's name is at most {RECIPE_NAME_MAX} characters.")
    return name


def _name_taken(name: str) -> str:
    return f"This workspace has a recipe named “{name}” already; pick another name."


@transaction.atomic
def workspace_recipe_create(
    *,
    access: WorkspaceAccess,
    name: str,
    params: TrainParams,
    train_images: int,
    description: str = "",
) -> WorkspaceRecipe:
    """Save `params`' training fields (epochs, image size, batch, patience, optimizer and the
    Ultralytics arguments) as a recipe named `name`. Checked by train_params_validate as a run
    of `train_images` training images; the weights do not matter to a recipe (the form's own
    choice), so they are checked as from scratch."""
    access.require(Perm.TRAIN)
    name = _recipe_name(name)
    params = train_params_validate(
        dataclasses.replace(params, weights=WeightsSource.SCRATCH), train_images=train_images
    )
    taken = _name_taken(name)
    if WorkspaceRecipe.objects.for_workspace(access.workspace).filter(name=name).exists():
        raise ServiceError(taken)
    try:
        with transaction.atomic():  # a savepoint: the same name saved at the same moment
            return WorkspaceRecipe.objects.create(
                workspace=access.workspace,
                name=name,
                description=description[:300],
                epochs=params.epochs,
                imgsz=params.imgsz,
                batch=params.batch,
                patience=params.patience,
                optimizer=params.optimizer,
                extra_args=dict(params.extra_args),
                created_by=access.user,
            )
    except IntegrityError:
        raise ServiceError(taken) from None


@transaction.atomic
def workspace_recipe_rename(
    *, access: WorkspaceAccess, recipe_id: int, name: str
) -> WorkspaceRecipe:
    """Give the workspace's recipe `recipe_id` a new name, checked as a new recipe's is.
    Another workspace's id is unknown here (404): the lookup is the workspace's own. The form
    offers recipes by id, so a form open with the old name still picks the renamed one."""
    access.require(Perm.TRAIN)
    recipe = workspace_recipe_get(workspace=access.workspace, pk=recipe_id, lock=True)
    name = _recipe_name(name)
    others = WorkspaceRecipe.objects.for_workspace(access.workspace).exclude(pk=recipe.pk)
    if others.filter(name=name).exists():
        raise ServiceError(_name_taken(name))
    recipe.name = name
    try:
        with transaction.atomic():  # a savepoint: another recipe given the name at this moment
            recipe.save(update_fields=["name"])
    except IntegrityError:
        raise ServiceError(_name_taken(name)) from None
    return recipe


@transaction.atomic
def workspace_recipe_delete(*, access: WorkspaceAccess, recipe_id: int) -> WorkspaceRecipe:
    """Delete the workspace's recipe `recipe_id` (404 for another workspace's). Jobs started
    from it keep their arguments: a recipe only ever filled the form. Returns the deleted row,
    for its name."""
    access.require(Perm.TRAIN)
    recipe = workspace_recipe_get(workspace=access.workspace, pk=recipe_id, lock=True)
    recipe.delete()
    return recipe
