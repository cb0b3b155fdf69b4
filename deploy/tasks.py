"""Deploy background work: ids in, load, guard, call the service."""

import logging

from celery import shared_task

from deploy.exports import EXPORT_TIMEOUT_SECONDS, export_run_once

logger = logging.getLogger(__name__)


def _log_unexpected(task: str, kwargs: dict) -> None:
    if kwargs:
        logger.warning("%s: unexpected arguments %s", task, sorted(kwargs))


@shared_task(name="deploy.deployment_reconcile", soft_time_limit=150, time_limit=180)
def deployment_reconcile(deployment_id: int, **kwargs) -> None:
    _log_unexpected("deploy.deployment_reconcile", kwargs)
    from deploy.supervisor import deployment_reconcile as reconcile

    reconcile(deployment_id)


@shared_task(name="deploy.deployments_check", soft_time_limit=600, time_limit=660)
def deployments_check(**kwargs) -> int:
    _log_unexpected("deploy.deployments_check", kwargs)
    from deploy.supervisor import deployments_check as check

    return check()


@shared_task(name="deploy.usage_flush", soft_time_limit=120, time_limit=150)
def usage_flush(**kwargs) -> int:
    _log_unexpected("deploy.usage_flush", kwargs)
    from deploy.usage import usage_flush as flush

    return flush()


@shared_task(
    name="deploy.export_run",
    soft_time_limit=EXPORT_TIMEOUT_SECONDS + 5 * 60,
    time_limit=EXPORT_TIMEOUT_SECONDS + 6 * 60,
)
def export_run(export_id: int, **kwargs) -> None:
    """Run one export; one already taken (or finished) is left alone."""
    _log_unexpected("deploy.export_run", kwargs)
    export_run_once(export_id)


@shared_task(name="deploy.collection_store", soft_time_limit=120, time_limit=150)
def collection_store(
    rule_id: int,
    token: str,
    model_id: int,
    deployment_id: int | None,
    confidence: float,
    at: str,
    **kwargs,
) -> int | None:
    """Store one image a deployment's collection rule selected (its bytes wait in Redis under
    `token`); the CollectedImage's id, or None when nothing was stored."""
    _log_unexpected("deploy.collection_store", kwargs)
    from deploy.collection.store import collected_image_store

    collected = collected_image_store(
        rule_id=rule_id,
        token=token,
        model_id=model_id,
        deployment_id=deployment_id,
        confidence=confidence,
        at=at,
    )
    return collected.pk if collected else None
