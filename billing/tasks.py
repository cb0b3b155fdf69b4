import logging

from celery import shared_task

from billing.ledger import credits_grant_monthly
from workspaces.models import Workspace

logger = logging.getLogger(__name__)


@shared_task(
    name="billing.grant_monthly",
    acks_late=True,  # idempotent per workspace and month: safe to run twice
    soft_time_limit=600,
    time_limit=660,
)
def grant_monthly_task(**kwargs) -> int:
    """Each workspace's monthly plan credits for the current month; returns how many granted."""
    if kwargs:
        logger.warning("grant_monthly: unexpected arguments %s", sorted(kwargs))
    granted = 0
    workspaces = Workspace.objects.filter(plan__monthly_credits__gt=0).select_related("plan")
    for workspace in workspaces.iterator():
        if credits_grant_monthly(workspace) is not None:
            granted += 1
    return granted
