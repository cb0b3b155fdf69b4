"""Dedicated endpoints: create, start, stop, swap the model behind one, delete; and deleting a
trained model, which only the top app can check nothing still uses (a deployment, an export,
a pre-labelling run, a job fine-tuning from it)."""

import logging
import secrets

from django.db import transaction
from django.db.models import ProtectedError, RestrictedError
from django.utils.text import slugify

from annotation.models import PRELABEL_FINAL, PrelabelRun
from billing.ledger import account_for, credits_format_rounded
from core.errors import ServiceError
from core.money import per_hour_to_micro
from core.storage import storage_delete
from deploy.models import Deployment, DeploymentState, ExportState, ModelExport, Placement
from deploy.predict import PredictRefused, model_ready
from training.models import FINAL_STATES, GpuType, TrainedModel, TrainingJob
from training.services.catalog import gpu_pick
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

logger = logging.getLogger(__name__)


def _reconcile_on_commit(deployment: Deployment) -> None:
    from deploy.tasks import deployment_reconcile

    transaction.on_commit(lambda: deployment_reconcile.delay(deployment.pk))


def _servable(model: TrainedModel) -> None:
    try:
        model_ready(model)
    except PredictRefused as exc:
        raise ServiceError(exc.detail) from None


# Before a rented endpoint starts, the workspace has at least this much of its replica time.
REMOTE_MINIMUM_SECONDS = 15 * 60


def _remote_placement(access: WorkspaceAccess, gpu_type: GpuType) -> None:
    """A GPU SkyPilot rents, of the same admin-priced catalogue as training, that this
    workspace's plan includes, with a quarter of an hour of it in credits."""
    if gpu_type.provider != "skypilot":
        raise ServiceError("Endpoints run on this machine or on a GPU SkyPilot rents.")
    gpu_pick(workspace=access.workspace, gpu_id=gpu_type.pk)  # the plan, the provider's set-up
    need = per_hour_to_micro(REMOTE_MINIMUM_SECONDS, gpu_type.hourly_price)
    available = account_for(access.workspace).available
    if need and available < need:
        raise ServiceError(
            f"A {gpu_type.name} endpoint costs {credits_format_rounded(need * 4)} credits an "
            f"hour; the workspace has {credits_format_rounded(available)}: add credits first."
        )


@transaction.atomic
def deployment_create(
    *,
    access: WorkspaceAccess,
    model: TrainedModel,
    name: str = "",
    gpu_type: GpuType | None = None,
) -> Deployment:
    """A dedicated endpoint for `model`, started by a worker right after this commits: on this
    machine, or (`gpu_type`, a SkyPilot type of the catalogue) on GPUs SkyServe rents."""
    access.require(Perm.WRITE)
    if not access.owns(model):
        raise ServiceError("This model belongs to another workspace.")
    _servable(model)
    if gpu_type is not None:
        _remote_placement(access, gpu_type)
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
        placement=Placement.SKYSERVE if gpu_type else Placement.LOCAL,
        gpu_type=gpu_type,
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
        if locked.gpu_type is not None:
            _remote_placement(access, locked.gpu_type)
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
    if locked.placement == Placement.SKYSERVE and locked.state != DeploymentState.STOPPED:
        # Its replicas fetched their weights when they started: a new model is a new start.
        raise ServiceError("Stop this endpoint to serve another model; start it again after.")
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


def _names(values: list[str], limit: int = 3) -> str:
    shown = ", ".join(f"“{v}”" for v in values[:limit])
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "")


def _stored_files_delete(keys: list[str]) -> None:
    for key in keys:
        try:
            storage_delete(key)
        except OSError:
            # The row is gone either way; a file left behind costs space, not correctness.
            logger.warning("could not delete stored file %s", key, exc_info=True)


@transaction.atomic
def model_delete(*, access: WorkspaceAccess, model: TrainedModel) -> None:
    """Delete `model`, its exports and suggestions; its weights and export files leave storage
    once the deletion is committed. Refused while something still needs the weights: a
    deployment serving it, a job fine-tuning from it, a pre-labelling run or an export using it."""
    access.require(Perm.WRITE)
    if not access.owns(model):
        raise ServiceError("This model belongs to another workspace.")
    # Lock the row: a deployment or a job created meanwhile waits for this to finish.
    locked = TrainedModel.objects.select_for_update().filter(pk=model.pk).first()
    if locked is None:
        return  # deleted by someone else meanwhile
    deployments = list(Deployment.objects.filter(model=locked).values_list("name", flat=True))
    if deployments:
        raise ServiceError(
            f"{locked.name} is served by the deployment{'s' if len(deployments) > 1 else ''} "
            f"{_names(deployments)}: point {'them' if len(deployments) > 1 else 'it'} at another "
            "model or delete it first."
        )
    jobs = [
        job.title
        for job in TrainingJob.objects.filter(base_model=locked)
        .exclude(state__in=FINAL_STATES)
        .only("pk", "name")
    ]
    if jobs:
        raise ServiceError(
            f"{locked.name} is the starting point of {_names(jobs)}, which "
            f"{'have' if len(jobs) > 1 else 'has'} not finished: wait for it or cancel it first."
        )
    if PrelabelRun.objects.filter(model=locked).exclude(state__in=PRELABEL_FINAL).exists():
        raise ServiceError(
            f"{locked.name} is pre-labelling a dataset: wait until that run has finished."
        )
    exports = ModelExport.objects.filter(model=locked)
    if exports.exclude(state__in=(ExportState.SUCCEEDED, ExportState.FAILED)).exists():
        raise ServiceError(f"{locked.name} is being exported: wait until the export has finished.")
    keys = [locked.weights_key, *exports.exclude(file_key="").values_list("file_key", flat=True)]
    keys = [k for k in keys if k]
    try:
        locked.delete()
    # A row added since the checks, under a lock it did not take.
    except (ProtectedError, RestrictedError):
        raise ServiceError(f"{locked.name} is still in use; try again.") from None
    # Another model can point at the same file (rows copied by hand, a restore): keep those.
    still_used = set(
        TrainedModel.objects.filter(weights_key__in=keys).values_list("weights_key", flat=True)
    )
    gone = [k for k in keys if k not in still_used]
    transaction.on_commit(lambda: _stored_files_delete(gone))
