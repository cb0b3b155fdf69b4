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
# (they take 9 to 14).
#
# pip resolves the whole extra as on a fresh machine (a dry run into an empty environment, its
# report kept), then installs into the new environment only what the suite's own (.venv, made
# by `make test`) lacks at the version pip picked: here SkyPilot and what it pins (click,
# celery below 5.7, ...). The rest, torch and Ultralytics among it, is read from .venv, after
# the new environment's own packages (a .pth line), at the very versions pip picked. Installing
# everything again cost 2 to 3 minutes of CI's 45, mostly unpacking torch once more.
#
#   scripts/cloud_extra_check.sh                both, in a folder of its own
#   scripts/cloud_extra_check.sh install DIR    the environment, in DIR (.ci/run: beside the
#   scripts/cloud_extra_check.sh test DIR       suite's SQLite run, niced), then its tests
set -euo pipefail
cd "$(dirname "$0")/.."
phase=${1:-all}
if [ "$phase" = all ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
else
  work=${2:?"cloud_extra_check.sh $phase needs its folder"}
fi

install() {
rm -f "$work/installed"
rm -rf "$work/venv"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --upgrade pip 2>&1 | grep -v "is ignored: it is neither" || true
"$work/venv/bin/pip" install -q --dry-run --ignore-installed --report "$work/report.json" \
  -e '.[cloud,test]' 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true
[ -s "$work/report.json" ] || { echo "cloud extra: pip did not resolve it" >&2; exit 1; }
suite_site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
own_site=$("$work/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
.venv/bin/python - "$work/report.json" > "$work/missing.txt" <<'PY'
import json, sys
from importlib import metadata
from packaging.utils import canonicalize_name
have = {canonicalize_name(d.metadata["Name"]): d.version for d in metadata.distributions()}
for item in json.load(open(sys.argv[1]))["install"]:
    meta = item["metadata"]
    name = canonicalize_name(meta["name"])
    if name != "kestrel" and have.get(name) != meta["version"]:
        print(f"{name}=={meta['version']}")
PY
echo "cloud extra: $(wc -l < "$work/missing.txt") packages to install beside the suite's own"
if [ -s "$work/missing.txt" ]; then
  "$work/venv/bin/pip" install -q --no-compile --no-deps -r "$work/missing.txt" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true
fi
echo "import site; site.addsitedir('$suite_site')" > "$own_site/zz_kestrel_suite.pth"
"$work/venv/bin/python" - "$work/report.json" <<'PY'
import json, sys
from importlib import metadata
need = ("skypilot", "celery", "click", "django", "torch", "ultralytics")
picked = {n: metadata.version(n) for n in need}
from packaging.utils import canonicalize_name
report = json.load(open(sys.argv[1]))["install"]
resolved = {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in report}
wrong = {n: (v, resolved.get(n)) for n, v in picked.items() if resolved.get(n) not in (None, v)}
if wrong:
    sys.exit(f"cloud extra: imported versions differ from pip's picks: {wrong}")
print("cloud extra installs:", ", ".join(f"{n} {v}" for n, v in picked.items()), f"({len(resolved)} packages)")
PY
touch "$work/installed"
}

tests() {
[ -f "$work/installed" ] || { echo "cloud extra: not installed in $work" >&2; exit 1; }
# The tests import Kestrel from this checkout (the repo root is pytest's rootdir), with
# SkyPilot from the new environment; SkyPilot's own files go to a home of the run's own.
mkdir -p "$work/home"
HOME="$work/home" SKYPILOT_DISABLE_LOCAL_API_SERVER=1 \
  DJANGO_SETTINGS_MODULE=config.test_settings \
  DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/kestrel} \
  KESTREL_TEST_DB=test_kestrel_cloud \
  REDIS_URL=redis://127.0.0.1:6379/6 CELERY_BROKER_URL=redis://127.0.0.1:6379/5 \
  CACHE_KEY_PREFIX=cloud \
  "$work/venv/bin/python" -m pytest -p no:cacheprovider -q -rs -m "not slow" \
  tests/training/test_skypilot.py tests/training/test_skypilot_beat.py \
  tests/training/test_gpu_admin.py \
  "tests/deploy/test_endpoint_skyserve.py::test_skypilots_own_parsers_load_the_service"
}

case "$phase" in
  all) install; tests ;;
  install) install ;;
  test) tests ;;
  *) echo "cloud_extra_check.sh: all, install DIR or test DIR, not '$phase'" >&2; exit 2 ;;
esac
