#!/usr/bin/env bash
# Does `pip install -e '.[cloud]'` install on a fresh machine, and does Kestrel's SkyPilot
# provider (training jobs, and dedicated endpoints through SkyServe) work with what it
# installs? SkyPilot 0.14.1 pins click<8.2 while celery 5.7 needs click>=8.3.1; the extra caps
# celery below 5.7. This installs the extra (with the test tools) in a new virtual environment,
# checks what pip picked, and runs the SkyPilot tests there: the three that need the real
# package (its task parser, its ManagedJobStatus list, its SDK without an API server) and the
# endpoint's service check (its task and service-spec parsers on
# Kestrel's SkyServe service) are skipped in the main environment, which has no SkyPilot.
# CI runs it after the suite (.ci/run), on Redis databases the suite's xdist workers leave alone
# (they take 9 to 14). About 2 minutes of install (pip compiles no module: 3 minutes when it
# compiled them all) and 20 s of tests.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --upgrade pip 2>&1 | grep -v "is ignored: it is neither" || true
"$work/venv/bin/pip" install -q --no-compile --report "$work/report.json" -e '.[cloud,test]' 2>&1 \
  | grep -v "is ignored: it is neither a file nor a directory" || true
[ -s "$work/report.json" ] || { echo "cloud extra: pip did not install it" >&2; exit 1; }
"$work/venv/bin/python" - "$work/report.json" <<'PY'
import json, sys
from importlib import metadata
need = ("skypilot", "celery", "click", "django", "torch", "ultralytics")
picked = {n: metadata.version(n) for n in need}
count = len(json.load(open(sys.argv[1]))["install"])
print("cloud extra installs:", ", ".join(f"{n} {v}" for n, v in picked.items()), f"({count} packages)")
PY
# The tests import Kestrel from this checkout (the repo root is pytest's rootdir), with
# SkyPilot from the new environment; SkyPilot's own files go to a home of the run's own.
mkdir -p "$work/home"
HOME="$work/home" SKYPILOT_DISABLE_LOCAL_API_SERVER=1 \
  DJANGO_SETTINGS_MODULE=config.test_settings \
  DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/kestrel} \
  KESTREL_TEST_DB=test_kestrel_cloud \
  REDIS_URL=redis://127.0.0.1:6379/6 CELERY_BROKER_URL=redis://127.0.0.1:6379/5 \
  CACHE_KEY_PREFIX=cloud \
  "$work/venv/bin/pytest" -p no:cacheprovider -q -rs -m "not slow" \
  tests/training/test_skypilot.py tests/training/test_skypilot_beat.py \
  tests/training/test_gpu_admin.py \
  "tests/deploy/test_endpoint_skyserve.py::test_skypilots_own_parsers_load_the_service"
