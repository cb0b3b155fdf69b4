import importlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from django.conf import settings
from django.core.cache import cache

from billing.plans import plans_seed
from tests.run_cache import RUN_MARK, run_dir_remove
from tests.workers import Workers
from tests.workspaces.factories import MembershipFactory, UserFactory, WorkspaceFactory
from workspaces.models import Role, User, Workspace
from workspaces.selectors import workspace_access_for_user

# Files that take minutes (real training, whole stacks started and killed) run first, the
# longest first: under pytest-xdist's --dist loadfile --no-loadscope-reorder (scripts/test.sh) a
# worker takes a file at a time in this order, so the long ones overlap the many short ones
# instead of ending the run alone. The newcomer's journey, the longest single test, goes first.
SLOW_FIRST = (
    "tests/browser/test_journey.py",
    "tests/training/test_checkpoint_loading.py",
    "tests/reliability/",
    "tests/training/test_engine.py",
    "tests/training/test_skypilot.py",
    "tests/sweeps/test_sweep_run.py",
    "tests/training/test_demo_model.py",
    "tests/training/test_platform_client.py",
    "tests/billing/test_ledger_machine.py",
    "tests/browser/",
)
# A test is `slow` (seconds to minutes: `-m "not slow"` leaves it out of a quick run) when it
# is in one of those files or uses what starts real processes or trains real models.
SLOW_FIXTURES = {
    "workers",  # Celery workers that train
    "celery_worker_process",
    "asgi_server",  # uvicorn in a process of its own
    "chromium_browser",  # and every browser fixture built on it
    "inference_server",
    "yolo_models",  # trained once a session: minutes the first time
    "confident_yolo_models",
    "confident_weights",
    "matrix",  # every task and family trained and resumed
    "detect_weights",
    "evaluation_weights",
    "detector",
    "published_weights",
    "model_server",
}


# Every process the run starts inherits this mark in its environment. A dedicated endpoint's
# model server is detached on purpose (it outlives the worker that started it), so a test that
# deploys one can leave it running; when the whole run ends, whatever still carries the mark
# is ended, so `make test` leaves no process behind.
def pytest_configure(config):
    os.environ.setdefault(RUN_MARK, f"{os.getpid()}-{time.time_ns()}")


def pytest_unconfigure(config):
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the others may still run; the controller ends what is left
    mark = os.environ.get(RUN_MARK)
    left, names = [], set()
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get(RUN_MARK) == mark:
                left.append(proc)
                names.add(" ".join(proc.cmdline())[:100])
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    for proc in left:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            continue
    _, alive = psutil.wait_procs(left, timeout=10)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    if left:
        print(f"\nEnded {len(left)} process(es) the run left running: {sorted(names)[:5]}")
    run_dir_remove()  # what the run made once for its workers (tests/run_cache.py)


def pytest_collection_modifyitems(config, items):
    def rank(item) -> int:
        path = item.nodeid  # tests/reliability/test_x.py::test_y
        first = next((i for i, p in enumerate(SLOW_FIRST) if path.startswith(p)), None)
        if first is not None:
            return first
        return len(SLOW_FIRST) + (0 if item.get_closest_marker("slow") else 1)

    for item in items:
        in_slow_file = item.nodeid.startswith(SLOW_FIRST)
        if in_slow_file or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    items.sort(key=rank)  # stable: each file keeps its own order


# scripts/test.sh sets it on the SQLite run when the same `make test` runs PostgreSQL's too,
# and KESTREL_TEST_THEN=sqlite on the PostgreSQL run when SQLite's follows it.
ONCE_RAN_ON_POSTGRES = os.environ.get("KESTREL_TEST_ONCE") == "postgres"
SQLITE_RUNS_NEXT = os.environ.get("KESTREL_TEST_THEN") == "sqlite"
DATABASE_FIXTURES = {"db", "transactional_db", "django_db_setup"}


def _uses_a_database(item) -> bool:
    return item.get_closest_marker("django_db") is not None or bool(
        DATABASE_FIXTURES & set(getattr(item, "fixturenames", ()))
    )


