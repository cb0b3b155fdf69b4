#!/usr/bin/env bash
# The whole suite, twice: against the real PostgreSQL and then against SQLite (the quick start's
# database), both with the real Redis. KESTREL_TEST_DATABASES="postgres" (or "sqlite") runs one;
# arguments go to pytest on each run (`make test ARGS="tests/training -x"`).
set -uo pipefail
cd "$(dirname "$0")/.."
# Every process the suite starts (pytest's workers, web servers, Celery workers, trainers, model
# servers, checkpoint inspectors) keeps the bytecode it compiles, in .venv and the checkout, for
# the next one: with PYTHONDONTWRITEBYTECODE set (this machine's environment sets it) and pip's
# --no-compile, each compiled torch, Django and Ultralytics from source again (a trainer 4.6 s
# more before its first batch).
unset PYTHONDONTWRITEBYTECODE
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/14}
export DJANGO_SETTINGS_MODULE=config.test_settings
# Debian's chromium drives the browser tests; docker-compose (v1, the only one Debian ships)
# checks that docker-compose.yml parses. Neither needs a Docker engine.
missing=()
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v docker-compose >/dev/null || missing+=(docker-compose)
if [ ${#missing[@]} -gt 0 ] && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  echo "Installing ${missing[*]} from Debian's packages..."
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") >/dev/null
fi
.venv/bin/python manage.py collectstatic --noinput -v0 || exit 1

# In parallel (pytest-xdist), a test file per worker at a time: a file's session fixtures (a
# model server, trained checkpoints) are made once. Three workers on two cores: a good part of
# the suite waits on processes it started (servers, trainers, faults), and a third worker fills
# that. TEST_WORKERS=0 runs it in one process. Files go out in the order tests/conftest.py
# sorts them, the longest first (SLOW_FIRST): xdist's own reorder (by number of tests, on by
# default) sent the one-test files, the journey and the restricted loader's, out last, where they
# ran alone for minutes at the end of each run.
suite() {
  echo "=== The suite on $1 ==="
  .venv/bin/pytest -n "${TEST_WORKERS:-3}" --dist loadfile --no-loadscope-reorder --durations=15 \
    "${@:2}"
}

# What a run makes once for all its workers (tests/run_cache.py: trained checkpoints) serves
# both databases' runs, and goes when this script ends.
KESTREL_TEST_CACHE=$(mktemp -d -t kestrel-test-cache-XXXXXX)
export KESTREL_TEST_CACHE
trap 'rm -rf "$KESTREL_TEST_CACHE"' EXIT

status=0
ran_postgres=0
for database in ${KESTREL_TEST_DATABASES:-postgres sqlite}; do
  case "$database" in
    postgres)
      # Is SQLite's run next? Then what runs once on it (the quick start's flows) is left to it.
      then=""
      case " ${KESTREL_TEST_DATABASES:-postgres sqlite} " in *" postgres "*"sqlite "*) then=sqlite ;; esac
      KESTREL_TEST_THEN=$then DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/kestrel} \
        suite PostgreSQL "$@"
      rc=$?
      ran_postgres=1
      ;;
    sqlite)
      # What CI starts beside this run (KESTREL_TEST_BESIDE_SQLITE, .ci/run: the cloud extra's
      # install), niced: its timing-bound fault tests run on PostgreSQL's run, not this one.
      if [ -n "${KESTREL_TEST_BESIDE_SQLITE:-}" ]; then
        nice -n 10 bash -c "$KESTREL_TEST_BESIDE_SQLITE" &
        beside=$!
      fi
      # Test databases are files under a folder of the run's own (one per xdist worker).
      sqlite_dir=$(mktemp -d -t kestrel-test-sqlite-XXXXXX)
      # After a PostgreSQL run, leave out what it has shown and no database changes (tests
      # that touch none, and those marked same_on_any_database; tests/conftest.py).
      once=""
      [ "$ran_postgres" = 1 ] && once=postgres
      KESTREL_TEST_ONCE=$once DATABASE_URL="sqlite:///$sqlite_dir/kestrel.sqlite3" \
        KESTREL_TEST_DB="$sqlite_dir/test_kestrel.sqlite3" \
        suite SQLite "$@"
      rc=$?
      ;;
    *) echo "KESTREL_TEST_DATABASES: unknown database '$database' (postgres, sqlite)" >&2; exit 2 ;;
  esac
  if [ "$rc" -ne 0 ]; then
    echo "=== The suite on $database failed (pytest exit $rc) ===" >&2
    [ "$status" -eq 0 ] && status=$rc
  fi
  rm -rf "${sqlite_dir:-/nonexistent}"
done
if [ -n "${beside:-}" ]; then
  wait "$beside" || echo "=== What ran beside the SQLite run failed: $KESTREL_TEST_BESIDE_SQLITE ===" >&2
fi
exit "$status"
