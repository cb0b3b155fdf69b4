from django.db import transaction

from billing.models import Plan

DEFAULT_PLANS = [
    {"slug": "free", "name": "Free", "max_seats": 5, "is_default": True, "sort_order": 0},
    {"slug": "pro", "name": "Pro", "max_seats": 20, "is_default": False, "sort_order": 1},
    {"slug": "enterprise", "name": "Enterprise", "max_seats": 500, "sort_order": 2},
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
