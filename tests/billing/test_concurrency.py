import threading

import pytest
from django.db import connection

from billing.ledger import InsufficientCredits, account_for, hold_place
from billing.models import EntryKind, LedgerEntry
from core.money import MICRO


@pytest.mark.django_db(transaction=True)
def test_sixteen_racing_holds_against_credits_for_ten(team, jobs):
    account = account_for(team.workspace)  # Pro: 20 credits, 2 per hold: room for exactly 10
    assert account.available == 20 * MICRO
    racing = [jobs.new() for _ in range(16)]
    start = threading.Barrier(len(racing))
    outcomes: list[str] = []

    def place(job):
        try:
            start.wait()
            hold_place(team.workspace, job, 2 * MICRO)
            outcomes.append("held")
        except InsufficientCredits:
            outcomes.append("refused")
        finally:
            connection.close()  # each thread has its own connection

    threads = [threading.Thread(target=place, args=(job,)) for job in racing]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert sorted(outcomes) == ["held"] * 10 + ["refused"] * 6
    account.refresh_from_db()
    assert (account.held, account.available) == (20 * MICRO, 0)
    assert LedgerEntry.objects.filter(kind=EntryKind.HOLD).count() == 10
