"""Dedicated endpoints on a GPU SkyPilot rents: a SkyServe service running Kestrel's own model
server (`python -m deploy.inference`, the code this machine runs), which verifies calls with a
secret bound to that endpoint alone, and fetches its weights when it starts with a short-lived
token it mints with that secret (deploy/weights_fetch.py; checked by `endpoint_for_weights`).

The beat's check (deploy.supervisor) polls SkyServe and copies into the row what a web process
needs to route (the load balancer's address) and what the page shows (replicas, health, the tail
of the log, replacements); replica time is metered per ready second, and an endpoint whose
replica cannot start ends failed with SkyPilot's reason and is torn down."""

import hashlib
import hmac
import logging
import secrets
import shlex
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from billing.ledger import InsufficientCredits, account_for, credits_format, credits_spend
from core.money import per_hour_to_micro
from deploy import skyserve
from deploy.inference.tokens import inference_token_refusal
from deploy.install import install_mark
from deploy.models import Deployment, DeploymentState, Placement
from deploy.weights_fetch import ACTION as WEIGHTS_ACTION
from training.models import TrainedModel
from training.platform_files import weights_filename
from training.providers.base import ProviderError
from training.providers.skypilot import resources_for, type_options

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
SERVICE_PREFIX = "kestrel-ep-"
PORT = 8080  # the model server's port on the replica; SkyServe's load balancer is in front
# The most seconds ahead the expiry of a replica's token for its weights may lie: the replica
# mints them for 5 minutes (deploy/weights_fetch.py), and a token that lasts longer is refused.
WEIGHTS_TOKEN_LONGEST = 10 * 60
READY_PROBE_DELAY_SECONDS = 1200  # installing Kestrel and loading the model on a new machine
# A replica that served before and died: how long SkyServe has to bring a replacement up
# before the endpoint is given up as failed.
REPLACE_PATIENCE = timedelta(minutes=20)
# The replica time a check makes sure the credits cover before the next check: beat's 30 s
# (deploy-deployments-check) and half again for a late one. An endpoint whose workspace cannot
# pay that much more is stopped now, so it never runs on credits the workspace does not have.
CREDITS_AHEAD_SECONDS = 45
LIVE = {"PENDING", "PROVISIONING", "STARTING", "READY", "NOT_READY"}


def service_name(deployment: Deployment) -> str:
    """SkyServe's name: lower-case letters, digits and dashes, starting with a letter; the
    install's mark in it, so two installs on one SkyPilot API server never share one."""

    return f"{SERVICE_PREFIX}{install_mark()[:6]}-{deployment.slug[-40:]}".rstrip("-")


def endpoint_secret(deployment: Deployment) -> str:
    """The secret the endpoint's model server verifies tokens with: derived from the install's
    INFERENCE_TOKEN for this endpoint only, so the rented machine holds nothing that opens the
    shared model server or another endpoint."""
    return hmac.new(
        settings.INFERENCE_TOKEN.encode(),
        f"kestrel-endpoint:deployment-{deployment.slug}".encode(),
        hashlib.sha256,
    ).hexdigest()


def weights_source(deployment: Deployment) -> str:
    """Where a replica fetches its weights (with a token of its own, never in the URL): the
    address rented machines reach Kestrel at (TRAINING_EVENTS_URL, as the remote trainer's)."""
    path = reverse("endpoints:deployment_weights", kwargs={"slug": deployment.slug})
    base = (settings.TRAINING_EVENTS_URL or settings.SITE_URL).rstrip("/")
    return f"{base}{path}"


def endpoint_for_weights(*, slug: str, token: str) -> Deployment | None:
    """The rented endpoint whose replica presents `token` for its weights, with its model; None
    when the token is not a replica's of this endpoint for its weights (another endpoint's,
    another call's, expired, valid for too long, altered), or the endpoint is not one that
    should be running on rented GPUs (stopped, failed, local, deleted)."""
    deployment = (
        Deployment.objects.select_related("model")
        .filter(
            slug=slug,
            placement=Placement.SKYSERVE,
            desired_running=True,
            state__in=(DeploymentState.STARTING, DeploymentState.RUNNING),
        )
        .filter(model__in=TrainedModel.objects.usable().exclude(weights_key=""))
        .first()
    )
    if deployment is None:
        return None
    refusal = inference_token_refusal(
        token,
        secret=endpoint_secret(deployment),
        server=deployment.server_name,
        action=WEIGHTS_ACTION,
        longest=WEIGHTS_TOKEN_LONGEST,
    )
    if refusal is not None:
        logger.info("weights of endpoint %s refused: %s", slug, refusal)
        return None
    return deployment


