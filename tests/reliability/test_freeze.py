"""The fault tests' `freeze` stops processes only at a moment none holds a transaction open: its
probe must see one that is (else a process frozen mid-write would hold SQLite's one write lock,
or PostgreSQL's row locks, and the reaper would wait on it: CI's SQLite run, 2026-12-06)."""

import subprocess
import sys
import time

import pytest
from django.db import connection

from tests.reliability.helpers import _a_transaction_is_held, freeze

pytestmark = pytest.mark.django_db(transaction=True)

# Another process opens a write transaction on the test database and holds it until stdin closes.
_HOLDER = """
import sys
vendor, name = sys.argv[1], sys.argv[2]
if vendor == "sqlite":
    import sqlite3
    db = sqlite3.connect(name, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
else:
    import psycopg
    db = psycopg.connect(name)
    db.execute("SELECT 1")  # a transaction is open until commit
print("holding", flush=True)
sys.stdin.read()
"""


def _target() -> str:
    if connection.vendor == "sqlite":
        return connection.settings_dict["NAME"]
    s = connection.settings_dict
    return f"host={s['HOST']} port={s['PORT'] or 5432} user={s['USER']} dbname={s['NAME']}"


def test_the_probe_sees_another_process_holding_a_transaction_and_freeze_will_not_stop_it():
    assert not _a_transaction_is_held()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, connection.vendor, _target()],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        assert _a_transaction_is_held()
        with pytest.raises(AssertionError, match="never left their transaction"):
            freeze(holder.pid, tries=3)  # thawed again each time: it holds its transaction
        assert holder.poll() is None and _a_transaction_is_held()
    finally:
        holder.stdin.close()  # its transaction ends with it
        holder.wait(timeout=30)
    deadline = time.monotonic() + 10
    while _a_transaction_is_held() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _a_transaction_is_held()
