"""Where trainers that cannot reach Redis (a cloud provider's machines) send their events:
`POST /api/v1/trainer/jobs/<id>/events` with the attempt's bearer token (no session, so no CSRF
either). The events go into the same stream the supervising task reads; the answer tells the
trainer about stop requests and fencing."""

import hashlib
import hmac
import json

import redis
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from ninja import Router

from training.models import FINAL_STATES, TrainingJob
from training.runner import STREAM_MAXLEN
from training.supervisor import control_key, stream_key, training_redis

KINDS = {"started", "train_start", "batch", "epoch", "checkpoint", "log", "system", "final"}
KINDS |= {"train_end", "done", "error"}
MAX_EVENTS = 1000


def events_token(job_id: int, attempt: int) -> str:
    """The bearer token of one attempt of one job: useless for any other."""
    message = f"kestrel-trainer-events:{job_id}:{attempt}".encode()
    mac = hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()
    return f"{attempt}.{mac}"


def _refuse(status: int, detail: str, **extra) -> JsonResponse:
    return JsonResponse({"detail": detail, **extra}, status=status)


def _parse(body: bytes) -> list[dict] | None:
    try:
        events = json.loads(body).get("events")
    except (ValueError, AttributeError):
        return None
    if not isinstance(events, list) or len(events) > MAX_EVENTS:
        return None
    for event in events:
        if not (
            isinstance(event, dict)
            and isinstance(event.get("s"), int)
            and event.get("t") in KINDS
            and isinstance(event.get("d"), dict)
        ):
            return None
    return events


router = Router(tags=["trainer"])


# auth=None: the per-attempt token below is the only key (no API key, no session).
@router.post("/trainer/jobs/{job_id}/events", auth=None, include_in_schema=False)
def trainer_events(request: HttpRequest, job_id: int) -> JsonResponse:
    token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    attempt_text = token.partition(".")[0]
    if not attempt_text.isdigit() or not hmac.compare_digest(
        token, events_token(job_id, int(attempt_text))
    ):
        return _refuse(403, "This token is not this job's.")
    job = TrainingJob.objects.filter(pk=job_id).values("state", "attempts").first()
    if job is None:
        return _refuse(404, "There is no such job.")
    if job["state"] in FINAL_STATES:
        return _refuse(410, "The job has ended.")
    if int(attempt_text) != job["attempts"]:
        return _refuse(409, "Another attempt owns this job now.", attempt=job["attempts"])
    events = _parse(request.body)
    if events is None:
        return _refuse(400, 'Send {"events": [{"s": seq, "t": kind, "d": {...}}, ...]}.')
    try:
        client = training_redis()
        pipe = client.pipeline()
        for event in events:
            fields = {
                "j": str(job_id),
                "a": attempt_text,
                "s": str(event["s"]),
                "t": event["t"],
                "d": json.dumps(event["d"]),
            }
            pipe.xadd(stream_key(job_id), fields, maxlen=STREAM_MAXLEN, approximate=True)
        pipe.get(control_key(job_id))
        control = pipe.execute()[-1]
    except redis.RedisError:
        return _refuse(503, "Kestrel cannot take events right now; send them again.")
    return JsonResponse(
        {
            "accepted": len(events),
            "attempt": job["attempts"],
            "control": control.decode() if control else None,
        }
    )
