#!/usr/bin/env bash
# Run Redis's own test suite (external mode) against Redis directly and through memproxy, and list
# the tests whose outcome differs. Needs tclsh and a checkout of the Redis sources (its tests/ and
# runtest), e.g. `git clone https://github.com/redis/redis`:
#   scripts/redis-suite.sh /path/to/redis [unit/type/list unit/multi ...]
# With no units given, a set that exercises connection state, blocking commands, transactions,
# pub/sub, tracking, scripting and the protocol is run. Uses the bundled Redis 8 with modules and
# the release memproxy binary (cargo build --release; MEMPROXY_BIN=path for another).
# CLUSTER=1: memproxy in front of a 3-master Redis Cluster instead (made with redis-cli --cluster
# create), both runs with runtest's --cluster-mode (tests tagged cluster:skip, those that use keys of
# several slots or other databases, are left out), the direct run still against one Redis: what
# passes there and fails through memproxy is what a client would see change.
set -euo pipefail
HERE="$(cd "$(dirname "$0")/.." && pwd)"
SRC="${1:?usage: scripts/redis-suite.sh /path/to/redis [units...]}"; shift
UNITS=("$@")
[ ${#UNITS[@]} -gt 0 ] || UNITS=(unit/type/list unit/type/list-2 unit/type/zset unit/type/stream-cgroups
  unit/type/incr unit/type/hash unit/multi unit/protocol unit/pubsub unit/tracking unit/info-keysizes
  unit/keyspace unit/quit unit/auth unit/scripting unit/querybuf unit/expire unit/type/string)
# Units this Redis source does not have (older snapshots) are left out, and said so.
have=()
for u in "${UNITS[@]}"; do
  if [ -f "$SRC/tests/$u.tcl" ]; then have+=("$u"); else echo "not in this source: $u" >&2; fi
done
UNITS=("${have[@]}")
DEPS="${MEMPROXY_DEPS:-$HOME/.cache/memproxy}"
"$HERE/scripts/setup.sh"
command -v tclsh >/dev/null || { echo "tclsh is needed (apt-get install tcl)"; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
work="$(mktemp -d)"; pids=()
# KEEP=1 keeps the runs' logs (the path is printed at the end).
# A server left running a script (the suite's script-timeout tests) ignores SIGTERM: SIGKILL after 2 s.
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for _ in $(seq 20); do
    alive=0; for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ "$alive" = 0 ] && break; sleep 0.1
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  [ "${KEEP:-0}" = 1 ] && echo "logs: $work" || rm -rf "$work"
}
trap cleanup EXIT
RPORT=$(free_port); MPORT=$(free_port)
"$DEPS/bin/redis-server" --port "$RPORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
  --enable-debug-command yes --loadmodule "$DEPS/lib/rejson.so" --loadmodule "$DEPS/lib/redisearch.so" \
  >"$work/redis.log" 2>&1 & pids+=($!)
UPSTREAM="redis://127.0.0.1:$RPORT"; MODE_FLAGS=()
if [ "${CLUSTER:-0}" = 1 ]; then
  command -v redis-cli >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-tools >/dev/null; }
  nodes=()
  while [ ${#nodes[@]} -lt 3 ]; do
    p=$(free_port)
    [ "$p" -lt 55000 ] && (python3 -c "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1', $p + 10000))" 2>/dev/null) || continue
    mkdir -p "$work/n$p"
    "$DEPS/bin/redis-server" --port "$p" --bind 127.0.0.1 --save "" --appendonly no --dir "$work/n$p" \
      --cluster-enabled yes --enable-debug-command yes --loadmodule "$DEPS/lib/rejson.so" \
      --loadmodule "$DEPS/lib/redisearch.so" >"$work/n$p.log" 2>&1 & pids+=($!)
    nodes+=("$p")
  done
  for p in "${nodes[@]}"; do
    for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$p) 2>/dev/null && break; sleep 0.1; done
  done
  redis-cli --cluster create $(printf '127.0.0.1:%s ' "${nodes[@]}") --cluster-yes >"$work/create.log" 2>&1
  for _ in $(seq 200); do
    redis-cli -p "${nodes[0]}" cluster info | grep -q 'cluster_state:ok' && break; sleep 0.1
  done
  UPSTREAM="redis://127.0.0.1:${nodes[0]}"; MODE_FLAGS=(--cluster-mode)
fi
"${MEMPROXY_BIN:-$HERE/target/release/memproxy}" --listen "127.0.0.1:$MPORT" --upstream "$UPSTREAM" \
  --log warn >"$work/memproxy-server.log" 2>&1 & pids+=($!)
for p in $RPORT $MPORT; do
  for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$p) 2>/dev/null && break; sleep 0.1; done
done
run() { # label port -> file of "[ok|err|exception]: name" lines
  local out="$work/$1.txt"
  (cd "$SRC" && ./runtest --host 127.0.0.1 --port "$2" --singledb --clients 1 --timeout 120 "${MODE_FLAGS[@]}" \
     $(printf -- '--single %s ' "${UNITS[@]}") 2>&1) | tee "$work/$1.log" |
    sed 's/\x1b\[[0-9;]*m//g' | grep -a -E '^\[(ok|err|exception|ignore|skip)\]' | sed 's/ ([0-9]* ms)$//' | sort -u > "$out" || true
  echo "$out"
}
direct=$(run direct "$RPORT")
proxied=$(run memproxy "$MPORT")
count() { grep -a -c "^\[$1\]" "$2" || true; }
printf '| path | ok | err | exception |\n| --- | --- | --- | --- |\n'
printf '| direct | %s | %s | %s |\n' "$(count ok "$direct")" "$(count err "$direct")" "$(count exception "$direct")"
printf '| memproxy | %s | %s | %s |\n' "$(count ok "$proxied")" "$(count err "$proxied")" "$(count exception "$proxied")"
echo
echo "Passing direct, not through memproxy:"
comm -23 <(grep '^\[ok\]' "$direct" | sed 's/^\[ok\]: //' | sort) \
         <(grep '^\[ok\]' "$proxied" | sed 's/^\[ok\]: //' | sort) | sed 's/^/  /'
