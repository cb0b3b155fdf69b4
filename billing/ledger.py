"""The credit ledger: every change of a workspace's credits, one append-only entry each.

All amounts are integer micro-credits (core.money.MICRO per credit). Each function is one
transaction that locks the account row (SELECT ... FOR UPDATE), so concurrent holds and captures
queue up behind each other, and changes `balance`/`held` only together with the entry that
explains it. Sign conventions are on billing.models.EntryKind.

A job's open hold is the sum of its entries' `hold_delta`: holds and extensions add, captures
(the part taken from the hold) and releases subtract.
"""

from datetime import date

from django.db import IntegrityError, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from billing.models import CreditAccount, EntryKind, LedgerEntry, SignupGrant
from core.errors import ServiceError
from core.money import MICRO
from workspaces.models import User, Workspace

MAX_AMOUNT = 10**15  # a billion credits: anything larger is a bug, not a purchase


class InsufficientCredits(ServiceError):
    """The workspace's available credits do not cover what was asked."""


def credits_format(amount: int) -> str:
    """Micro-credits as credits with two decimals (more when they matter)."""
    sign = "-" if amount < 0 else ""
    whole, micro = divmod(abs(amount), MICRO)
    digits = f"{micro:06d}".rstrip("0").ljust(2, "0")
    return f"{sign}{whole:,}.{digits}"


def credits_format_rounded(amount: int) -> str:
    """Micro-credits to the cent, for a figure read at a glance (a job's header): 885326 →
    "0.89"; "< 0.01" for less than a cent but more than nothing."""
    cents = (abs(amount) + 5_000) // 10_000
    if cents == 0 and amount != 0:
        return "< 0.01" if amount > 0 else "> -0.01"
    sign = "-" if amount < 0 else ""
    return f"{sign}{cents // 100:,}.{cents % 100:02d}"


def _amount_check(amount: int) -> None:
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise ServiceError("Amounts are whole micro-credits.")
    if amount <= 0:
        raise ServiceError("The amount must be more than zero.")
    if amount > MAX_AMOUNT:
        raise ServiceError("The amount is too large.")


