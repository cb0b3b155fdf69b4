import logging

from celery import shared_task

from workspaces.services.invitations import invitations_purge_expired

logger = logging.getLogger(__name__)


@shared_task(
    name="workspaces.invitations_purge_expired",
    acks_late=True,  # short and idempotent: safe to run twice
    soft_time_limit=60,
    time_limit=120,
)
def invitations_purge_expired_task(**kwargs) -> int:
    if kwargs:
        logger.warning("invitations_purge_expired: unexpected arguments %s", sorted(kwargs))
    deleted = invitations_purge_expired()
    logger.info("invitations_purge_expired: deleted %d expired invitations", deleted)
    return deleted
