"""Weights an external job's client uploads: `POST /api/webhooks/models/upload` hands out a URL
signed for one file of one attempt of one job (its token is random, its signature binds job,
attempt, token, purpose and expiry, as training.remote signs the remote trainer's), which takes
one PUT with no auth header, as a presigned S3 URL would, and only while that attempt is the
job's live one: an upload URL dies with its attempt, and nothing of an ended run changes.
`checkpoint_saved` then names the upload by its token (never a path) and it becomes the job's
best.pt; at `training_complete` the model is made from it, pending until a worker has loaded it
with the restricted unpickler (training.services.inspection). Only then do the job's files list
it; an upload is never served itself."""

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
from core.storage import storage_delete, storage_put_file
from core.tasks import task_send_on_commit
from training.models import (
    FINAL_STATES,
    ExternalUpload,
    InspectState,
    TrainingAttempt,
    TrainingJob,
)
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


class RunEnded(ServiceError):
    """The run has ended, or the attempt an upload URL or upload was made for has: 410. A
    finished run's files and the model made from them do not change."""


class UploadForbidden(ServiceError):
    """A URL that is not one Kestrel signed, has expired, or was used already: 403."""


class UploadTooLarge(ServiceError):
    """Over the plan's limit for a weights file: 413."""


def _signature(job_id: int, attempt: int, token: str, expires: int) -> str:
    message = f"kestrel-external-upload:{job_id}:{attempt}:{token}:{expires}".encode()
    return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()


def run_ended_message(job: TrainingJob) -> str:
    return (
        f"{job.title} has ended ({job.get_state_display().lower()}); nothing more is kept for "
        "it. Start a new run, or resume this one with resume=True."
    )


def upload_attempt_ended(job: TrainingJob, attempt: int) -> str:
    """Why the job's attempt `attempt` takes nothing more, or "" while it is the live one."""
    if job.is_final:
        return run_ended_message(job)
    live = TrainingAttempt.objects.filter(job=job, number=attempt, ended_at__isnull=True)
    if attempt != job.attempts or not live.exists():
        return (
            f"This upload URL was made for attempt {attempt} of {job.title}, which has ended; "
            "ask for a new one."
        )
    return ""


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
        raise RunEnded(run_ended_message(job))
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
    signature = _signature(job.pk, upload.attempt, token, expires)
    return upload, f"{token}?exp={expires}&sig={signature}"


def _too_large(filename: str, plan) -> str:
    return (
        f"{filename} is larger than the {plan.name} plan's limit for weights files, "
        f"{_megabytes(plan.max_model_upload_bytes)}."
    )


def external_upload_store(
    *, token: str, expires: str, signature: str, body: BinaryIO, declared: str
) -> ExternalUpload:
    """Take the PUT of a signed upload URL: once, before it expires, while its attempt is the
    job's live one, within the plan's limit, and only a torch checkpoint (a zip); anything else
    is refused and the job says why. A run that ended while the bytes came in keeps none of
    them."""
    upload = (
        ExternalUpload.objects.select_related("job__workspace__plan").filter(token=token).first()
        if isinstance(token, str) and len(token) <= 64
        else None
    )
    if upload is None or not expires.isdigit():
        raise UploadForbidden("This upload URL is not valid.")
    good = _signature(upload.job_id, upload.attempt, token, int(expires))
    if not hmac.compare_digest(signature, good) or int(expires) < time.time():
        raise UploadForbidden("This upload URL is not valid or has expired.")
    if ended := upload_attempt_ended(upload.job, upload.attempt):
        raise RunEnded(ended)  # before a byte is read
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
        if ended := _upload_record(upload, size=size, sha256=digest.hexdigest()):
            storage_delete(upload.key)
            raise RunEnded(ended)
    except RunEnded as e:
        ExternalUpload.objects.filter(pk=upload.pk).update(error=str(e))
        raise
    except ServiceError as e:
        ExternalUpload.objects.filter(pk=upload.pk).update(error=str(e))
        live = TrainingJob.objects.filter(pk=upload.job_id).exclude(state__in=FINAL_STATES)
        live.update(error=str(e)[:2000])  # an ended run's say stays as it ended
        raise
    return upload


@transaction.atomic
def _upload_record(upload: ExternalUpload, *, size: int, sha256: str) -> str:
    """The stored bytes become the upload's if its attempt is still live now that they are in
    (the job's row locked, as training_complete locks it); else why not, and nothing is
    recorded (training_complete never takes an upload of no size)."""
    job = job_locked(upload.job_id)
    if ended := upload_attempt_ended(job, upload.attempt):
        return ended
    upload.size, upload.sha256 = size, sha256
    upload.save(update_fields=["size", "sha256"])
    return ""


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
    is made from at the end), if the run and the attempt that made it go on. Listed among the
    job's files only once its model passed inspection. Said twice: the same answer."""
    job = job_locked(job.pk)
    if job.is_final:
        raise RunEnded(run_ended_message(job))
    upload = _stored(job, token)
    if ended := upload_attempt_ended(job, upload.attempt):
        raise RunEnded(ended)
    if upload.promoted_at is None:
        upload.promoted_at = timezone.now()
        upload.save(update_fields=["promoted_at"])
    return upload


def external_uploads_discard(job: TrainingJob) -> None:
    """Once the run's model is made, or its attempt is lost, no upload of it is needed: their
    files go (no URL of an ended attempt can add one back). In the caller's transaction."""
    keys = list(
        ExternalUpload.objects.filter(job=job, stored_at__isnull=False).values_list(
            "key", flat=True
        )
    )

    def discard() -> None:
        for key in keys:
            storage_delete(key)

    transaction.on_commit(discard)


def upload_model_make(*, job: TrainingJob, token, names: list, metrics: dict) -> str:
    """The job's model from its uploaded best.pt (named by `token`, or the attempt's latest
    stored upload when checkpoint_saved never arrived), pending inspection; the job's error
    when there is none ("" when it was made). In the caller's transaction, the job locked."""
    try:
        upload = external_checkpoint_saved(job=job, token=token)
    except (RunNotFound, RunEnded):
        fallback = (
            ExternalUpload.objects.filter(
                job=job, attempt=job.attempts, stored_at__isnull=False, error=""
            )
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
    with default_storage.open(upload.key, "rb") as best:
        model = model_from_job(job=job, best=best, names=names, metrics=metrics)
    # Loaded by a worker with the restricted unpickler before anything uses it; until then the
    # job's files do not list it (training.services.inspection).
    model.inspect_state, model.inspect_error, model.inspect_attempts = InspectState.PENDING, "", 0
    model.save(update_fields=["inspect_state", "inspect_error", "inspect_attempts"])
    external_uploads_discard(job)
    task_send_on_commit("training.model_inspect", model.pk)
    return ""
