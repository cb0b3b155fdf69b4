"""Deleting a trained model, with what it leaves in storage."""

import logging

from django.core.files.storage import default_storage
from django.db import transaction
from django.db.models import ProtectedError, RestrictedError

from annotation.models import PRELABEL_FINAL, PrelabelRun
from core.errors import ServiceError
from deploy.models import Deployment, ExportState, ModelExport
from training.models import FINAL_STATES, TrainedModel, TrainingJob
from workspaces.permissions import Perm
from workspaces.selectors import WorkspaceAccess

logger = logging.getLogger(__name__)


def _names(values: list[str], limit: int = 3) -> str:
    shown = ", ".join(f"“{v}”" for v in values[:limit])
    return shown + (f" and {len(values) - limit} more" if len(values) > limit else "")


def _stored_files_delete(keys: list[str]) -> None:
    for key in keys:
        try:
            default_storage.delete(key)
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
