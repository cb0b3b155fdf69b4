"""A workspace's own training recipes (training.models.WorkspaceRecipe): saved with arguments
checked as the training form checks what a person types, so a recipe never fills the form with
what a start would refuse."""

import dataclasses

from django.db import IntegrityError, transaction

from core.errors import ServiceError
from training.models import WeightsSource, WorkspaceRecipe
from training.services.arguments import TrainParams, train_params_validate
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

RECIPE_NAME_MAX = 100


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
    name = " ".join(name.split())
    if not name:
        raise ServiceError("Name the recipe.")
    if len(name) > RECIPE_NAME_MAX:
        raise ServiceError(f"A recipe's name is at most {RECIPE_NAME_MAX} characters.")
    params = train_params_validate(
        dataclasses.replace(params, weights=WeightsSource.SCRATCH), train_images=train_images
    )
    taken = f"This workspace has a recipe named “{name}” already; pick another name."
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
