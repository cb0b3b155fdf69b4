"""What a remote trainer (`python -m training.process.runner --remote`, on a machine with no
database, Redis or shared disk) fetches from Kestrel over HTTPS, and where it puts its files.
Every route takes the attempt's bearer token (training.trainer_events.events_token): one job,
one attempt, dead once the attempt ends.

- `GET  /api/v1/trainer/jobs/<id>/spec`: the attempt's spec, with URLs where the local
  supervisor's spec has paths of its own machine.
- `GET  .../dataset`: the dataset version as a YOLO zip, built once per version (and subset)
  and kept in storage.
- `GET  .../weights/<model|resume>`: the starting weights, chosen from the job's own rows
  (its base model, pretrained weights of its family, its last checkpoint), never a path.
- `POST .../uploads {"name": ...}`: a URL signed for one file of this attempt, a few minutes'
  life; `PUT` the bytes there (no other header needed) and they are stored for the supervisor.
"""

import hashlib
import hmac
import json
import tempfile
import time
import zipfile
from urllib.parse import urlencode

import redis
from django.conf import settings
from django.http import FileResponse, HttpRequest, HttpResponse, JsonResponse
from ninja import Router

from core.files import stored_file_response
from core.storage import storage_delete, storage_exists, storage_put
from datasets.models import Task
from datasets.services.export import ZipSink, yolo_layout_write
from datasets.services.versions import version_manifest_load
from training.event_schema import PLOT_NAME_RE
from training.models import FINAL_STATES, TrainingAttempt, TrainingJob, WeightsSource
from training.run_files import MAX_WEIGHTS_BYTES
from training.services.materialise import manifest_subset
from training.streams import kept_key, sent_key, training_redis
from training.trainer_events import attempt_authorised, refuse

UPLOAD_SECONDS = 15 * 60  # an upload URL's life
SPEC_SECONDS = 7 * 24 * 3600


def spec_key(job_id: int, attempt: int) -> str:
    return f"training:job:{job_id}:attempt:{attempt}:spec"


def attempt_files_key(job_id: int, attempt: int, name: str) -> str:
    """Where an uploaded file of an attempt is stored, for its supervisor to take."""
    return f"training/jobs/{job_id}/attempt-{attempt}/files/{name}"


def dataset_archive_key(content_hash: str, subset: tuple[int, int] | None) -> str:
    suffix = f"-subset{subset[0]}x{subset[1]}" if subset else ""
    return f"training/datasets/{content_hash}{suffix}.zip"


def remote_spec_store(spec: dict, *, base_url: str, subset: tuple[int, int] | None) -> dict:
    """The remote trainer's spec, made from the supervisor's (paths of the worker's machine
    become URLs of this server and paths relative to the trainer's own folder), kept in Redis
    for the attempt's life."""
    job_id, attempt = spec["job_id"], spec["attempt"]
    job_url = f"{base_url.rstrip('/')}/api/v1/trainer/jobs/{job_id}"
    job = TrainingJob.objects.select_related("dataset_version__dataset").get(pk=job_id)
    classify = job.dataset_version.dataset.task == Task.CLASSIFY
    train_args = {
        k: v for k, v in spec["train_args"].items() if k not in ("data", "project", "device")
    }
    model_is_file = job.weights != WeightsSource.SCRATCH
    remote = {
        "job_id": job_id,
        "attempt": attempt,
        "task": spec["task"],
        "train_args": train_args,
        "model": None if model_is_file else spec["model"],
        "model_url": f"{job_url}/weights/model" if model_is_file else None,
        "resume_url": f"{job_url}/weights/resume" if spec.get("resume") else None,
        "dataset_url": f"{job_url}/dataset",
        "dataset_entry": "images" if classify else "data.yaml",
        "uploads_url": f"{job_url}/uploads",
        "events_url": f"{job_url}/events",
        "system_sample_seconds": spec["system_sample_seconds"],
        "spool_drain_seconds": spec["spool_drain_seconds"],
        # Silent Kestrel for this long: the attempt is given up here, so the trainer stops.
        "lease_seconds": spec["spool_drain_seconds"],
        "subset": list(subset) if subset else None,
    }
    training_redis().set(spec_key(job_id, attempt), json.dumps(remote), ex=SPEC_SECONDS)
    return remote