def _reason_check(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise ServiceError("Give a reason.")
    return reason


def _short(account: CreditAccount, amount: int) -> InsufficientCredits:
    return InsufficientCredits(
        f"Not enough credits: {credits_format(amount)} needed, "
        f"{credits_format(account.available)} available."
    )


@transaction.atomic
def account_open(workspace: Workspace) -> CreditAccount:
    """Open a new workspace's account, empty: sign-up credits go to people, once each
    (signup_credits_grant), and a team has what an administrator grants or someone buys. The
    account as it is when it is open already. Workspace creation calls this in its own
    transaction."""
    account, _ = CreditAccount.objects.get_or_create(
        workspace=workspace, defaults={"workspace_slug": workspace.slug}
    )
    return account


@transaction.atomic
def _account_open_as_before(workspace: Workspace) -> CreditAccount:
    """A workspace made without the workspace services (before accounts opened with
    workspaces, or by a test's factory) opens its account as such workspaces always did: with
    the plan's signup credits, dated when the workspace was created."""
    account, created = CreditAccount.objects.get_or_create(
        workspace=workspace, defaults={"workspace_slug": workspace.slug}
    )
    if created and workspace.plan.signup_credits > 0:
        account = CreditAccount.objects.select_for_update().get(pk=account.pk)
        _append(
            account,
            kind=EntryKind.GRANT,
            amount=workspace.plan.signup_credits,
            reason=f"Signup credits ({workspace.plan.name} plan)",
            created_at=workspace.created_at,
        )
    return account


def account_for(workspace: Workspace) -> CreditAccount:
    """The workspace's account. One made before accounts opened with workspaces opens its own
    now, its signup grant dated at the workspace's creation, not at this first look."""
    account = CreditAccount.objects.filter(workspace=workspace).first()
    return account if account is not None else _account_open_as_before(workspace)


def _locked(workspace: Workspace) -> CreditAccount:
    try:
        return CreditAccount.objects.select_for_update().get(workspace=workspace)
    except CreditAccount.DoesNotExist:
        account_for(workspace)
        return CreditAccount.objects.select_for_update().get(workspace=workspace)


def _append(
    account: CreditAccount, *, kind: str, amount: int, hold_delta: int = 0, **cause
) -> LedgerEntry:
    """Move the (locked) account and write the entry that explains the move."""
    if kind not in (EntryKind.HOLD, EntryKind.RELEASE):
        account.balance += amount
    account.held += hold_delta
    account.save(update_fields=["balance", "held", "updated_at"])
    return LedgerEntry.objects.create(
        account=account,
        kind=kind,
        amount=amount,
        hold_delta=hold_delta,
        balance_after=account.balance,
        held_after=account.held,
        **cause,
    )


def job_open_hold(job) -> int:
    """Micro-credits still held for the job."""
    total = LedgerEntry.objects.filter(job_id=job.pk).aggregate(s=Sum("hold_delta"))["s"]
    return total or 0


# --- credits in ---------------------------------------------------------------------------------


@transaction.atomic
def credits_grant(
    workspace: Workspace,
    amount: int,
    *,
    reason: str,
    admin: User | None = None,
    kind: str = EntryKind.GRANT,
) -> LedgerEntry:
    """Give the workspace credits (an admin's grant, a promotion, a goodwill refund)."""
    _amount_check(amount)
    if kind not in (EntryKind.GRANT, EntryKind.REFUND, EntryKind.ADJUSTMENT):
        raise ServiceError(f"Credits cannot be granted as {kind}.")
    reason = _reason_check(reason)
    account = _locked(workspace)
    return _append(account, kind=kind, amount=amount, reason=reason, admin=admin)


@transaction.atomic
def signup_credits_grant(*, user: User, workspace: Workspace) -> LedgerEntry | None:
    """The plan's sign-up credits for a person who confirmed their address, into `workspace`
    (their personal one): once per person, whichever address they confirm and however many
    workspaces they hold. None when they had them already or the plan gives none.

    The account's lock queues a repeated confirmation behind the first; SignupGrant's unique
    user and address refuse a second grant in the database all the same."""
    amount = workspace.plan.signup_credits
    email = user.email.strip().lower()
    if amount <= 0 or not email:
        return None
    account_open(workspace)  # empty if it had none: this grant is the person's, not the plan's
    account = _locked(workspace)
    if SignupGrant.objects.filter(Q(user=user) | Q(email=email)).exists():
        return None
    try:
        with transaction.atomic():
            entry = _append(
                account,
                kind=EntryKind.GRANT,
                amount=amount,
                reason=f"Sign-up credits ({workspace.plan.name} plan), once per person",
            )
            SignupGrant.objects.create(user=user, email=email, entry=entry)
    except IntegrityError:  # the same person granted meanwhile, through another account's lock
        account.refresh_from_db(fields=["balance", "held"])
        return None
    return entry


@transaction.atomic
def credits_grant_monthly(workspace: Workspace, *, month: date | None = None) -> LedgerEntry | None:
    """The plan's monthly credits, at most once per workspace and month; None if none are due."""
    period = (month or timezone.localdate()).strftime("%Y-%m")
    amount = workspace.plan.monthly_credits
    if amount <= 0:
        return None
    account = _locked(workspace)
    if LedgerEntry.objects.filter(account=account, period=period).exists():
        return None
    return _append(
        account,
        kind=EntryKind.GRANT,
        amount=amount,
        period=period,
        reason=f"Monthly credits {period} ({workspace.plan.name} plan)",
    )


def credits_purchase(workspace: Workspace, amount: int, *, payment_ref: str) -> LedgerEntry:
    """Credits bought; once per payment reference (a retried webhook returns the first entry)."""
    _amount_check(amount)
    payment_ref = (payment_ref or "").strip()
    if not payment_ref:
        raise ServiceError("A purchase needs its payment reference.")
    try:
        return _purchase(workspace, amount, payment_ref)
    except IntegrityError:
        # The same reference committed by a concurrent call, for another account's lock.
        return _purchase_existing(workspace, payment_ref)


@transaction.atomic
def _purchase(workspace: Workspace, amount: int, payment_ref: str) -> LedgerEntry:
    account = _locked(workspace)
    existing = LedgerEntry.objects.filter(kind=EntryKind.PURCHASE, payment_ref=payment_ref).first()
    if existing is not None:
        return _purchase_same(existing, account, amount)
    return _append(account, kind=EntryKind.PURCHASE, amount=amount, payment_ref=payment_ref)


def _purchase_existing(workspace: Workspace, payment_ref: str) -> LedgerEntry:
    existing = LedgerEntry.objects.get(kind=EntryKind.PURCHASE, payment_ref=payment_ref)
    return _purchase_same(existing, account_for(workspace), existing.amount)


def _purchase_same(existing: LedgerEntry, account: CreditAccount, amount: int) -> LedgerEntry:
    if existing.account_id != account.pk or existing.amount != amount:
        raise ServiceError(f"Payment {existing.payment_ref} was already credited differently.")
    return existing


# --- holds for training jobs --------------------------------------------------------------------


@transaction.atomic
def hold_place(workspace: Workspace, job, amount: int) -> LedgerEntry:
    """Set aside credits for a job before it runs; refused when they are not available."""
    _amount_check(amount)
    if job.workspace_id != workspace.pk:
        raise ServiceError("The job belongs to another workspace.")
    account = _locked(workspace)
    if job_open_hold(job) > 0:
        raise ServiceError("The job already holds credits: extend its hold instead.")
    if account.available < amount:
        raise _short(account, amount)
    return _append(account, kind=EntryKind.HOLD, amount=amount, hold_delta=amount, job=job)


@transaction.atomic
def hold_extend(job, amount: int) -> LedgerEntry:
    """Hold more for a job that already holds credits (it runs longer than estimated)."""
    _amount_check(amount)
    account = _locked(job.workspace)
    if job_open_hold(job) <= 0:
        raise ServiceError("The job holds no credits to extend.")
    if account.available < amount:
        raise _short(account, amount)
    return _append(
        account, kind=EntryKind.HOLD, amount=amount, hold_delta=amount, job=job, reason="Extended"
    )


@transaction.atomic
def hold_capture(job, amount: int) -> LedgerEntry:
    """Spend credits for a job: from its hold first, the rest from available credits."""
    _amount_check(amount)
    account = _locked(job.workspace)
    from_hold = min(amount, job_open_hold(job))
    beyond = amount - from_hold
    if beyond > account.available:
        raise _short(account, beyond)
    return _append(account, kind=EntryKind.CAPTURE, amount=-amount, hold_delta=-from_hold, job=job)


@transaction.atomic
def hold_release(job) -> LedgerEntry | None:
    """Return what the job still holds to available credits; None when nothing is held."""
    account = _locked(job.workspace)
    rest = job_open_hold(job)
    if rest <= 0:
        return None
    return _append(account, kind=EntryKind.RELEASE, amount=rest, hold_delta=-rest, job=job)


@transaction.atomic
def credits_refund(job, amount: int, *, reason: str) -> LedgerEntry:
    """Give back credits a job spent (a failed run on our side); never more than it spent."""
    _amount_check(amount)
    reason = _reason_check(reason)
    account = _locked(job.workspace)
    moved = LedgerEntry.objects.filter(
        job_id=job.pk, kind__in=[EntryKind.CAPTURE, EntryKind.REFUND]
    ).aggregate(s=Sum("amount"))["s"]
    refundable = -(moved or 0)
    if amount > refundable:
        raise ServiceError(
            f"Only {credits_format(max(refundable, 0))} credits of this job are refundable."
        )
    return _append(account, kind=EntryKind.REFUND, amount=amount, job=job, reason=reason)


# --- credits out, corrections -------------------------------------------------------------------


@transaction.atomic
def credits_spend(workspace: Workspace, amount: int, *, reason: str) -> LedgerEntry:
    """Spend available credits on metered time that holds nothing ahead (a dedicated
    endpoint's replica seconds, charged at each check): a capture with its reason."""
    _amount_check(amount)
    reason = _reason_check(reason)
    account = _locked(workspace)
    if amount > account.available:
        raise _short(account, amount)
    return _append(account, kind=EntryKind.CAPTURE, amount=-amount, reason=reason)


@transaction.atomic
def credits_expire(workspace: Workspace, amount: int, *, reason: str) -> LedgerEntry:
    """Remove credits that lapsed; only available ones (held credits belong to running jobs)."""
    _amount_check(amount)
    reason = _reason_check(reason)
    account = _locked(workspace)
    if amount > account.available:
        raise _short(account, amount)
    return _append(account, kind=EntryKind.EXPIRE, amount=-amount, reason=reason)


@transaction.atomic
def credits_adjust(workspace: Workspace, amount: int, *, reason: str, admin: User) -> LedgerEntry:
    """An administrator's correction, either way, always with a reason and a name."""
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise ServiceError("Amounts are whole micro-credits.")
    _amount_check(abs(amount))
    reason = _reason_check(reason)
    if admin is None:
        raise ServiceError("An adjustment needs the administrator who made it.")
    account = _locked(workspace)
    if amount < 0 and -amount > account.available:
        raise _short(account, -amount)
    return _append(account, kind=EntryKind.ADJUSTMENT, amount=amount, reason=reason, admin=admin)


# --- checks -------------------------------------------------------------------------------------


def accounts_reconcile() -> list[dict]:
    """Every account whose balance or held differs from what its entries add up to."""
    balance_kinds = [k for k in EntryKind.values if k not in (EntryKind.HOLD, EntryKind.RELEASE)]
    differences = []
    for account in CreditAccount.objects.order_by("pk"):
        entries = LedgerEntry.objects.filter(account=account)
        balance = entries.filter(kind__in=balance_kinds).aggregate(s=Sum("amount"))["s"] or 0
        held = entries.aggregate(s=Sum("hold_delta"))["s"] or 0
        if (balance, held) != (account.balance, account.held):
            differences.append(
                {
                    "account": account,
                    "balance": account.balance,
                    "balance_expected": balance,
                    "held": account.held,
                    "held_expected": held,
                }
            )
    return differences
