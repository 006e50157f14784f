#!/usr/bin/env bash
# Set up the dependencies if needed, build memproxy, start a local Redis 8 with RedisJSON and
# RediSearch on REDIS_PORT (default 6379) unless one answers there already, and run memproxy in
# front of it on 127.0.0.1:6380, with its HTTP listener (demo page, MCP, metrics) on
# HTTP_LISTEN (default 127.0.0.1:8080). Extra arguments go to memproxy. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."
DEPS="${MEMPROXY_DEPS:-$HOME/.cache/memproxy}"
REDIS_PORT="${REDIS_PORT:-6379}"
scripts/setup.sh
cargo build --release --locked
redis_pid=""
if (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null; then
  echo "run: using the Redis already listening on 127.0.0.1:$REDIS_PORT" >&2
else
  scripts/redis.sh "$REDIS_PORT" --bind 127.0.0.1 --daemonize no >"${TMPDIR:-/tmp}/memproxy-redis-$REDIS_PORT.log" 2>&1 &
  redis_pid=$!
  trap '[ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null' EXIT
  for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$REDIS_PORT") 2>/dev/null && break; sleep 0.1; done
  echo "run: started Redis 8 with RedisJSON + RediSearch on 127.0.0.1:$REDIS_PORT (pid $redis_pid)" >&2
fi
HTTP_LISTEN="${HTTP_LISTEN:-127.0.0.1:8080}"
echo "run: connect with: redis-cli -p 6380   (try: MEM.REMEMBER \"The user prefers tea\" KIND semantic)" >&2
echo "run: the demo page:  http://$HTTP_LISTEN/   (reset seeds the guide's example memories)" >&2
echo "run: MCP endpoint:   http://$HTTP_LISTEN/mcp  (streamable HTTP; tools remember, recall, forget, turn, session)" >&2
./target/release/memproxy --upstream "redis://127.0.0.1:$REDIS_PORT" --http-listen "$HTTP_LISTEN" "$@"