def _upload_signature(job_id: int, attempt: int, name: str, expires: int) -> str:
    message = f"kestrel-trainer-upload:{job_id}:{attempt}:{name}:{expires}".encode()
    return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()


def _upload_name_ok(name: str) -> bool:
    if not isinstance(name, str) or len(name) > 100:
        return False
    if name in ("best.pt", "results.csv"):  # the run's final weights and its metrics table
        return True
    if name.endswith(".pt"):
        stem = name[:-3]
        kind, _, epoch = stem.partition("-")
        return kind in ("last", "best") and epoch.isdigit() and len(epoch) <= 6
    return bool(PLOT_NAME_RE.fullmatch(name))  # a plot Ultralytics wrote into the run


router = Router(tags=["trainer"])


@router.get("/trainer/jobs/{job_id}/spec", auth=None, include_in_schema=False)
def trainer_spec(request: HttpRequest, job_id: int) -> HttpResponse:
    number = attempt_authorised(request, job_id)
    if isinstance(number, JsonResponse):
        return number
    try:
        client = training_redis()
        raw, kept, sent = client.mget(
            spec_key(job_id, number), kept_key(job_id), sent_key(job_id, number)
        )
    except redis.RedisError:
        return refuse(503, "Kestrel cannot read the spec right now; ask again.")
    if raw is None:
        return refuse(404, "This attempt has no remote spec.")
    spec = json.loads(raw)
    # Asked again within one attempt: the provider replaced a lost machine (a preempted spot
    # instance). The new trainer resumes from the last checkpoint stored, and numbers its
    # events after the old one's, so none of them is taken for a resend.
    if TrainingJob.objects.filter(pk=job_id, checkpoint_epoch__isnull=False).exists():
        spec["resume_url"] = spec["events_url"].rsplit("/", 1)[0] + "/weights/resume"
    spec["seq_from"] = max(int(kept or 0), int(sent or 0))
    return JsonResponse(spec)


@router.get("/trainer/jobs/{job_id}/dataset", auth=None, include_in_schema=False)
def trainer_dataset(request: HttpRequest, job_id: int) -> HttpResponse:
    number = attempt_authorised(request, job_id)
    if isinstance(number, JsonResponse):
        return number
    job = TrainingJob.objects.select_related("dataset_version").get(pk=job_id)
    version = job.dataset_version
    subset = _subset_of(job_id, number)
    key = dataset_archive_key(version.content_hash, subset)
    if not storage_exists(key):
        # Built once per version and subset; a second builder's copy holds the same bytes
        # and is dropped by storage_put.
        manifest = version_manifest_load(version)
        if subset:
            manifest = manifest_subset(manifest, train=subset[0], val=subset[1])
        with tempfile.TemporaryFile(suffix=".zip") as out:
            with zipfile.ZipFile(out, "w", allowZip64=True) as zf:
                yolo_layout_write(ZipSink(zf), manifest)
            out.seek(0)
            storage_put(key, out)
    return stored_file_response(key=key, filename=f"dataset-{version.content_hash[:12]}.zip")


def _subset_of(job_id: int, number: int) -> tuple[int, int] | None:
    try:
        raw = training_redis().get(spec_key(job_id, number))
    except redis.RedisError:
        return None
    subset = json.loads(raw).get("subset") if raw else None
    return tuple(subset) if subset else None


