"""Settings for the test suite: the real Redis, and PostgreSQL or SQLite by DATABASE_URL
(scripts/test.sh runs the suite on both)."""

import os
import tempfile

# Under pytest-xdist (`-n N`), each worker process gets Redis databases of its own (its cache is
# cleared before every test, and its broker queues must not reach another worker's Celery);
# pytest-django gives it its own test database. Processes a test starts inherit the split.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if _WORKER.startswith("gw") and not os.environ.get("KESTREL_XDIST_SPLIT"):
    _index = int(_WORKER.removeprefix("gw"))
    for _name, _db in (("REDIS_URL", 14), ("CELERY_BROKER_URL", 13)):
        _base, _, _number = os.environ.get(_name, f"redis://127.0.0.1:6379/{_db}").rpartition("/")
        os.environ[_name] = f"{_base}/{int(_number) - 2 * _index}"
    # And folders of its own: the controller's (inherited) would be shared, and two workers'
    # databases hand out the same ids (model 58's exports in both).
    os.environ["MEDIA_ROOT"] = tempfile.mkdtemp(prefix=f"kestrel-test-media-{_WORKER}-")
    os.environ["TRAINING_DIR"] = tempfile.mkdtemp(prefix=f"kestrel-test-training-{_WORKER}-")
    # And ports of its own for dedicated endpoints: another worker's endpoint, restarting,
    # took 8800 again and again while this one's tried it (CI's SQLite run, 2026-12-06).
    os.environ["DEPLOY_PORT_FIRST"] = str(28800 + 40 * _index)
    os.environ["DEPLOY_PORT_LAST"] = str(28800 + 40 * _index + 39)
    os.environ["KESTREL_XDIST_SPLIT"] = "1"

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/kestrel")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/14")
os.environ.setdefault("CACHE_KEY_PREFIX", "kestrel-test")
# The broker gets its own Redis database: tests clear the cache database before each test.
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/13")
os.environ.setdefault("DJANGO_ENV", "development")
# A test's own writes are rolled back, never committed, so they move no table's token
# (core.table_changes) and a predict lookup a test's process keeps would outlive them: kept a
# second at most, as before tokens. The tests of the tokens are transactional and set their own.
os.environ.setdefault("PREDICT_KEY_KEPT_SECONDS", "1")
# Dedicated endpoints' ports: not those of an install running on this machine (8800-8899).
os.environ.setdefault("DEPLOY_PORT_FIRST", "28760")
os.environ.setdefault("DEPLOY_PORT_LAST", "28799")
# Test uploads and blobs go to a throwaway folder, shared with worker processes tests start.
os.environ.setdefault("MEDIA_ROOT", tempfile.mkdtemp(prefix="kestrel-test-media-"))
# Training: runs in a throwaway folder, no downloads, quick heartbeats (the reaper acts after
# three), and a queue of this suite's own so another suite's worker never takes its jobs.
os.environ.setdefault("TRAINING_DIR", tempfile.mkdtemp(prefix="kestrel-test-training-"))
os.environ.setdefault("TRAINING_ALLOW_DOWNLOADS", "false")
os.environ.setdefault("TRAINING_HEARTBEAT_SECONDS", "1")
os.environ.setdefault("TRAINING_QUEUE", f"training-{os.environ.get('KESTREL_TEST_DB', 'test')}")
# Likewise the default queue: a worker of another suite (another test database) never takes
# this suite's imports, exports or model calls.
_SUITE = os.environ.get("KESTREL_TEST_DB", "test")
os.environ.setdefault("CELERY_DEFAULT_QUEUE", f"default-{_SUITE}")

from config.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed only
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
# Several suites on one machine (a developer's and CI's) each get their own test database.
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("KESTREL_TEST_DB", "test_kestrel")}  # noqa: F405