# Top-level names .skyignore keeps off a rented machine (the install's data and secrets).
_NEVER_SYNCED = {"var", "media", ".env", ".venv", ".git"}


def workdir_check() -> None:
    """Refuse to sync this folder to a rented machine while the install's data or secrets lie in
    it outside what .skyignore excludes (KESTREL_VAR_DIR or MEDIA_ROOT moved inside it)."""
    if not (ROOT / ".skyignore").is_file():
        raise ProviderError(
            "Kestrel's .skyignore is missing: an endpoint is not rented without it, as SkyPilot "
            "would upload the install's data with its code."
        )
    for name, folder in (
        ("KESTREL_VAR_DIR", settings.VAR_DIR),
        ("MEDIA_ROOT", settings.MEDIA_ROOT),
    ):
        try:
            inside = Path(folder).resolve().relative_to(ROOT)
        except ValueError:
            continue  # outside the code's folder: never synced
        if not inside.parts or inside.parts[0] not in _NEVER_SYNCED:
            raise ProviderError(
                f"{name} ({folder}) lies inside Kestrel's code folder, which SkyPilot uploads to "
                "the rented machine; move it out, or under var/."
            )


def service_task(deployment: Deployment) -> dict:
    """The SkyServe service of a deployment. The endpoint's secret is a SkyPilot secret
    (redacted in its views), read from the environment: never in `run`. Nothing in it expires,
    as SkyServe starts replacement replicas with it at any time."""
    from deploy.predict import model_file
    from deploy.selectors import models_for_predict

    if deployment.gpu_type is None:
        raise ProviderError("The endpoint has no GPU type to rent.")
    workdir_check()
    resources = resources_for(type_options(deployment.gpu_type.slug))
    resources.pop("job_recovery", None)  # a managed job's; SkyServe replaces replicas itself
    resources["ports"] = PORT
    model = deployment.model
    # Preloaded under the key the web's calls name (deploy.predict.model_file).
    _, key = model_file(models_for_predict().get(pk=model.pk))
    weights = f"$HOME/kestrel-weights/{weights_filename(model)}"
    server = [
        # Every interface of the replica: SkyServe's load balancer reaches it from outside.
        "python3", "-m", "deploy.inference", "--host", "0.0.0.0", "--port", str(PORT),  # noqa: S104
        "--name", deployment.server_name, "--model-key", key,
        "--model-task", model.task, "--model-name", model.name,
    ]  # fmt: skip
    return {
        "name": service_name(deployment),
        "workdir": str(ROOT),  # Kestrel's own code, synced by SkyPilot (.gitignore applies)
        "resources": resources,
        "service": {
            "readiness_probe": {
                "path": "/health",
                "initial_delay_seconds": READY_PROBE_DELAY_SECONDS,
            },
            "replicas": 1,
        },
        "setup": "set -e\npython3 -m pip install --quiet -e .\n",
        "run": (
            "set -e\n"
            f'mkdir -p "$HOME/kestrel-weights"\nexport WEIGHTS="{weights}"\n'
            'python3 -m deploy.weights_fetch --to "$WEIGHTS"\n'
            f'exec {shlex.join(server)} --model-path "$WEIGHTS"\n'
        ),
        "envs": {
            "PYTHONUNBUFFERED": "1",
            "YOLO_AUTOINSTALL": "0",
            "YOLO_OFFLINE": "1",
            "DJANGO_SETTINGS_MODULE": "config.settings",
            # Not secrets: the replica's own token for its weights is the key (weights_fetch).
            "KESTREL_WEIGHTS_SOURCE": weights_source(deployment),
            "KESTREL_ENDPOINT": deployment.server_name,
        },
        "secrets": {
            "INFERENCE_TOKEN": endpoint_secret(deployment),
            # The model server reads settings only; its own key, never the install's.
            "SECRET_KEY": secrets.token_hex(32),
        },
    }


def _update(deployment: Deployment, **fields) -> Deployment:
    Deployment.objects.filter(pk=deployment.pk).update(**fields)
    deployment.refresh_from_db()
    return deployment