@router.get("/trainer/jobs/{job_id}/weights/{which}", auth=None, include_in_schema=False)
def trainer_weights(request: HttpRequest, job_id: int, which: str) -> HttpResponse:
    number = attempt_authorised(request, job_id)
    if isinstance(number, JsonResponse):
        return number
    job = TrainingJob.objects.select_related("base_model").get(pk=job_id)
    if which == "resume" and job.checkpoint_epoch:
        return stored_file_response(key=job.checkpoint_key, filename="resume.pt")
    if which == "model" and job.weights == WeightsSource.MODEL and job.base_model is not None:
        return stored_file_response(key=job.base_model.weights_key, filename="base.pt")
    if which == "model" and job.weights == WeightsSource.PRETRAINED:
        from training.services.arguments import pretrained_weights_find

        weights = pretrained_weights_find(job.model_family, job.model_size, job.task)
        if weights.present:  # the operator's weights folder, found by the job's own fields
            return FileResponse(open(weights.path, "rb"), as_attachment=True, filename=weights.name)
        return refuse(404, f"{weights.name} is not on this server; fetch it from Ultralytics.")
    return refuse(404, "This job has no such weights.")


@router.post("/trainer/jobs/{job_id}/uploads", auth=None, include_in_schema=False)
def trainer_upload_url(request: HttpRequest, job_id: int) -> JsonResponse:
    number = attempt_authorised(request, job_id)
    if isinstance(number, JsonResponse):
        return number
    try:
        name = json.loads(request.body or b"{}").get("name")
    except (ValueError, AttributeError):
        name = None
    if not _upload_name_ok(name):
        return refuse(400, "Upload names are last-<epoch>.pt, best-<epoch>.pt or a run's plots.")
    expires = int(time.time()) + UPLOAD_SECONDS
    query = urlencode({"exp": expires, "sig": _upload_signature(job_id, number, name, expires)})
    path = f"/api/v1/trainer/jobs/{job_id}/attempts/{number}/files/{name}?{query}"
    return JsonResponse({"url": request.build_absolute_uri(path), "expires": expires})


@router.put(
    "/trainer/jobs/{job_id}/attempts/{attempt}/files/{name}", auth=None, include_in_schema=False
)
def trainer_upload(request: HttpRequest, job_id: int, attempt: int, name: str) -> JsonResponse:
    """The signed URL is the only key (like a presigned S3 URL): one job, attempt and file
    name, until it expires, and only while that attempt is live."""
    refused = trainer_upload_refusal(
        job_id, attempt, name, request.GET.get("exp", ""), request.GET.get("sig", "")
    )
    if refused:
        return refuse(*refused)
    declared = request.META.get("CONTENT_LENGTH") or ""
    if not declared.isdigit():
        return refuse(411, "Send the file with its Content-Length.")
    if int(declared) > MAX_WEIGHTS_BYTES:
        return refuse(413, f"A file is at most {MAX_WEIGHTS_BYTES >> 20} MB.")
    key = attempt_files_key(job_id, attempt, name)
    storage_put(key, request, replace=True)
    if not _attempt_live(job_id, attempt):  # it ended while the bytes came in: none are kept
        storage_delete(key)
        return refuse(410, "This attempt has ended.")
    return JsonResponse({"stored": name})


def trainer_upload_refusal(
    job_id: int, attempt: int, name: str, expires: str, signature: str
) -> tuple[int, str] | None:
    """Why a remote trainer's upload URL is refused, as (status, reason), or None while it is
    good: signed for this job, attempt and file, not expired, its attempt the live one. The
    view and the request guard (config.body_limits, before the body is read) both ask here."""
    if not (expires.isdigit() and len(expires) <= 12 and _upload_name_ok(name)):
        return 403, "This upload URL is not valid."
    good = _upload_signature(job_id, attempt, name, int(expires))
    if not hmac.compare_digest(signature, good) or int(expires) < time.time():
        return 403, "This upload URL is not valid or has expired."
    if not _attempt_live(job_id, attempt):
        return 410, "This attempt has ended."
    return None


def _attempt_live(job_id: int, attempt: int) -> bool:
    """Whether `attempt` is the job's live attempt (an upload URL dies with its attempt). What
    it uploads is only staged for its supervisor, which inspects each checkpoint before it
    stores it (training.process.checkpoints)."""
    job = TrainingJob.objects.filter(pk=job_id).values("attempts", "state").first()
    if job is None or job["state"] in FINAL_STATES or job["attempts"] != attempt:
        return False
    return TrainingAttempt.objects.filter(
        job_id=job_id, number=attempt, ended_at__isnull=True
    ).exists()
