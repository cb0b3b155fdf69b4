from datetime import timedelta

from django.db.models import Case, F, Q, QuerySet, Sum, When
from django.db.models.functions import TruncDate
from django.utils import timezone

from billing.models import CreditAccount, EntryKind, LedgerEntry
from training.models import TrainingJob


def ledger_entry_list(*, account: CreditAccount) -> QuerySet[LedgerEntry]:
    """Newest first, with each entry's job (None once the job was deleted)."""
    return (
        LedgerEntry.objects.filter(account=account)
        .select_related("job", "admin")
        .order_by("-created_at", "-id")
    )


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


def job_costs(*, account: CreditAccount, limit: int = 50) -> list[dict]:
    """Per job: captured, refunded, still held; the `limit` most recent jobs."""
    rows = (
        LedgerEntry.objects.filter(account=account, job__isnull=False)
        .values("job_id")
        .annotate(
            captured=Sum(Case(When(kind=EntryKind.CAPTURE, then=-F("amount")), default=0)),
            refunded=Sum(Case(When(kind=EntryKind.REFUND, then=F("amount")), default=0)),
            held=Sum("hold_delta"),
        )
        .filter(~Q(captured=0) | ~Q(held=0) | ~Q(refunded=0))
        .order_by("-job_id")[:limit]
    )
    jobs = TrainingJob.objects.in_bulk([row["job_id"] for row in rows])
    return [
        {**row, "job": jobs.get(row["job_id"]), "net": row["captured"] - row["refunded"]}
        for row in rows
    ]
