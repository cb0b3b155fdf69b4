"""Where trainers that cannot reach Redis (a cloud provider's machines) send their events:
`POST /api/v1/trainer/jobs/<id>/events` with the attempt's bearer token (no session, so no CSRF
either). Bodies are checked against the events' schema (training.event_schema) before anything
of them is kept; a refused body is counted on the job. The events go into the same stream the
supervising task reads; the answer tells the trainer about stop requests and fencing, and up to
which sequence number the supervisor has stored its events (`kept`): the trainer keeps each
event on its disk until then, and sends again what is not kept. An event sent again that is
already stored is ignored and counted (`resent_events`); one numbered far beyond what the
trainer sent before is refused."""

import hashlib
import hmac

import redis
from django.conf import settings
from django.db.models import F
from django.http import HttpRequest, JsonResponse
from ninja import Router

from training.event_schema import MAX_BODY_BYTES, EventRefused, events_body_parse
from training.models import FINAL_STATES, TrainingAttempt, TrainingJob
from training.process.events import STREAM_MAXLEN
from training.streams import control_key, kept_key, sent_key, stream_key, training_redis

# How far past the highest number it sent before a trainer's next event may be: it skips
# numbers only for progress it did not send while Kestrel was away (4 a second), so this covers
# a day away; a number beyond it would make every later genuine event look old.
SEQ_AHEAD_MAX = 400_000
KEY_SECONDS = 7 * 24 * 3600


def events_token(job_id: int, attempt: int) -> str:
    """The bearer token of one attempt of one job, for sending its events and nothing else:
    useless for any other job or attempt, and dead once that attempt has ended."""
    message = f"kestrel-trainer-events:{job_id}:{attempt}".encode()
    mac = hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()
    return f"{attempt}.{mac}"


def refuse(status: int, detail: str, **extra) -> JsonResponse:
    return JsonResponse({"detail": detail, **extra}, status=status)


def _token_attempt(job_id: int, token: str) -> int | None:
    """The attempt number a genuine token of this job names, or None."""
    number = token.partition(".")[0]
    if not (number.isdigit() and len(number) <= 9):
        return None
    return int(number) if hmac.compare_digest(token, events_token(job_id, int(number))) else None


def attempt_authorised(request: HttpRequest, job_id: int) -> int | JsonResponse:
    """The number of the live attempt of `job_id` whose token the request carries, or the
    refusal to answer with: 403 for a token that is not this job's, 409 once another attempt
    owns the job, 410 once the attempt or the job has ended."""
    token = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    number = _token_attempt(job_id, token)
    if number is None:
        return refuse(403, "This token is not this job's.")
    attempt = (
        TrainingAttempt.objects.filter(job_id=job_id, number=number)
        .values("ended_at", "job__state", "job__attempts")
        .first()
    )
    if attempt is None or attempt["job__state"] in FINAL_STATES:
        return refuse(410, "The job has ended.")
    if number != attempt["job__attempts"]:
        return refuse(409, "Another attempt owns this job now.", attempt=attempt["job__attempts"])
    if attempt["ended_at"] is not None:
        return refuse(410, "This attempt has ended.")
    return number


def _body(request: HttpRequest) -> bytes:
    declared = request.META.get("CONTENT_LENGTH") or "0"
    if not declared.isdigit() or int(declared) > MAX_BODY_BYTES:  # refused before it is read
        raise EventRefused(f"the body is larger than {MAX_BODY_BYTES} bytes")
    return request.body


router = Router(tags=["trainer"])


# auth=None: the per-attempt token below is the only key (no API key, no session).
@router.post("/trainer/jobs/{job_id}/events", auth=None, include_in_schema=False)
def trainer_events(request: HttpRequest, job_id: int) -> JsonResponse:
    number = attempt_authorised(request, job_id)
    if isinstance(number, JsonResponse):
        return number
    try:
        events = events_body_parse(_body(request))
    except EventRefused as e:
        # Counted where the job page shows the trainer's malformed messages; nothing of the
        # body reaches the stream.
        TrainingJob.objects.filter(pk=job_id).update(dropped_events=F("dropped_events") + 1)
        return refuse(400, f"Events refused: {e}.")
    try:
        client = training_redis()
        sent = sent_key(job_id, number)
        kept_raw, sent_raw = client.mget(kept_key(job_id), sent)
        kept, high = int(kept_raw or 0), int(sent_raw or 0)
        fresh = [event for event in events if event[0] > kept]
        limit = max(high, kept) + SEQ_AHEAD_MAX
        if fresh and max(seq for seq, _, _ in fresh) > limit:
            TrainingJob.objects.filter(pk=job_id).update(dropped_events=F("dropped_events") + 1)
            return refuse(
                400, f"Events refused: a sequence number past {limit}, far after the last sent."
            )
        pipe = client.pipeline()
        for seq, kind, data in fresh:
            fields = {
                "j": str(job_id),
                "a": str(number),
                "s": str(seq),
                "t": kind,
                "d": data.model_dump_json(),
            }
            pipe.xadd(stream_key(job_id), fields, maxlen=STREAM_MAXLEN, approximate=True)
        if fresh:
            pipe.set(sent, max(high, *(seq for seq, _, _ in fresh)), ex=KEY_SECONDS)
        pipe.get(control_key(job_id))
        control = pipe.execute()[-1]
    except redis.RedisError:
        return refuse(503, "Kestrel cannot take events right now; send them again.")
    if len(fresh) < len(events):
        TrainingJob.objects.filter(pk=job_id).update(
            resent_events=F("resent_events") + len(events) - len(fresh)
        )
    return JsonResponse(
        {
            "accepted": len(fresh),
            "ignored": len(events) - len(fresh),
            "kept": kept,
            "attempt": number,
            "control": control.decode() if control else None,
        }
    )
