"""Dedicated endpoints: create, start, stop, swap the model behind one, delete."""

import secrets

from django.db import transaction
from django.utils.text import slugify

from core.errors import ServiceError
from deploy.models import Deployment, DeploymentState
from deploy.predict import PredictRefused, model_ready
from training.models import TrainedModel
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess


def _reconcile_on_commit(deployment: Deployment) -> None:
    from deploy.tasks import deployment_reconcile

    transaction.on_commit(lambda: deployment_reconcile.delay(deployment.pk))


def _servable(model: TrainedModel) -> None:
    try:
        model_ready(model)
    except PredictRefused as exc:
        raise ServiceError(exc.detail) from None


@transaction.atomic
def deployment_create(
    *, access: WorkspaceAccess, model: TrainedModel, name: str = ""
) -> Deployment:
    """A dedicated endpoint for `model`, started by a worker right after this commits."""
    access.require(Perm.WRITE)
    if not access.owns(model):
        raise ServiceError("This model belongs to another workspace.")
    _servable(model)
    plan = access.workspace.plan
    limit = getattr(plan, "max_deployments", 1)
    # Counted under the workspace row's lock, so two requests cannot both take the last one.
    type(access.workspace).objects.select_for_update().filter(pk=access.workspace.pk).first()
    if Deployment.objects.for_workspace(access.workspace).count() >= limit:
        raise ServiceError(
            f"The {plan.name} plan allows {limit} deployment{'s' if limit != 1 else ''}; "
            "delete one first, or move to a larger plan."
        )
    name = (name or model.name).strip()[:100]
    deployment = Deployment.objects.create(
        workspace=access.workspace,
        model=model,
        name=name,
        slug=f"{slugify(name)[:40].strip('-') or 'model'}-{secrets.token_hex(3)}",
        desired_running=True,
        state=DeploymentState.STARTING,
        created_by=access.user,
    )
    _reconcile_on_commit(deployment)
    return deployment


@transaction.atomic
def deployment_set_running(
    *, access: WorkspaceAccess, deployment: Deployment, running: bool
) -> Deployment:
    access.require(Perm.WRITE)
    locked = Deployment.objects.select_for_update().get(pk=deployment.pk)
    if running:
        _servable(locked.model)
    locked.desired_running = running
    locked.state = DeploymentState.STARTING if running else DeploymentState.STOPPING
    locked.save(update_fields=["desired_running", "state"])
    _reconcile_on_commit(locked)
    return locked


@transaction.atomic
def deployment_swap(
    *, access: WorkspaceAccess, deployment: Deployment, model: TrainedModel
) -> Deployment:
    """Serve another model at the same URL; the next request loads it (no restart)."""
    access.require(Perm.WRITE)
    if not access.owns(model):
        raise ServiceError("This model belongs to another workspace.")
    locked = Deployment.objects.select_for_update().get(pk=deployment.pk)
    if model.task != locked.model.task:
        raise ServiceError(
            f"Callers of this endpoint expect {locked.model.get_task_display().lower()} "
            f"results; “{model.name}” is a {model.get_task_display().lower()} model."
        )
    _servable(model)
    locked.model = model
    locked.save(update_fields=["model"])
    return locked


@transaction.atomic
def deployment_delete(*, access: WorkspaceAccess, deployment: Deployment) -> None:
    access.require(Perm.WRITE)
    locked = Deployment.objects.select_for_update().get(pk=deployment.pk)
    if locked.desired_running or locked.state not in (
        DeploymentState.STOPPED,
        DeploymentState.FAILED,
    ):
        raise ServiceError("Stop the deployment before deleting it.")
    locked.delete()
