"""The plans a workspace can be on: the standard ones, seeded once (an admin edits them after),
and the default a new workspace gets."""

from django.db import transaction

from billing.models import Plan
from core.money import MICRO

GIB = 1024**3
GB = 1000**3

DEFAULT_PLANS = [
    {
        "slug": "free",
        "name": "Free",
        "max_seats": 5,
        "max_upload_bytes": 2 * GIB,
        "max_import_inflated_bytes": 8 * GIB,
        "signup_credits": 5 * MICRO,
        "monthly_credits": 0,
        "max_concurrent_jobs": 1,
        "storage_quota_bytes": 10 * GB,
        "max_deployments": 1,
        "predict_requests_per_minute": 20,
        "max_model_upload_bytes": 200 * 1000**2,
        "max_video_frames": 3_000,
        "is_default": True,
        "sort_order": 0,
    },
    {
        "slug": "pro",
        "name": "Pro",
        "max_seats": 20,
        "max_upload_bytes": 20 * GIB,
        "max_import_inflated_bytes": 80 * GIB,
        "signup_credits": 20 * MICRO,
        "monthly_credits": 20 * MICRO,
        "max_concurrent_jobs": 4,
        "storage_quota_bytes": 200 * GB,
        "max_deployments": 5,
        "predict_requests_per_minute": 120,
        "max_model_upload_bytes": 2 * GB,
        "max_video_frames": 20_000,
        "sort_order": 1,
    },
    {
        "slug": "enterprise",
        "name": "Enterprise",
        "max_seats": 500,
        "max_upload_bytes": 200 * GIB,
        "max_import_inflated_bytes": 800 * GIB,
        "signup_credits": 100 * MICRO,
        "monthly_credits": 500 * MICRO,
        "max_concurrent_jobs": 20,
        "storage_quota_bytes": 5000 * GB,
        "max_deployments": 50,
        "predict_requests_per_minute": 600,
        "max_model_upload_bytes": 10 * GB,
        "max_video_frames": 100_000,
        "sort_order": 2,
    },
]


@transaction.atomic
def plans_seed() -> list[Plan]:
    """Create the standard plans if missing; never overwrite an admin's edits."""
    plans = []
    for spec in DEFAULT_PLANS:
        plan, _ = Plan.objects.get_or_create(slug=spec["slug"], defaults=spec)
        plans.append(plan)
    return plans


def plan_default() -> Plan:
    plan = Plan.objects.filter(is_default=True).first()
    if plan is None:
        plan = next(p for p in plans_seed() if p.is_default)
    return plan
