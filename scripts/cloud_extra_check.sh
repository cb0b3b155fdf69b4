#!/usr/bin/env bash
# Does `pip install -e '.[cloud]'` resolve on a fresh machine? SkyPilot 0.14.1 pins click<8.2
# while celery 5.7 needs click>=8.3.1; the extra caps celery below 5.7. This resolves the extra
# in a new virtual environment (pip's --dry-run: nothing is installed) and checks what it picked.
# CI runs it after the suite (.ci/run); about 12 minutes here, mostly waiting on the index.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q --dry-run --report "$work/report.json" -e '.[cloud]' 2>&1 \
  | grep -v "is ignored: it is neither a file nor a directory" || true
[ -s "$work/report.json" ] || { echo "cloud extra: pip did not resolve it" >&2; exit 1; }
python3 - "$work/report.json" <<'PY'
import json, sys
picked = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.load(open(sys.argv[1]))["install"]}
need = ("skypilot", "celery", "click", "django", "torch", "ultralytics")
missing = [n for n in need if n not in picked]
if missing:
    sys.exit(f"cloud extra: {', '.join(missing)} not in the resolution")
print("cloud extra resolves:", ", ".join(f"{n} {picked[n]}" for n in need), f"({len(picked)} packages)")
PY
