"""Settings for the test suite: the real PostgreSQL and Redis, never SQLite."""

import os
import tempfile

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/kestrel")
os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/14")
os.environ.setdefault("CACHE_KEY_PREFIX", "kestrel-test")
# The broker gets its own Redis database: tests clear the cache database before each test.
os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/13")
os.environ.setdefault("DJANGO_ENV", "development")
# Test uploads and blobs go to a throwaway folder, shared with worker processes tests start.
os.environ.setdefault("MEDIA_ROOT", tempfile.mkdtemp(prefix="kestrel-test-media-"))

from config.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # speed only
DATABASES["default"]["CONN_MAX_AGE"] = 0  # noqa: F405
# Several suites on one machine (a developer's and CI's) each get their own test database.
DATABASES["default"]["TEST"] = {"NAME": os.environ.get("KESTREL_TEST_DB", "test_kestrel")}  # noqa: F405
