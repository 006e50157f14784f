#!/usr/bin/env bash
# Start the bundled Redis 8 with RedisJSON and RediSearch: scripts/redis.sh PORT [extra redis-server args]
set -euo pipefail
DEPS="${MEMPROXY_DEPS:-$HOME/.cache/memproxy}"
PORT="${1:?usage: scripts/redis.sh PORT [redis-server args...]}"; shift
"$(dirname "$0")/setup.sh"
exec "$DEPS/bin/redis-server" --port "$PORT" --save "" --appendonly no \
  --loadmodule "$DEPS/lib/rejson.so" --loadmodule "$DEPS/lib/redisearch.so" "$@"
