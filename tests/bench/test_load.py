"""bench/load.py end to end, briefly: the whole stack started, every route driven and reported,
the goals judged, and the database it made dropped again."""

import os
import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from bench.load import ROUTES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.postgres_only("the bench makes a PostgreSQL database of its own: run it once")
def test_a_short_load_run_reports_every_route_and_cleans_up():
    suite = re.sub(r"\W", "_", Path(os.environ.get("KESTREL_TEST_DB", "test")).stem)
    database = f"{suite}_{os.environ.get('PYTEST_XDIST_WORKER', 'main')}_load"
    # The bench's own settings, not the suite's; the suite's Redis databases.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "CELERY_DEFAULT_QUEUE")
    }
    command = [sys.executable, "bench/load.py", "--seconds", "3", "--clients", "4"]
    command += ["--images", "120", "--database", database]
    run = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400, check=False
    )
    out = run.stdout
    assert run.returncode == 0, out[-3000:] + run.stderr[-3000:]
    for route in ROUTES:
        row = re.search(rf"^{re.escape(route)} +(\d+) ", out, re.M)
        assert row, f"no row for {route}:\n{out}"
        if "resumed" not in route:  # a 3 s run may end before a stream is dropped and resumed
            assert int(row[1]) > 0, f"{route} was never answered:\n{out}"
    assert len(re.findall(r"^(PASS|FAIL)  ", out, re.M)) == 3, out
    assert re.search(r"^PASS  no errors \(0\)$", out, re.M), out
    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres") as conn:
        left = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [database]).fetchall()
    assert not left, f"database {database} was left behind"
