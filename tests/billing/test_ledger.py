import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, connection, transaction

from billing.ledger import (
    InsufficientCredits,
    account_for,
    credits_adjust,
    credits_expire,
    credits_grant,
    credits_purchase,
    credits_refund,
    hold_capture,
    hold_extend,
    hold_place,
    hold_release,
    job_open_hold,
)
from billing.models import CreditAccount, EntryKind, LedgerEntry
from billing.tasks import grant_monthly_task
from core.errors import ServiceError
from core.money import MICRO
from workspaces.services.workspaces import workspace_delete

pytestmark = pytest.mark.django_db


def test_account_opens_with_the_plans_signup_credits(team):
    account = account_for(team.workspace)  # the team is on Pro: 20 credits at signup
    assert (account.balance, account.held, account.available) == (20 * MICRO, 0, 20 * MICRO)
    assert account_for(team.workspace).pk == account.pk
    assert LedgerEntry.objects.filter(account=account).count() == 1


def test_hold_capture_release_move_balance_and_held(team, jobs):
    job = jobs.new()
    hold_place(team.workspace, job, 5 * MICRO)
    account = CreditAccount.objects.get(workspace=team.workspace)
    assert (account.balance, account.held, account.available) == (20 * MICRO, 5 * MICRO, 15 * MICRO)
    hold_extend(job, 2 * MICRO)
    hold_capture(job, 3 * MICRO)
    assert job_open_hold(job) == 4 * MICRO
    released = hold_release(job)
    assert released.amount == 4 * MICRO
    assert hold_release(job) is None  # settled once
    account.refresh_from_db()
    assert (account.balance, account.held) == (17 * MICRO, 0)
    last = LedgerEntry.objects.filter(account=account).first()
    assert (last.balance_after, last.held_after) == (17 * MICRO, 0)


def test_capture_beyond_the_hold_takes_from_available_or_refuses(team, jobs):
    job = jobs.new()
    hold_place(team.workspace, job, 1 * MICRO)
    hold_capture(job, 3 * MICRO)  # 1 from the hold, 2 from available
    account = CreditAccount.objects.get(workspace=team.workspace)
    assert (account.balance, account.held) == (17 * MICRO, 0)
    with pytest.raises(InsufficientCredits):
        hold_capture(job, 18 * MICRO)


def test_hold_refused_when_not_available_with_a_clear_message(team, jobs):
    with pytest.raises(InsufficientCredits, match=r"25.00 needed, 20.00 available"):
        hold_place(team.workspace, jobs.new(), 25 * MICRO)
    assert account_for(team.workspace).held == 0


@pytest.mark.parametrize("amount", [0, -1, -5 * MICRO, 10**15 + 1, 1.5, True])
def test_zero_negative_absurd_and_non_integer_amounts_are_refused(team, jobs, amount):
    job = jobs.new()
    account_for(team.workspace)
    calls = [
        lambda: credits_grant(team.workspace, amount, reason="x"),
        lambda: credits_purchase(team.workspace, amount, payment_ref="pi_1"),
        lambda: hold_place(team.workspace, job, amount),
        lambda: hold_capture(job, amount),
        lambda: credits_expire(team.workspace, amount, reason="x"),
    ]
    for call in calls:
        with pytest.raises(ServiceError):
            call()
    assert LedgerEntry.objects.count() == 1  # the signup grant only


def test_adjustments_need_a_reason_and_an_admin_and_go_either_way(team):
    with pytest.raises(ServiceError, match="reason"):
        credits_adjust(team.workspace, 5, reason=" ", admin=team.owner)
    with pytest.raises(ServiceError, match="administrator"):
        credits_adjust(team.workspace, 5, reason="typo", admin=None)
    with pytest.raises(ServiceError):
        credits_adjust(team.workspace, 10**15 + 1, reason="typo", admin=team.owner)
    credits_adjust(team.workspace, -2 * MICRO, reason="double grant", admin=team.owner)
    with pytest.raises(InsufficientCredits):
        credits_adjust(team.workspace, -19 * MICRO, reason="too much", admin=team.owner)
    assert account_for(team.workspace).balance == 18 * MICRO


def test_purchase_is_once_per_payment_reference(team):
    first = credits_purchase(team.workspace, 10 * MICRO, payment_ref="cs_test_1")
    again = credits_purchase(team.workspace, 10 * MICRO, payment_ref="cs_test_1")
    assert again.pk == first.pk
    assert account_for(team.workspace).balance == 30 * MICRO
    with pytest.raises(ServiceError, match="already credited"):
        credits_purchase(team.workspace, 99 * MICRO, payment_ref="cs_test_1")


def test_refund_never_exceeds_what_the_job_spent(team, jobs):
    job = jobs.new()
    hold_place(team.workspace, job, 4 * MICRO)
    hold_capture(job, 4 * MICRO)
    credits_refund(job, 3 * MICRO, reason="GPU lost")
    with pytest.raises(ServiceError, match="1.00 credits"):
        credits_refund(job, 2 * MICRO, reason="again")
    assert account_for(team.workspace).balance == 19 * MICRO


def test_expire_takes_only_available_credits(team, jobs):
    hold_place(team.workspace, jobs.new(), 15 * MICRO)
    with pytest.raises(InsufficientCredits):
        credits_expire(team.workspace, 6 * MICRO, reason="promo over")
    credits_expire(team.workspace, 5 * MICRO, reason="promo over")
    assert account_for(team.workspace).available == 0


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE billing_ledgerentry SET amount = amount + 1000000",
        "DELETE FROM billing_ledgerentry",
    ],
)
def test_the_database_refuses_to_change_or_delete_ledger_rows(team, sql):
    account_for(team.workspace)
    with pytest.raises(DatabaseError, match="append-only"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(sql)
    assert LedgerEntry.objects.get().amount == 20 * MICRO


def test_the_orm_cannot_change_a_ledger_row_either(team):
    entry = account_for(team.workspace).entries.get()
    entry.amount = 10**12
    with pytest.raises(DatabaseError), transaction.atomic():
        entry.save()


def test_deleting_a_workspace_keeps_its_credit_history(team, jobs):
    job = jobs.new()
    hold_place(team.workspace, job, 2 * MICRO)
    hold_capture(job, 2 * MICRO)
    account = account_for(team.workspace)
    workspace_delete(access=team.access("owner"), confirm_slug="acme")
    account.refresh_from_db()
    assert account.workspace is None
    assert account.workspace_slug == "acme"
    assert account.entries.count() == 3
    assert account.entries.filter(job_id=job.pk).count() == 2  # the job is gone, its id stays


def test_reconcile_reports_a_tampered_balance(team, capsys):
    account_for(team.workspace)
    call_command("billing_reconcile")
    CreditAccount.objects.filter(workspace=team.workspace).update(balance=99 * MICRO)
    with pytest.raises(CommandError, match="1 account"):
        call_command("billing_reconcile")
    out = capsys.readouterr().out
    assert "balance 99.00, entries say 20.00" in out


def test_monthly_grant_once_per_month(team, stranger):
    assert grant_monthly_task() == 1  # Pro: 20 a month; the stranger's Free plan has none
    assert grant_monthly_task() == 0
    assert account_for(team.workspace).balance == 40 * MICRO
    entry = LedgerEntry.objects.filter(account__workspace=team.workspace).exclude(period="").get()
    assert entry.kind == EntryKind.GRANT and len(entry.period) == 7
