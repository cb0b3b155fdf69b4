#!/usr/bin/env bash
# The GPU-only measurements, in one go on a machine with an NVIDIA GPU (sized for an H200 with 16
# cores: under 8 minutes), each part under a timeout of its own, the figures in one block at the
# end:
#   (a) the model server's micro-batching: images/s at concurrency 8, batched against one at a
#       time, on cuda:0 (bench/predict.py --throughput-only);
#   (b) a Kestrel job's training overhead on CUDA against plain Ultralytics with the same
#       arguments (bench/train_overhead.py --device 0);
#   (c) NVML system samples of a real job on "This machine": stored with the GPU's utilisation
#       and memory, and on the job page and in its event feed (bench/train_overhead.py --samples).
#
#   bash bench/gpu.sh                # on the GPU machine; exits 2 when it finds no CUDA device
#   bash bench/gpu.sh --dry-run      # anywhere: every part on the CPU, tiny sizes (proves the
#                                    # script; KESTREL_GPU_CHECK_CPU=1 is the same)
#   bash bench/gpu.sh --fetch-wheels # where PyPI and Debian answer: the wheels and .debs a bare
#                                    # GPU machine lacks, into .whl/ (see "Python" below)
#   bash bench/gpu.sh --install-only # on the GPU machine: install the carried wheels, no checks
#
# Python: $KESTREL_PYTHON, else .venv when it has what the benches import (made with
# `make .venv/.installed-test` when missing, which needs PyPI), else the machine's own python3
# (its CUDA torch) with the wheels of .whl*/ (carried there) on PYTHONPATH, else it stops
# saying what is missing. Redis: REDIS_URL when one answers, else a redis-server of its
# own (on PATH, or from the carried .debs). Database: DATABASE_URL, else a SQLite file of the
# run's own. Nothing else is reached: model servers and the web stay on 127.0.0.1.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

DRY=${KESTREL_GPU_CHECK_CPU:-0}
FETCH=0
INSTALL_ONLY=0
for arg in "$@"; do
  case "$arg" in
    --dry-run) DRY=1 ;;
    --fetch-wheels) FETCH=1 ;;
    --install-only) INSTALL_ONLY=1 ;;
    -h | --help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "bench/gpu.sh: unknown option $arg (--dry-run, --fetch-wheels, --install-only)" >&2; exit 2 ;;
  esac
done

# What the benches import that the GPU machine's python3 lacks (it has torch, numpy, OpenCV,
# matplotlib, psutil, httpx, requests, nvidia-ml-py, PyYAML, Pillow): these versions, from the
# lock of this checkout's .venv where there is one.
WHEELS=(django django-allauth django-environ django-htmx django-template-partials django-ninja
  django-csp django-storages celery kombu billiard vine amqp click-didyoumean click-plugins
  click-repl prompt_toolkit wcwidth tzlocal redis asgiref sqlparse pydantic pydantic_core
  typing-inspection annotated-types whitenoise defusedxml ultralytics ultralytics-thop polars
  polars-runtime-32 stripe uvicorn)
DEBS=(redis-server redis-tools liblzf1 libjemalloc2)

if [ "$FETCH" = 1 ]; then
  mkdir -p .whl/debs
  grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >>.git/info/exclude
  specs=()
  for name in "${WHEELS[@]}"; do
    version=$(.venv/bin/python -m pip show "$name" 2>/dev/null | sed -n 's/^Version: //p')
    specs+=("$name${version:+==$version}")
  done
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "${specs[@]}" || exit 1
  (cd .whl/debs && apt-get download "${DEBS[@]}") || exit 1
  # polars' runtime is most of it (about 54 MB): a folder of its own, carried in a call of its own.
  mkdir -p .whl-polars
  grep -qx '/.whl-polars/' .git/info/exclude || echo '/.whl-polars/' >>.git/info/exclude
  mv .whl/polars_runtime* .whl-polars/
  du -sh .whl .whl-polars
  echo "A call carries at most 64 MiB with the tree: carry .whl-polars in a first call that runs"
  echo "'bash bench/gpu.sh --install-only', then .whl in the next (while the machine is warm)"
  echo "that runs 'bash bench/gpu.sh'."
  exit 0
fi

