"""What the reliability tests share about a training run: waiting for it mid-run, that it was
billed once, and freezing its processes outside a database transaction."""

import os
import signal
import sqlite3
import time
from decimal import Decimal

import redis
from django.db import connection

from tests.training.helpers import job_reload, trainer_sent, wait_for
from training.metering import spent
from training.models import JobState, TrainingJob

PRICE = "3.600"  # an hour's price of the GPU the tests bill: 1,000 micro-credits a second
PER_SECOND = 1000


def assert_billed_once(job: TrainingJob) -> None:
    """The seconds charged are the attempts' lifetimes, each charged once."""
    rows = list(job.attempt_rows.all())
    lifetimes = sum((r.ended_at - r.started_at).total_seconds() for r in rows)
    billed = sum(r.billed_seconds for r in rows)
    assert abs(billed - lifetimes) < 1.0, (billed, lifetimes)
    charged = sum(int(Decimal(str(r.billed_seconds)) * PER_SECOND) for r in rows)
    assert abs(spent(job) - charged) <= len(rows), (spent(job), charged)


def mid_run(job: TrainingJob, epoch: int = 2) -> TrainingJob:
    """The job once its supervisor has stored `epoch` epochs. That lags the trainer by as long
    as the supervisor is held up (its first checkpoint's inspection took 20 s and more on a
    loaded machine, and it once stored 23 of 24 epochs at once): a fault meant to come mid-run
    waits for `trainer_at` instead."""
    return wait_for(
        lambda: (j := job_reload(job)).state == JobState.RUNNING and j.epochs_done >= epoch and j,
        timeout=240,
        what=f"epoch {epoch}",
    )


def trainer_epoch(client: redis.Redis, job: TrainingJob) -> int:
    """The last epoch the trainer has sent to its stream (0 before its first)."""
    return trainer_sent(client, job, "epoch")


def trainer_at(client: redis.Redis, job: TrainingJob, epoch: int = 2) -> int:
    """Waits until the trainer itself has sent `epoch`, whatever the supervisor has stored;
    the trainer's epoch then."""
    wait_for(lambda: trainer_epoch(client, job) >= epoch, timeout=240, what=f"trainer's {epoch}")
    return trainer_epoch(client, job)


def _a_transaction_is_held() -> bool:
    """Whether another process holds a transaction open on the test database: on SQLite, the
    one write lock (WAL readers hold none); on PostgreSQL, any client's open transaction
    (autovacuum's are not a client's)."""
    if connection.vendor == "sqlite":
        probe = sqlite3.connect(connection.settings_dict["NAME"], timeout=0.2)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            probe.close()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
            " AND xact_start IS NOT NULL"
        )
        return cursor.fetchone()[0] > 0


def freeze(*pids: int, tries: int = 50) -> None:
    """SIGSTOP the processes at a moment none of them is inside a database transaction. A
    process frozen mid-write holds its lock until it is thawed (SQLite's one write lock, or
    PostgreSQL's row locks), so the reaper would wait on it instead of reaping it: a fault of
    its own, which these tests do not mean to make (CI's SQLite run, 2026-12-06)."""
    for _ in range(tries):
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(0.05)  # a statement already sent finishes on the server
        if not _a_transaction_is_held():
            return
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.1)
    raise AssertionError(f"processes {pids} never left their transaction to be frozen")
