from datetime import timedelta

from django.db.models import QuerySet, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from billing.models import CreditAccount, EntryKind, LedgerEntry, SignupGrant


def ledger_entry_list(*, account: CreditAccount) -> QuerySet[LedgerEntry]:
    """Newest first, with each entry's job (None once the job was deleted)."""
    return (
        LedgerEntry.objects.filter(account=account)
        .select_related("job", "admin")
        .order_by("-created_at", "-id")
    )


def signup_grant_for_account(*, account: CreditAccount) -> SignupGrant | None:
    """The person's sign-up credits when they went into this account (a personal workspace's)."""
    return SignupGrant.objects.filter(entry__account=account).select_related("entry").first()


def usage_per_day(*, account: CreditAccount, days: int = 30) -> list[dict]:
    """Micro-credits captured per day over the last `days` days, oldest first, gaps as zero."""
    today = timezone.localdate()
    start = today - timedelta(days=days - 1)
    rows = (
        LedgerEntry.objects.filter(
            account=account, kind=EntryKind.CAPTURE, created_at__date__gte=start
        )
        .annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(spent=-Sum("amount"))
    )
    spent = {row["day"]: row["spent"] for row in rows}
    return [
        {"day": start + timedelta(days=i), "spent": spent.get(start + timedelta(days=i), 0)}
        for i in range(days)
    ]
