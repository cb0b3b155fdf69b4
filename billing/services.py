from django.db import transaction

from billing.models import Plan

GIB = 1024**3

DEFAULT_PLANS = [
    {
        "slug": "free",
        "name": "Free",
        "max_seats": 5,
        "max_upload_bytes": 2 * GIB,
        "max_import_inflated_bytes": 8 * GIB,
        "is_default": True,
        "sort_order": 0,
    },
    {
        "slug": "pro",
        "name": "Pro",
        "max_seats": 20,
        "max_upload_bytes": 20 * GIB,
        "max_import_inflated_bytes": 80 * GIB,
        "sort_order": 1,
    },
    {
        "slug": "enterprise",
        "name": "Enterprise",
        "max_seats": 500,
        "max_upload_bytes": 200 * GIB,
        "max_import_inflated_bytes": 800 * GIB,
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