def pytest_runtest_setup(item):
    """The suite runs on PostgreSQL and on SQLite (scripts/test.sh); a test of what only
    PostgreSQL has says so, and why, with @pytest.mark.postgres_only("reason").

    When one `make test` runs both, what no database changes runs once: tests that touch no
    database at all, and those marked @pytest.mark.same_on_any_database("reason") (a trainer's
    link cut, Redis killed, a browser or a stock client driving a flow: the database only
    stores what they produce, as in the tests that run on both). They run on the PostgreSQL
    run, or with on="sqlite" on the SQLite run: the quick start's own flows (`make run` is
    SQLite's). Alone, each database's run runs them all."""
    sqlite = settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql"
    marker = item.get_closest_marker("postgres_only")
    if marker and sqlite:
        if not marker.args:
            raise pytest.UsageError(f"{item.nodeid}: postgres_only needs its reason")
        pytest.skip(f"PostgreSQL only: {marker.args[0]}")
    same = item.get_closest_marker("same_on_any_database")
    if same and not same.args:
        raise pytest.UsageError(f"{item.nodeid}: same_on_any_database needs its reason")
    on = same.kwargs.get("on", "postgres") if same else None
    if on not in (None, "postgres", "sqlite"):
        raise pytest.UsageError(f"{item.nodeid}: same_on_any_database(on=) is postgres or sqlite")
    if sqlite and ONCE_RAN_ON_POSTGRES:
        if not _uses_a_database(item):
            pytest.skip("Ran on the PostgreSQL run: it touches no database")
        if on == "postgres":
            pytest.skip(f"Ran on the PostgreSQL run: {same.args[0]}")
    if not sqlite and SQLITE_RUNS_NEXT and on == "sqlite":
        pytest.skip(f"Runs on the SQLite run, the quick start's database: {same.args[0]}")


@pytest.fixture(autouse=True)
def _no_endpoint_outlives_its_test(request):
    """A dedicated endpoint's model server is detached on purpose (it outlives the worker that
    started it), so a test that deploys one (the journey does, through a worker) could leave it
    running: it ends with the test. Found by the mark of the test's own database, whatever the
    rows say, so another xdist worker's endpoints are left alone."""
    yield
    if _uses_a_database(request.node):
        from deploy.supervisor import endpoint_processes_stop

        endpoint_processes_stop()


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Rate limits and the cache live in Redis (a test-only database): start each test clean;
    and no caller's predict lookup kept by this process (deploy.api), as ids repeat from one
    test to the next; nor any address's refusals counted by the web's application
    (core.refusal_pacing), as every test's in-process calls come from one address."""
    cache.clear()
    from deploy.api import predict_kept_forget

    predict_kept_forget()
    asgi = sys.modules.get("config.asgi")
    if asgi is not None:
        asgi.application.seen.clear()
    yield


@pytest.fixture(autouse=True)
def _ledger_flushable_on_sqlite(request):
    """SQLite empties tables for a transactional test's teardown with DELETE, which the
    ledger's append-only trigger refuses (PostgreSQL's TRUNCATE passes row triggers): such a
    test lifts the DELETE trigger just before that flush, and every test that uses the database
    starts with it in place."""
    names = request.fixturenames
    marker = request.node.get_closest_marker("django_db")
    transactional = "transactional_db" in names or "live_server" in names
    transactional = transactional or bool(marker and marker.kwargs.get("transaction"))
    if not (transactional or marker or "db" in names):
        yield
        return
    request.getfixturevalue("transactional_db" if transactional else "db")
    from django.db import connection

    sqlite = connection.vendor == "sqlite"
    if sqlite:
        ledger = importlib.import_module("billing.migrations.0004_ledger_append_only")
        with connection.cursor() as cursor:
            for sql in ledger.SQLITE_UP:
                cursor.execute(sql.replace("CREATE TRIGGER", "CREATE TRIGGER IF NOT EXISTS"))
    yield
    if sqlite and transactional:
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER IF EXISTS billing_ledgerentry_no_delete")


@pytest.fixture
def plans(db):
    return plans_seed()


@dataclass
class Team:
    workspace: Workspace
    owner: User
    admin: User
    editor: User
    viewer: User

    def user(self, role: str) -> User:
        return getattr(self, role)

    def access(self, role: str):
        return workspace_access_for_user(user=self.user(role), slug=self.workspace.slug)


def team_create(plans) -> Team:
    pro = next(plan for plan in plans if plan.slug == "pro")  # room for invitations
    workspace = WorkspaceFactory(name="Acme Vision", slug="acme", plan=pro)
    users = {}
    for role in Role.values:
        users[role] = UserFactory(email=f"{role}@acme.test")
        MembershipFactory(workspace=workspace, user=users[role], role=role)
    return Team(workspace=workspace, **users)


def stranger_create() -> User:
    """Someone who owns a workspace of their own and is not in the team's."""
    user = UserFactory(email="stranger@elsewhere.test")
    MembershipFactory(
        workspace=WorkspaceFactory(name="Elsewhere", slug="elsewhere"), user=user, role=Role.OWNER
    )
    return user


@pytest.fixture
def team(plans) -> Team:
    return team_create(plans)


@pytest.fixture
def stranger(plans) -> User:
    """Someone who owns a workspace of their own and is not in the team's."""
    return stranger_create()


ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def celery_worker_process(transactional_db):
    """A worker on this run's own queue (no other worker takes its tasks), plus the default
    queue that services send to (on the test broker's own Redis database)."""
    queue = f"test-{os.getpid()}"
    workers = Workers()
    workers.start(queue, settings.CELERY_TASK_DEFAULT_QUEUE)
    try:
        yield queue
    finally:
        workers.stop_all()