def owed(deployment: Deployment) -> int:
    """Micro-credits of the replica time metered so far (0 when its GPU type is free)."""
    if deployment.gpu_type is None or deployment.gpu_type.hourly_price <= 0:
        return 0
    return per_hour_to_micro(deployment.replica_seconds, deployment.gpu_type.hourly_price)


def remote_start(deployment: Deployment) -> Deployment:
    """Ask SkyServe for the service; the next checks follow its replicas."""
    name = service_name(deployment)
    try:
        endpoint = skyserve.up(service_task(deployment), name)
    except ProviderError as exc:
        return _update(
            deployment,
            state=DeploymentState.FAILED,
            desired_running=False,
            last_error=f"The endpoint could not be started: {exc}",
        )
    return _update(
        deployment,
        service_name=name,
        state=DeploymentState.STARTING,
        url="",
        replicas=[],
        started_at=timezone.now(),
        metered_at=None,
        last_error="",
        log=f"SkyServe service {name} requested{f' at {endpoint}' if endpoint else ''}.",
    )


def remote_stop(deployment: Deployment, *, state=DeploymentState.STOPPED, **fields) -> Deployment:
    """Tear the service down; the replica time up to now is metered only if it was ready."""
    if deployment.service_name:
        try:
            skyserve.down([deployment.service_name])
        except ProviderError as exc:
            # Kept, and no longer wanted: the next check tries again (a service left up
            # costs money).
            logger.warning("tearing down %s: %s", deployment.service_name, exc)
            wanted = fields.get("desired_running", deployment.desired_running)
            return _update(deployment, last_error=str(exc), desired_running=wanted)
    deployment = _meter(deployment, ready=0, now=timezone.now())
    _charge(deployment)
    return _update(
        deployment, state=state, service_name="", url="", replicas=[], metered_at=None, **fields
    )


def _meter(deployment: Deployment, *, ready: int, now) -> Deployment:
    """Count the replica seconds since the last check of the replicas ready both then (kept on
    the row) and now, and start the next stretch at `now` only if one is ready now: a replica
    that died, or never became ready, is not billed past the last check it was ready at."""
    seconds = deployment.replica_seconds
    if deployment.metered_at is not None:
        was_ready = sum(1 for r in deployment.replicas if r.get("status") == "READY")
        both = min(was_ready, ready)
        seconds += max(0.0, (now - deployment.metered_at).total_seconds()) * both
    return _update(
        deployment,
        replica_seconds=seconds,
        metered_at=now if ready else None,
        **({"last_ready_at": now} if ready else {}),
    )


def _replacements(deployment: Deployment, replicas: tuple[skyserve.Replica, ...]) -> list[str]:
    """What the page says of each replica SkyServe launched in place of one that failed, was
    preempted or vanished (one replica is asked for: a new id is a replacement)."""
    seen = {r["id"]: r["status"] for r in deployment.replicas}
    if not seen:
        return []
    now = {r.replica_id: r.status for r in replicas}
    gone = {i: now.get(i, "GONE") for i in seen if now.get(i, "GONE") not in LIVE}
    why = ", ".join(
        f"replica {i} ({skyserve.REPLICA_REASONS.get(status, 'no longer listed')})"
        for i, status in gone.items()
    )
    return [
        f"SkyServe replaced {why or 'a replica'} with replica {i}" for i in now if i not in seen
    ]


