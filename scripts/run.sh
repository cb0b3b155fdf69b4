#!/usr/bin/env bash
# Quick start: migrate, seed, then web (uvicorn), a Celery worker, a training worker, the model
# server and Celery beat under supervisord (scripts/supervisord.conf) until Ctrl-C. A program
# that dies is started again; one that keeps dying at start is given up on, and says so here.
# Logs are appended in $KESTREL_VAR_DIR/log/ (default var/log/), rotated by size.
# Environment: HOST, PORT (8000), INFERENCE_PORT (8765), REDIS_URL, KESTREL_VAR_DIR (var),
# KESTREL_SEED_DEMO=0 to skip the demo seed, each from the environment or .env; the rest is
# read by config/settings.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
CONF=scripts/supervisord.conf
# A .env sets this script's variables as it sets the settings' (config/env_file.py; what the
# environment says wins): HOST=0.0.0.0 in .env is where the web listens.
env_lines=$($PY -m config.env_file)
eval "$env_lines"
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
INFERENCE_PORT=${INFERENCE_PORT:-8765}
# Everything this command writes (database, media, secret key, logs, supervisord's socket) goes
# under KESTREL_VAR_DIR; settings read it too. Absolute, since supervisord's programs need it so.
var_dir=${KESTREL_VAR_DIR:-var}
mkdir -p "$var_dir/media" "$var_dir/log"
KESTREL_VAR_DIR=$(cd "$var_dir" && pwd)
# The web forwards predictions to the model server started here (unless told another).
INFERENCE_URL=${INFERENCE_URL:-http://127.0.0.1:$INFERENCE_PORT}
PYTHONUNBUFFERED=1 # programs' output reaches their logs as it is written
# Each program (and each trainer, model server and inspector it starts) keeps the bytecode it
# compiles for the next: with PYTHONDONTWRITEBYTECODE set, every trainer compiled torch and
# Ultralytics from source again, 4.6 s before its first batch.
unset PYTHONDONTWRITEBYTECODE
export HOST PORT REDIS_URL INFERENCE_PORT INFERENCE_URL KESTREL_VAR_DIR PYTHONUNBUFFERED
socket_url=unix://$KESTREL_VAR_DIR/supervisor.sock
ctl() { .venv/bin/supervisorctl -c "$CONF" "$@"; }
redis_answers() {
  $PY -c "import redis,sys; redis.Redis.from_url(sys.argv[1], socket_timeout=1).ping()" "$REDIS_URL" 2>/dev/null
}

sv_pid=""
ours="" # set once our supervisord answers on the socket: only then is there anything to stop
stop_all() {
  trap - EXIT
  trap '' INT TERM # a second Ctrl-C must not leave supervisord's programs behind
  if [ -n "$sv_pid" ] && kill -0 "$sv_pid" 2>/dev/null; then
    echo
    echo "Stopping Kestrel (running tasks get up to 30 s to finish)..."
    kill -TERM "$sv_pid" 2>/dev/null || true
  fi
  if [ -n "$sv_pid" ]; then wait "$sv_pid" 2>/dev/null || true; fi
  if [ -z "$ours" ]; then return; fi # another run's supervisord holds the socket: leave it be
  # Dedicated endpoints run detached (they outlive a worker's restart); with everything else
  # gone, stop them too. Those meant to run start again with the next `make run`.
  $PY manage.py deployments_halt 2>/dev/null || true
  # Whatever supervisord started and did not stop (it was killed, say) still names its socket
  # in its environment: stop that too, so the next `make run` finds its ports free.
  $PY scripts/stop_tagged.py SUPERVISOR_SERVER_URL "$socket_url" \
    "Stopped {count} process(es) supervisord had left running." || true
  echo "Stopped."
}
on_exit() {
  local status=$?
  stop_all
  exit "$status"
}
on_signal() {
  stop_all
  exit 0
}
trap on_exit EXIT
trap on_signal INT TERM

# Redis: use the one that answers; else supervisord runs one as long as this command.
KESTREL_START_REDIS=false
KESTREL_REDIS_PORT=$($PY -c "import sys,urllib.parse as u; print(u.urlparse(sys.argv[1]).port or 6379)" "$REDIS_URL")
if ! redis_answers; then
  if command -v redis-server >/dev/null; then
    echo "No Redis answered at $REDIS_URL; starting redis-server on port $KESTREL_REDIS_PORT (stops with Ctrl-C)."
    KESTREL_START_REDIS=true
  else
    echo "Kestrel needs Redis at $REDIS_URL and none answered." >&2
    echo "Install it (Debian/Ubuntu: sudo apt-get install redis-server; macOS: brew install redis)," >&2
    echo "or point REDIS_URL at a running one, then run 'make run' again." >&2
    exit 1
  fi
fi
export KESTREL_START_REDIS KESTREL_REDIS_PORT

# supervisord in the foreground, as this command's child: its lines (spawned, exited, gave up)
# show here and in supervisord.log. The Kestrel programs wait (autostart=false) for migrations.
.venv/bin/supervisord -n -c "$CONF" &
sv_pid=$!
until [ "$(ctl pid 2>/dev/null)" = "$sv_pid" ]; do
  if ! kill -0 "$sv_pid" 2>/dev/null; then
    echo "supervisord did not start (see above; is Kestrel already running?)." >&2
    exit 1
  fi
  sleep 0.1
done
ours=1
if [ "$KESTREL_START_REDIS" = true ]; then
  for _ in $(seq 50); do
    redis_answers && break
    sleep 0.1
  done
  if ! redis_answers; then
    echo "redis-server did not start; see $var_dir/log/redis.log." >&2
    exit 1
  fi
fi

$PY manage.py migrate --noinput -v0
if [ "${KESTREL_SEED_DEMO:-1}" != 0 ]; then
  $PY manage.py seed_demo
fi

# `supervisorctl start` would wait out each program's startsecs; the web answering is what this
# command waits for, and supervisord reports the others.
$PY -c 'import sys; from supervisor.childutils import getRPCInterface as rpc
rpc({"SUPERVISOR_SERVER_URL": sys.argv[1]}).supervisor.startProcessGroup("kestrel", False)' "$socket_url"

web_up=""
for _ in $(seq 300); do
  kill -0 "$sv_pid" 2>/dev/null || break
  if $PY -c "import sys,urllib.request as r; r.urlopen(sys.argv[1], timeout=1)" "http://$HOST:$PORT/accounts/login/" 2>/dev/null; then
    web_up=1
    break
  fi
  sleep 0.2
done
echo
if [ -n "$web_up" ]; then
  echo "Kestrel is running at http://$HOST:$PORT/  (logs in ${var_dir%/}/log/; Ctrl-C stops all)"
else
  echo "The web server did not answer at http://$HOST:$PORT/; see ${var_dir%/}/log/web.log." >&2
fi

status=0
wait "$sv_pid" || status=$?
sv_pid=""
echo "supervisord exited (status $status): Kestrel has stopped." >&2
# Status 0 is a stop that was asked for: Ctrl-C reaches supervisord as well as this script, and
# when supervisord is done first, `wait` returns before the INT trap has run.
[ "$status" -eq 0 ] && exit 0
exit 1
