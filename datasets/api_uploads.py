"""JSON API for uploads: one whole archive or image per request, and an import's state.

Large or flaky transfers go through the resumable uploader on the dataset's upload page; this
API suits scripts: `curl -F file=@birds.zip -H "Authorization: Bearer ul_…" …/uploads`.
"""

from datetime import datetime

from django.http import HttpRequest
from ninja import File, Form, Router, Schema, Status
from ninja.files import UploadedFile

from core.errors import ServiceError
from datasets import selectors
from datasets.models import Import
from datasets.services import uploads as services
from datasets.services.ingest import import_progress
from workspaces.permissions import Perm

router = Router(tags=["uploads"])


class ImportCreated(Schema):
    import_id: int
    status: str


class ProgressOut(Schema):
    phase: str
    done: int
    total: int


class ImportOut(Schema):
    id: int
    dataset_id: int
    status: str
    filename: str
    total_size: int
    received_size: int
    progress: ProgressOut
    report: dict
    error: str
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @staticmethod
    def resolve_progress(imp: Import) -> ProgressOut:
        progress = import_progress(imp)
        return ProgressOut(
            phase=str(progress.get("phase", "")),
            done=int(progress.get("done") or 0),
            total=int(progress.get("total") or 0),
        )

    @staticmethod
    def resolve_report(imp: Import) -> dict:
        return imp.report if isinstance(imp.report, dict) else {}


@router.post("/datasets/{dataset_id}/uploads", response={201: ImportCreated})
def upload_create(
    request: HttpRequest,
    dataset_id: int,
    file: UploadedFile | None = File(None),  # noqa: B008 - django-ninja's way to declare it
    video_fps: str | None = Form(None),  # noqa: B008 - as File
):
    """Upload one archive (zip, tar, tar.gz), one image or one video as the multipart field
    `file`. `video_fps` (a form field, 0.1 to 30, default 1): the frames per second sampled from
    each video.

    The import is queued at once; follow it with `GET /imports/{import_id}`.
    """
    access, dataset = selectors.dataset_access_for_caller(
        auth=request.auth, user=request.user, pk=dataset_id
    )
    access.require(Perm.WRITE)
    if file is None:
        raise ServiceError("Send one archive or image as the multipart form field `file`.")
    imp = services.upload_store_whole(
        access=access,
        dataset=dataset,
        name=file.name or "upload",
        stream=file,
        size=file.size,
        video_fps=video_fps,
    )
    return Status(201, ImportCreated(import_id=imp.pk, status=imp.status))


@router.get("/imports/{import_id}", response=ImportOut)
def import_get(request: HttpRequest, import_id: int):
    """An import's status, progress, report (once it succeeded) and error (if it failed)."""
    access, imp = selectors.import_access_for_caller(
        auth=request.auth, user=request.user, pk=import_id
    )
    access.require(Perm.READ)
    return imp