def remote_check(deployment: Deployment) -> Deployment:
    """Copy SkyServe's view of the service into the row; meter; give up on one that cannot
    start; stop one whose workspace has no credits left for it."""
    if not deployment.desired_running:
        return remote_stop(deployment)
    if not deployment.service_name:
        return remote_start(deployment)
    try:
        service = skyserve.status([deployment.service_name]).get(deployment.service_name)
    except ProviderError as exc:
        return _update(deployment, last_error=str(exc), checked_at=timezone.now())
    now = timezone.now()
    if service is None:  # torn down behind Kestrel's back: start it again
        deployment = _meter(deployment, ready=0, now=now)
        return remote_start(deployment)
    ready = [r for r in service.replicas if r.ready]
    live = [r for r in service.replicas if r.status in LIVE]
    failed = [r for r in service.replicas if r.failed or r.status == "PREEMPTED"]
    notes = _replacements(deployment, service.replicas)
    deployment = _meter(deployment, ready=len(ready), now=now)
    fields = {
        "replicas": [r.as_row() for r in service.replicas],
        "checked_at": now,
        "url": service.url if ready else "",
        "replaced": deployment.replaced + len(notes),
    }
    if notes:
        fields["last_error"] = "; ".join(notes) + f" ({now:%Y-%m-%d %H:%M:%S} UTC)."
    if failed:
        fields["log"] = skyserve.log_tail(deployment.service_name, failed[-1].replica_id)
    deployment = _update(deployment, **fields)
    if ready:
        if deployment.state != DeploymentState.RUNNING:
            deployment = _update(deployment, state=DeploymentState.RUNNING)
        return _credits_check(deployment)
    never_ready = deployment.last_ready_at is None
    waited_since = deployment.last_ready_at or deployment.started_at or now
    if failed and not live and (never_ready or now - waited_since > REPLACE_PATIENCE):
        reason = "; ".join(
            f"replica {r.replica_id}: {skyserve.REPLICA_REASONS.get(r.status, r.status)}"
            for r in failed
        )
        tail = " / ".join(deployment.log.strip().splitlines()[-3:])
        return remote_stop(
            deployment,
            state=DeploymentState.FAILED,
            desired_running=False,
            last_error=f"SkyPilot could not start the endpoint ({service.status}): {reason}"
            + (f". Its log: {tail}" if tail else "."),
        )
    if deployment.state == DeploymentState.RUNNING:
        deployment = _update(deployment, state=DeploymentState.STARTING)
    return deployment


def _charge(deployment: Deployment) -> bool:
    """Capture the metered replica time not charged yet, in the check's transaction (the row
    is locked); False when the workspace's credits did not cover it (what they did is taken)."""
    due = owed(deployment) - deployment.charged
    if due <= 0:
        return True
    gpu = deployment.gpu_type.name if deployment.gpu_type else "GPU"
    reason = f"Endpoint {deployment.name} ({deployment.slug}): replica time on {gpu}"
    try:
        credits_spend(deployment.workspace, due, reason=reason)
    except InsufficientCredits:
        due = max(0, account_for(deployment.workspace).available)
        if due:
            credits_spend(deployment.workspace, due, reason=reason)
        _update(deployment, charged=deployment.charged + due)
        return False
    _update(deployment, charged=deployment.charged + due)
    return True


def _credits_check(deployment: Deployment) -> Deployment:
    if not _charge(deployment):
        return remote_stop(
            deployment,
            desired_running=False,
            last_error="Stopped: the workspace ran out of credits for its replica time.",
        )
    ready = sum(1 for r in deployment.replicas if r.get("status") == "READY")
    price = deployment.gpu_type.hourly_price if deployment.gpu_type else 0
    ahead = per_hour_to_micro(CREDITS_AHEAD_SECONDS * ready, price) if price > 0 else 0
    available = account_for(deployment.workspace).available
    if ahead and available < ahead:
        return remote_stop(
            deployment,
            desired_running=False,
            last_error=(
                f"Stopped: the workspace's credits ({credits_format(max(0, available))}) would "
                f"not cover the replica time until the next check ({CREDITS_AHEAD_SECONDS} s on "
                f"{deployment.gpu_type.name}: {credits_format(ahead)}). Add credits and start "
                "it again."
            ),
        )
    return deployment


def services_stray_down() -> int:
    """Tear down this install's SkyServe services no row names (the workspace was deleted):
    nothing rented outlives its endpoint. Asked only where SkyPilot serves endpoints."""
    if "skypilot" not in settings.TRAINING_PROVIDERS or not skyserve.installed():
        return 0

    prefix = f"{SERVICE_PREFIX}{install_mark()[:6]}-"
    try:
        names = [name for name in skyserve.status(None) if name.startswith(prefix)]
    except ProviderError as exc:
        logger.warning("listing SkyServe services: %s", exc)
        return 0
    known = set(
        Deployment.objects.filter(service_name__in=names).values_list("service_name", flat=True)
    )
    stray = [name for name in names if name not in known]
    if stray:
        try:
            skyserve.down(stray)
        except ProviderError as exc:
            logger.warning("tearing down %s: %s", stray, exc)
            return 0
    return len(stray)
