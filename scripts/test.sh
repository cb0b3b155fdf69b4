#!/usr/bin/env bash
# The whole suite against the real PostgreSQL and Redis (DATABASE_URL, REDIS_URL).
set -euo pipefail
cd "$(dirname "$0")/.."
export DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/kestrel}
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
.venv/bin/python manage.py collectstatic --noinput -v0
# In parallel (pytest-xdist), a test file per worker at a time: a file's session fixtures (a
# model server, trained checkpoints) are made once. Three workers on two cores: a good part of
# the suite waits on processes it started (servers, trainers, faults), and a third worker fills
# that. TEST_WORKERS=0 runs it in one process.
exec .venv/bin/pytest -n "${TEST_WORKERS:-3}" --dist loadfile --durations=25 "$@"
