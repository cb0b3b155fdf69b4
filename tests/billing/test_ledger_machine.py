"""Random sequences of ledger operations keep the books straight (Hypothesis state machine)."""

import pytest
from django.db import transaction
from django.db.models import Count, Q, Sum
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from billing import ledger
from billing.models import EntryKind, LedgerEntry
from core.errors import ServiceError
from core.money import MICRO

amounts = st.integers(min_value=1, max_value=30 * MICRO)
refs = st.sampled_from(["pay_a", "pay_b", "pay_c"])


def machine_for(workspace, jobs):
    job_ids = st.sampled_from(range(len(jobs)))

    class LedgerMachine(RuleBasedStateMachine):
        """A Python model of the account beside the real one; every rule expects the same
        outcome (done or refused) from both."""

        def __init__(self):
            super().__init__()
            self._atomic = transaction.atomic()
            self._atomic.__enter__()
            self.balance = ledger.account_for(workspace).balance
            self.open = [0] * len(jobs)
            self.spent = [0] * len(jobs)
            self.purchases: dict[str, int] = {}

        def teardown(self):
            transaction.set_rollback(True)
            self._atomic.__exit__(None, None, None)

        @property
        def held(self):
            return sum(self.open)

        @property
        def available(self):
            return self.balance - self.held

        def _expect(self, ok: bool, call):
            if ok:
                return call()
            with pytest.raises(ServiceError):
                call()
            return None

        @rule(amount=amounts)
        def grant(self, amount):
            ledger.credits_grant(workspace, amount, reason="test")
            self.balance += amount

        @rule(amount=amounts, ref=refs)
        def purchase(self, amount, ref):
            first = ref not in self.purchases
            ok = first or self.purchases[ref] == amount
            self._expect(ok, lambda: ledger.credits_purchase(workspace, amount, payment_ref=ref))
            if first:
                self.purchases[ref] = amount
                self.balance += amount

        @rule(i=job_ids, amount=amounts)
        def hold(self, i, amount):
            ok = self.open[i] == 0 and amount <= self.available
            self._expect(ok, lambda: ledger.hold_place(workspace, jobs[i], amount))
            if ok:
                self.open[i] = amount

        @rule(i=job_ids, amount=amounts)
        def extend(self, i, amount):
            ok = self.open[i] > 0 and amount <= self.available
            self._expect(ok, lambda: ledger.hold_extend(jobs[i], amount))
            if ok:
                self.open[i] += amount

        @rule(i=job_ids, amount=amounts)
        def capture(self, i, amount):
            from_hold = min(amount, self.open[i])
            ok = amount - from_hold <= self.available
            self._expect(ok, lambda: ledger.hold_capture(jobs[i], amount))
            if ok:
                self.open[i] -= from_hold
                self.balance -= amount
                self.spent[i] += amount

        @rule(i=job_ids)
        def release(self, i):
            entry = ledger.hold_release(jobs[i])
            assert (entry is None) == (self.open[i] == 0)
            if entry is not None:
                assert entry.amount == self.open[i]
            self.open[i] = 0

        @rule(i=job_ids, amount=amounts)
        def refund(self, i, amount):
            ok = amount <= self.spent[i]
            self._expect(ok, lambda: ledger.credits_refund(jobs[i], amount, reason="test"))
            if ok:
                self.spent[i] -= amount
                self.balance += amount

        @rule(amount=amounts)
        def expire(self, amount):
            ok = amount <= self.available
            self._expect(ok, lambda: ledger.credits_expire(workspace, amount, reason="test"))
            if ok:
                self.balance -= amount

        @invariant()
        def books_balance(self):
            account = ledger.account_for(workspace)
            entries = LedgerEntry.objects.filter(account=account)
            moved = entries.exclude(kind__in=[EntryKind.HOLD, EntryKind.RELEASE])
            assert account.balance == self.balance == (moved.aggregate(s=Sum("amount"))["s"])
            assert account.held == self.held == sum(ledger.job_open_hold(j) for j in jobs)
            assert account.available >= 0
            assert ledger.accounts_reconcile() == []
            last = entries.order_by("-id").first()
            assert (last.balance_after, last.held_after) == (account.balance, account.held)

        @invariant()
        def settled_at_most_once_per_hold(self):
            rounds = (
                LedgerEntry.objects.filter(job_id__in=[j.pk for j in jobs])
                .values("job_id")
                .annotate(
                    places=Count("pk", filter=Q(kind=EntryKind.HOLD) & Q(reason="")),
                    releases=Count("pk", filter=Q(kind=EntryKind.RELEASE)),
                )
            )
            for row in rounds:
                assert row["releases"] <= row["places"]

    return LedgerMachine


@pytest.mark.django_db
def test_ledger_operations_in_any_order_keep_the_books(team, jobs):
    pool = [jobs.new() for _ in range(3)]
    machine = machine_for(team.workspace, pool)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=40,
            stateful_step_count=25,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        ),
    )
