"""Weights an external job's client uploads: `POST /api/webhooks/models/upload` hands out a URL
signed for one file of one job (its token is random, its signature binds job, token, purpose and
expiry, as training.remote signs the remote trainer's), which takes one PUT with no auth header,
as a presigned S3 URL would. `checkpoint_saved` then names the upload by its token (never a
path) and it becomes the job's best.pt; at `training_complete` the model is made from it, pending
until a worker has loaded it with the restricted unpickler (training.services.inspection)."""

import hashlib
import hmac
import re
import secrets
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import BinaryIO

from django.conf import settings
from django.core.files.storage import default_storage
from django.db import transaction
from django.utils import timezone

from core.errors import ServiceError
from core.storage import storage_delete, storage_exists, storage_put, storage_put_file
from core.tasks import task_send_on_commit
from training.models import ExternalUpload, InspectState, TrainingJob
from training.services.jobs import job_locked
from training.services.models import ZIP_MAGIC, _megabytes, model_from_job

UPLOAD_SECONDS = 10 * 60  # an upload URL's life
_FILENAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}\.pt$")
BLOCK = 1 << 20


class RunNotFound(ServiceError):
    """No such project, job or upload for this caller: the webhook answers 404."""


class RunRefused(ServiceError):
    """A plan limit or a state that refuses the event: 403 (never 401: the client would switch
    itself off for the rest of its process)."""


class UploadForbidden(ServiceError):
    """A URL that is not one Kestrel signed, has expired, or was used already: 403."""


class UploadTooLarge(ServiceError):
    """Over the plan's limit for a weights file: 413."""


def _signature(job_id: int, token: str, expires: int) -> str:
    message = f"kestrel-external-upload:{job_id}:{token}:{expires}".encode()
    return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()


@transaction.atomic
def external_upload_create(
    *, job: TrainingJob, filename: str, size: int | None
) -> tuple[ExternalUpload, str]:
    """A single-use upload of `filename` for the job's current attempt: (row, the URL's path
    with its query)."""
    if not isinstance(filename, str) or not _FILENAME.fullmatch(filename):
        raise ServiceError("Upload a .pt file (a name of letters, digits, '.', '_' or '-').")
    plan = job.workspace.plan
    if size is not None and size > plan.max_model_upload_bytes:
        raise UploadTooLarge(_too_large(filename, plan))
    job = job_locked(job.pk)
    if job.is_final:
        raise RunRefused(f"{job.title} has ended ({job.get_state_display().lower()}).")
    token = secrets.token_urlsafe(24)
    expires = int(time.time()) + UPLOAD_SECONDS
    upload = ExternalUpload.objects.create(
        job=job,
        attempt=job.attempts,
        token=token,
        filename=filename,
        key=f"training/jobs/{job.pk}/uploads/{token}.pt",
        expires_at=timezone.now() + timedelta(seconds=UPLOAD_SECONDS),
    )
    path = f"{token}?exp={expires}&sig={_signature(job.pk, token, expires)}"
    return upload, path


def _too_large(filename: str, plan) -> str:
    return (
        f"{filename} is larger than the {plan.name} plan's limit for weights files, "
        f"{_megabytes(plan.max_model_upload_bytes)}."
    )


