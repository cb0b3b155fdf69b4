#!/usr/bin/env bash
# Quick start: migrate, seed, then web (uvicorn) + Celery worker + Celery beat until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
HOST=${HOST:-127.0.0.1}
PORT=${PORT:-8000}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
export REDIS_URL
mkdir -p var/media var/log

pids=()
cleanup() {
  trap - INT TERM EXIT
  echo
  echo "Stopping Kestrel..."
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # Dedicated endpoints run detached (they outlive a worker's restart); with everything else
  # gone, stop them too. Those meant to run start again with the next `make run`.
  $PY manage.py deployments_halt 2>/dev/null || true
  echo "Stopped."
}
trap cleanup INT TERM EXIT

# Redis: use the one that answers; else start one that lives as long as this command.
if ! $PY -c "import redis,sys; redis.Redis.from_url(sys.argv[1], socket_timeout=1).ping()" "$REDIS_URL" 2>/dev/null; then
  if command -v redis-server >/dev/null; then
    redis_port=$($PY -c "import sys,urllib.parse as u; print(u.urlparse(sys.argv[1]).port or 6379)" "$REDIS_URL")
    echo "No Redis answered at $REDIS_URL; starting redis-server on port $redis_port (stops with Ctrl-C)."
    redis-server --bind 127.0.0.1 --port "$redis_port" --save "" --appendonly no \
      --dir "$PWD/var" --logfile "$PWD/var/log/redis.log" &
    pids+=($!)
    redis_up=""
    for _ in $(seq 50); do
      if $PY -c "import redis,sys; redis.Redis.from_url(sys.argv[1], socket_timeout=1).ping()" "$REDIS_URL" 2>/dev/null; then
        redis_up=1; break
      fi
      sleep 0.1
    done
    if [ -z "$redis_up" ]; then
      echo "redis-server did not start; see var/log/redis.log." >&2
      exit 1
    fi
  else
    echo "Kestrel needs Redis at $REDIS_URL and none answered." >&2
    echo "Install it (Debian/Ubuntu: sudo apt-get install redis-server; macOS: brew install redis)," >&2
    echo "or point REDIS_URL at a running one, then run 'make run' again." >&2
    exit 1
  fi
fi

$PY manage.py migrate --noinput -v0
$PY manage.py seed_demo

# Live job pages hold their event streams open for hours: on stop, give them 5 s, then close
# (browsers reconnect by themselves and resume with Last-Event-ID).
# config.web: uvicorn, believing X-Forwarded-For only from TRUSTED_PROXIES (none by default).
$PY -m config.web --host "$HOST" --port "$PORT" --log-level warning \
  --timeout-graceful-shutdown 5 &
pids+=($!)
.venv/bin/celery -A config worker -Q default --concurrency 2 --loglevel INFO \
  >var/log/worker.log 2>&1 &
pids+=($!)
# Training jobs one at a time on this machine, in a worker of their own: a long run never
# holds up imports and thumbnails.
.venv/bin/celery -A config worker -Q training --concurrency 1 --hostname "training@%h" \
  --loglevel INFO >var/log/training.log 2>&1 &
pids+=($!)
# The shared inference API's model server (warm models, micro-batched); web forwards to it.
$PY -m deploy.inference --host 127.0.0.1 --port 8765 --name shared >var/log/inference.log 2>&1 &
pids+=($!)
.venv/bin/celery -A config beat --schedule var/celerybeat-schedule --loglevel INFO \
  >var/log/beat.log 2>&1 &
pids+=($!)

for _ in $(seq 100); do
  $PY -c "import sys,urllib.request as r; r.urlopen(sys.argv[1], timeout=1)" "http://$HOST:$PORT/accounts/login/" 2>/dev/null && break
  sleep 0.2
done
echo
echo "Kestrel is running at http://$HOST:$PORT/  (worker, training, inference and beat logs in var/log/; Ctrl-C stops all)"
wait -n "${pids[@]}" || true
