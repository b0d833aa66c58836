# Sourced by scripts/test: uses the Redis on 127.0.0.1:6379 when it answers, else starts one
# of our own on a free port (installing redis-server when it is missing) and stops it on exit.
redis_answers() { "$root/.venv/bin/python" - "$1" <<'PY'
import sys, redis
try:
    sys.exit(0 if redis.Redis.from_url(sys.argv[1], socket_timeout=1).ping() else 1)
except Exception:
    sys.exit(1)
PY
}
if [ -z "${REDIS_URL:-}" ]; then
  if redis_answers redis://127.0.0.1:6379/0; then
    export REDIS_URL=redis://127.0.0.1:6379/0
  else
    if ! command -v redis-server >/dev/null 2>&1; then
      echo "redis-server not found; installing it" >&2
      (apt-get update -qq && apt-get install -y -qq redis-server) >/dev/null 2>&1 || true
    fi
    if command -v redis-server >/dev/null 2>&1; then
      port=$("$root/.venv/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
      mkdir -p "$root/.redis-test"
      redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize yes \
        --dir "$root/.redis-test" --pidfile "$root/.redis-test/redis.pid" >/dev/null
      trap 'kill "$(cat "$root/.redis-test/redis.pid" 2>/dev/null)" 2>/dev/null' EXIT
      export REDIS_URL="redis://127.0.0.1:$port/0"
      for _ in $(seq 50); do redis_answers "$REDIS_URL" && break; sleep 0.1; done
    else
      echo "No Redis answers and redis-server could not be installed: Redis tests will be skipped." >&2
    fi
  fi
fi