def external_upload_store(
    *, token: str, expires: str, signature: str, body: BinaryIO, declared: str
) -> ExternalUpload:
    """Take the PUT of a signed upload URL: once, before it expires, within the plan's limit,
    and only a torch checkpoint (a zip); anything else is refused and the job says why."""
    upload = (
        ExternalUpload.objects.select_related("job__workspace__plan").filter(token=token).first()
        if isinstance(token, str) and len(token) <= 64
        else None
    )
    if upload is None or not expires.isdigit():
        raise UploadForbidden("This upload URL is not valid.")
    good = _signature(upload.job_id, token, int(expires))
    if not hmac.compare_digest(signature, good) or int(expires) < time.time():
        raise UploadForbidden("This upload URL is not valid or has expired.")
    # Claimed first: a second PUT of the same URL, even at the same moment, is refused.
    claimed = ExternalUpload.objects.filter(pk=upload.pk, stored_at__isnull=True).update(
        stored_at=timezone.now()
    )
    if not claimed:
        raise UploadForbidden("This upload URL was used already; ask for a new one.")
    plan = upload.job.workspace.plan
    limit = plan.max_model_upload_bytes
    try:
        if declared.isdigit() and int(declared) > limit:
            raise UploadTooLarge(_too_large(upload.filename, plan))
        size, digest, head = 0, hashlib.sha256(), b""
        with tempfile.NamedTemporaryFile(suffix=".pt") as tmp:
            while block := body.read(BLOCK):
                head = head or block[:4]
                size += len(block)
                if size > limit:
                    raise UploadTooLarge(_too_large(upload.filename, plan))
                digest.update(block)
                tmp.write(block)
            tmp.flush()
            if head != ZIP_MAGIC:
                raise ServiceError(
                    f"{upload.filename} is not a PyTorch checkpoint (a .pt saved by torch.save "
                    "is a zip file); Kestrel did not keep it."
                )
            storage_put_file(upload.key, Path(tmp.name))
    except ServiceError as e:
        ExternalUpload.objects.filter(pk=upload.pk).update(error=str(e))
        TrainingJob.objects.filter(pk=upload.job_id).update(error=str(e)[:2000])
        raise
    upload.size, upload.sha256 = size, digest.hexdigest()
    upload.save(update_fields=["size", "sha256"])
    return upload


def _stored(job: TrainingJob, token) -> ExternalUpload:
    upload = (
        ExternalUpload.objects.filter(job=job, token=token, stored_at__isnull=False, error="")
        .exclude(size=0)
        .first()
        if isinstance(token, str)
        else None
    )
    if upload is None:
        raise RunNotFound("This job has no stored upload of that name.")
    return upload


@transaction.atomic
def external_checkpoint_saved(*, job: TrainingJob, token) -> ExternalUpload:
    """The client says its upload is complete: it becomes the job's best.pt (the one the model
    is made from at the end). Said twice: the same answer."""
    job = job_locked(job.pk)
    upload = _stored(job, token)
    if upload.promoted_at is None:
        if upload.key != job.best_key and storage_exists(upload.key):
            with default_storage.open(upload.key, "rb") as f:
                storage_put(job.best_key, f, replace=True)
            transaction.on_commit(lambda key=upload.key: storage_delete(key))
        upload.key, upload.promoted_at = job.best_key, timezone.now()
        upload.save(update_fields=["key", "promoted_at"])
        job.artifacts = {**job.artifacts, "best.pt": job.best_key}
        job.save(update_fields=["artifacts", "updated_at"])
    return upload


def upload_model_make(*, job: TrainingJob, token, names: list, metrics: dict) -> str:
    """The job's model from its uploaded best.pt (named by `token`, or the attempt's latest
    stored upload when checkpoint_saved never arrived), pending inspection; the job's error
    when there is none ("" when it was made). In the caller's transaction, the job locked."""
    try:
        upload = external_checkpoint_saved(job=job, token=token)
    except RunNotFound:
        fallback = (
            ExternalUpload.objects.filter(job=job, stored_at__isnull=False, error="")
            .exclude(size=0)
            .order_by("-stored_at", "-pk")
            .first()
        )
        if fallback is None:
            failed = ExternalUpload.objects.filter(job=job).exclude(error="").last()
            if failed is not None:
                return failed.error[:2000]
            return "No weights reached Kestrel (the client's upload failed or never ran)."
        upload = external_checkpoint_saved(job=job, token=fallback.token)
    job.refresh_from_db(fields=["artifacts"])
    with default_storage.open(upload.key, "rb") as best:
        model = model_from_job(job=job, best=best, names=names, metrics=metrics)
    # Loaded by a worker with the restricted unpickler before anything uses it.
    model.inspect_state, model.inspect_error, model.inspect_attempts = InspectState.PENDING, "", 0
    model.save(update_fields=["inspect_state", "inspect_error", "inspect_attempts"])
    task_send_on_commit("training.model_inspect", model.pk)
    return ""