work=$(mktemp -d -t kestrel-gpu-XXXXXX)
# Every process of this run carries this mark in its environment (the benches start theirs in
# sessions of their own, out of reach of a process-group kill): what a timed-out part leaves,
# a Celery worker, a trainer, a model server, is found by it and stopped.
export KESTREL_GPU_RUN=$work
pids=()
leftovers_stop() {
  [ -n "${PY:-}" ] || return 0
  "$PY" scripts/stop_tagged.py KESTREL_GPU_RUN "$work" \
    "gpu.sh: stopped {count} process(es) left running" 2>/dev/null
}
stop_all() {
  leftovers_stop
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  rm -rf "$work"
}
trap stop_all EXIT
trap 'exit 130' INT TERM

say() { echo "gpu.sh: $*"; }
fail() { echo "gpu.sh: $1" >&2; exit "${2:-1}"; }

# --- Python ---------------------------------------------------------------------------------
NEEDED="django environ allauth ninja pydantic_core celery redis httpx ultralytics polars torch psutil"
missing() { # the modules of NEEDED that python $1 cannot import (found without importing them)
  "$1" -c 'import importlib.util as u, sys; print(" ".join(m for m in sys.argv[1:] if not u.find_spec(m)))' $NEEDED 2>/dev/null || echo "(python does not run)"
}
works() { [ -x "$1" ] && [ -z "$(missing "$1")" ]; }
# Carried wheels go to a folder on PYTHONPATH, over the machine's python3 (a venv of its own
# there: a venv made from it would not see its torch).
GPU_SITE=/tmp/kestrel-gpu-site
wheel_install() {
  local dirs=() found=() d deb
  shopt -s nullglob
  dirs=(.whl*/)
  for d in "${dirs[@]}"; do found+=("$d"*.whl); done
  shopt -u nullglob
  [ ${#found[@]} -gt 0 ] || return 1
  say "installing ${#found[@]} carried wheels (${dirs[*]}) into $GPU_SITE"
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$GPU_SITE" \
    "${found[@]}" || return 1
  for d in "${dirs[@]}"; do
    for deb in "$d"debs/*.deb; do
      [ -f "$deb" ] && dpkg -x "$deb" /tmp/kestrel-gpu-root
    done
  done
  return 0
}
site_missing() { PYTHONPATH=$GPU_SITE${PYTHONPATH:+:$PYTHONPATH} missing python3; }
works_site() { [ -d "$GPU_SITE" ] && [ -z "$(site_missing)" ]; }
if [ "$INSTALL_ONLY" = 1 ]; then
  wheel_install || fail "no carried wheels (.whl*/) to install, or pip refused them"
  left=$(site_missing)
  say "installed into $GPU_SITE; still missing: ${left:-nothing}"
  exit 0
fi
PY=${KESTREL_PYTHON:-}
if [ -z "$PY" ]; then
  if works .venv/bin/python; then
    PY=.venv/bin/python
  elif works_site; then
    PY=$(command -v python3)
    export PYTHONPATH=$GPU_SITE${PYTHONPATH:+:$PYTHONPATH}
  else
    if [ ! -e .venv/.installed-test ]; then
      say "no working .venv: make .venv/.installed-test (needs PyPI; 5 min at most)"
      if ! PIP_RETRIES=0 PIP_TIMEOUT=10 timeout 300 make -s .venv/.installed-test >"$work/make.log" 2>&1; then
        say "make failed (its last lines below); trying carried wheels"
        tail -3 "$work/make.log"
      fi
    fi
    if works .venv/bin/python; then
      PY=.venv/bin/python
    elif wheel_install && works_site; then
      PY=$(command -v python3)
      export PYTHONPATH=$GPU_SITE${PYTHONPATH:+:$PYTHONPATH}
    else
      fail "no Python with Kestrel's packages here: .venv could not be made (no PyPI?) and no
carried wheels (.whl/) did it. Where PyPI answers, run 'bash bench/gpu.sh --fetch-wheels' and
carry .whl; or point KESTREL_PYTHON at a python that has: $NEEDED."
    fi
  fi
fi
PY=$(cd "$(dirname "$PY")" && pwd)/$(basename "$PY")
export PATH="$(dirname "$PY"):/tmp/kestrel-gpu-root/usr/bin:$PATH"
say "Python: $PY"

if [ "$DRY" = 1 ]; then
  say "dry run: every part on the CPU, tiny sizes"
  device=cpu
else
  if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    smi=$(command -v nvidia-smi >/dev/null && nvidia-smi -L 2>&1 | head -2)
    fail "no CUDA device found (torch.cuda.is_available() is False; nvidia-smi: ${smi:-not there}).
Run it on a GPU machine, or with --dry-run to check the script on the CPU." 2
  fi
  device=cuda:0
fi

# --- services -------------------------------------------------------------------------------
redis_answers() { "$PY" -c "import redis,sys; redis.Redis.from_url(sys.argv[1], socket_timeout=1).ping()" "$1" 2>/dev/null; }
if [ -n "${REDIS_URL:-}" ] && redis_answers "$REDIS_URL"; then
  say "Redis at $REDIS_URL"
elif command -v redis-server >/dev/null; then
  port=$("$PY" -c "import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
  env -u KESTREL_GPU_RUN redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --dir "$work" \
    --logfile "$work/redis.log" &
  pids+=($!)
  REDIS_URL=redis://127.0.0.1:$port/0
  for _ in $(seq 50); do redis_answers "$REDIS_URL" && break; sleep 0.1; done
  redis_answers "$REDIS_URL" || fail "redis-server did not start (see $work/redis.log)"
  say "Redis of its own at $REDIS_URL"
else
  REDIS_URL=""
  say "no Redis and no redis-server: parts (b) and (c) are skipped (carry the .debs of --fetch-wheels)"
fi
export REDIS_URL CELERY_BROKER_URL=$REDIS_URL
export DATABASE_URL=${DATABASE_URL:-sqlite:///$work/kestrel.sqlite3}
mkdir -p "$work/var/static" # STATIC_ROOT: WhiteNoise warns without one
export KESTREL_VAR_DIR=$work/var YOLO_OFFLINE=1 YOLO_AUTOINSTALL=0 PYTHONUNBUFFERED=1
export DJANGO_SETTINGS_MODULE=config.settings

# --- the parts ------------------------------------------------------------------------------
declare -A status seconds
part() { # part NAME TIMEOUT command...
  local name=$1 limit=$2
  shift 2
  say "($name) $* [timeout ${limit} s]"
  local started=$SECONDS
  # Into a file, shown as it grows: a pipe would stay open as long as anything the part left
  # behind holds its end, a timed-out part's worker say, and hold the script up with it.
  timeout --kill-after=15 "$limit" "$@" >"$work/$name.log" 2>&1 &
  local pid=$!
  tail -n +1 --pid="$pid" -f "$work/$name.log" &
  local shown=$!
  wait "$pid" # in the background and waited for: a Ctrl-C or TERM is acted on at once
  local rc=$?
  wait "$shown"
  leftovers_stop
  seconds[$name]=$((SECONDS - started))
  case $rc in
    0) status[$name]=ok ;;
    124 | 137) status[$name]="TIMED OUT after ${limit} s" ;;
    *) status[$name]="failed (exit $rc)" ;;
  esac
}

if [ "$DRY" = 1 ]; then
  a_args=(--concurrency 2 --requests 4 --imgsz 64)
  b_args=(--epochs 1 --imgsz 64 --rounds 1)
  c_args=(--epochs 2 --imgsz 64 --rounds 1 --kestrel-only)
else
  a_args=(--concurrency 8 --device "$device")
  b_args=(--device 0)
  c_args=(--device 0 --epochs 10 --rounds 1 --kestrel-only)
fi
part a 150 "$PY" bench/predict.py --throughput-only "${a_args[@]}"
if [ -n "$REDIS_URL" ]; then
  part b 240 "$PY" bench/train_overhead.py "${b_args[@]}"
  # Samples every second (half the heartbeat), so a short run has a few dozen.
  TRAINING_HEARTBEAT_SECONDS=2 part c 150 "$PY" bench/train_overhead.py --samples "${c_args[@]}"
else
  status[b]="skipped: no Redis"
  status[c]="skipped: no Redis"
fi

# --- the figures ----------------------------------------------------------------------------
echo
echo "=== Kestrel GPU checks ($([ "$DRY" = 1 ] && echo "DRY RUN on the CPU, tiny sizes" || nvidia-smi --query-gpu=name --format=csv,noheader | head -1)) ==="
figures() { [ -f "$work/$1.log" ] && grep -E "$2" "$work/$1.log" | sed 's/^/    /'; }
echo "(a) micro-batching, ${status[a]} (${seconds[a]:-0} s)"
figures a "^(throughput at|one at a time|micro-batched|ratio )"
echo "(b) training overhead, ${status[b]} (${seconds[b]:-0} s)"
figures b "^(round |[0-9]+ epochs of|training wall-time ratio|submit → first batch)"
echo "(c) system samples on the job page, ${status[c]} (${seconds[c]:-0} s)"
figures c "^(  system samples:|system samples stored)"
for name in a b c; do [ "${status[$name]}" = ok ] || exit 1; done
