#!/usr/bin/env bash
# Redis Cluster through one memproxy (issue 26), on 1 and on 3 masters, in one run:
#  - passthrough SET and GET at c 50 x P 16 (-r 100000): redis-benchmark --cluster straight to the
#    masters (the baseline) beside plain redis-benchmark through memproxy (one endpoint);
#  - MEM.REMEMBER and MEM.RECALL through memproxy: throughput and p50 at c 8, users spread over
#    the masters (USER u<random>), every text new (no embedding cache hits).
# Each cell about SECONDS_PER_CELL (default 2) long; only ratios within one run count.
# COMPARE_BIN=/path/to/an/older/memproxy adds, beside each passthrough cell, the same load through
# that binary (started on the same cluster), so a change is measured against its parent in one run.
# On 3 masters, twemproxy (Debian's nutcracker, one connection to each of 3 plain Redis, shared by
# every client) runs the same passthrough load: a proxy that shares its upstream connections, as a
# reference for what the extra hop costs on this machine whatever the proxy's connection design.
# Needs redis-benchmark and redis-cli (Debian redis-tools) and nutcracker (Debian); installed if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_CELL="${SECONDS_PER_CELL:-2}"
scripts/setup.sh
command -v redis-benchmark >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-tools >/dev/null; }
command -v nutcracker >/dev/null || apt-get install -y -qq nutcracker >/dev/null \
  || { apt-get update -qq && apt-get install -y -qq nutcracker >/dev/null; }
cargo build --release --locked >/dev/null
DEPS="${MEMPROXY_DEPS:-$HOME/.cache/memproxy}"
WORK=$(mktemp -d)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; rm -rf "$WORK"' EXIT

# A free port whose cluster bus port (+10000) is free too.
port() {
  python3 - <<'PY'
import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    if p > 55535: continue
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", p + 10000)); t.close(); print(p); break
    except OSError:
        t.close()
PY
}
wait_ping() { for _ in $(seq 200); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; return 1; }

# start_cluster N: N masters with the modules, slots split evenly; their ports in PORTS (not
# printed: a command substitution's subshell would lose the PIDs to stop).
start_cluster() {
  local n=$1 ports=() i
  for i in $(seq "$n"); do
    local p; p=$(port); mkdir -p "$WORK/$p"
    "$DEPS/bin/redis-server" --port "$p" --bind 127.0.0.1 --dir "$WORK/$p" --save "" --appendonly no \
      --cluster-enabled yes --loadmodule "$DEPS/lib/rejson.so" --loadmodule "$DEPS/lib/redisearch.so" \
      >/dev/null 2>&1 &
    PIDS+=($!); ports+=("$p")
  done
  for p in "${ports[@]}"; do wait_ping "$p"; done
  local per=$((16384 / n))
  for i in $(seq 0 $((n - 1))); do
    local a=$((i * per)) b=$(( i == n - 1 ? 16383 : (i + 1) * per - 1 ))
    redis-cli -p "${ports[$i]}" cluster addslotsrange "$a" "$b" >/dev/null
    [ "$i" -gt 0 ] && redis-cli -p "${ports[$i]}" cluster meet 127.0.0.1 "${ports[0]}" >/dev/null
  done
  for p in "${ports[@]}"; do
    for _ in $(seq 200); do redis-cli -p "$p" cluster info | grep -q cluster_state:ok && break; sleep 0.1; done
  done
  PORTS=("${ports[@]}")
}

# bench PORT [redis-benchmark args…]: "rps p50_ms" of a run sized to last about SECONDS_PER_CELL.
bench() {
  local p=$1; shift
  local probe total line
  probe=$(redis-benchmark -p "$p" "$@" -n 20000 --csv 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
  total=$(python3 -c "print(max(200, int(float('$probe') * $SECONDS_PER_CELL)))")
  line=$(redis-benchmark -p "$p" "$@" -n "$total" --csv 2>/dev/null | tail -1)
  echo "$(echo "$line" | cut -d, -f2 | tr -d '"') $(echo "$line" | cut -d, -f5 | tr -d '"')"
}
bench_mem() {
  local p=$1; shift
  local probe total line
  probe=$(redis-benchmark -p "$p" -c 8 -r 1000000 -n 200 --csv "$@" 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
  total=$(python3 -c "print(max(100, int(float('$probe') * $SECONDS_PER_CELL)))")
  line=$(redis-benchmark -p "$p" -c 8 -r 1000000 -n "$total" --csv "$@" 2>/dev/null | tail -1)
  echo "$(echo "$line" | cut -d, -f2 | tr -d '"') $(echo "$line" | cut -d, -f5 | tr -d '"')"
}

echo "# Redis Cluster through one memproxy"
echo
echo "| masters | what | target | requests/s | p50 ms | / baseline |"
echo "| --- | --- | --- | --- | --- | --- |"
for n in 1 3; do
  start_cluster "$n"
  ports=("${PORTS[@]}")
  mp=$(port)
  ./target/release/memproxy --listen "127.0.0.1:$mp" --upstream "redis://127.0.0.1:${ports[0]}" --log warn &
  PIDS+=($!)
  wait_ping "$mp"
  if [ -n "${COMPARE_BIN:-}" ]; then
    old=$(port)
    "$COMPARE_BIN" --listen "127.0.0.1:$old" --upstream "redis://127.0.0.1:${ports[0]}" --log warn &
    PIDS+=($!)
    wait_ping "$old"
  fi
  TWEM=
  if [ "$n" = 3 ]; then
    # The reference proxy: nutcracker over 3 plain Redis (no modules, no cluster), one
    # connection to each, shared by all clients.
    servers=""
    for i in 1 2 3; do
      p=$(port); mkdir -p "$WORK/plain$p"
      "$DEPS/bin/redis-server" --port "$p" --bind 127.0.0.1 --dir "$WORK/plain$p" --save "" \
        --appendonly no >/dev/null 2>&1 &
      PIDS+=($!); wait_ping "$p"; servers="$servers   - 127.0.0.1:$p:1\n"
    done
    TWEM=$(port); TSTATS=$(port)
    printf "bench:\n  listen: 127.0.0.1:%s\n  redis: true\n  hash: fnv1a_64\n  distribution: ketama\n  auto_eject_hosts: false\n  server_connections: 1\n  servers:\n$servers" "$TWEM" > "$WORK/nutcracker.yml"
    nutcracker -c "$WORK/nutcracker.yml" -s "$TSTATS" -o /dev/null &
    PIDS+=($!)
    wait_ping "$TWEM"
  fi
  for t in set get; do
    # One master serves every slot: plain redis-benchmark is the cluster client there (its
    # --cluster mode cannot read the empty host a lone node announces).
    cluster_flag=(--cluster); [ "$n" = 1 ] && cluster_flag=()
    read -r base base_p50 <<<"$(bench "${ports[0]}" "${cluster_flag[@]}" -t "$t" -r 100000 -c 50 -P 16)"
    echo "| $n | $t c 50 × P 16 | redis-benchmark --cluster, straight to the masters | $base | $base_p50 | 1.00 |"
    read -r r p50 <<<"$(bench "$mp" -t "$t" -r 100000 -c 50 -P 16)"
    echo "| $n | $t c 50 × P 16 | through memproxy | $r | $p50 | $(python3 -c "print('%.2f' % (float('$r') / float('$base')))") |"
    if [ -n "${COMPARE_BIN:-}" ]; then
      read -r r p50 <<<"$(bench "$old" -t "$t" -r 100000 -c 50 -P 16)"
      echo "| $n | $t c 50 × P 16 | through COMPARE_BIN | $r | $p50 | $(python3 -c "print('%.2f' % (float('$r') / float('$base')))") |"
    fi
    if [ -n "${TWEM:-}" ]; then
      read -r r p50 <<<"$(bench "$TWEM" -t "$t" -r 100000 -c 50 -P 16)"
      echo "| $n | $t c 50 × P 16 | twemproxy over 3 plain Redis (shared connections) | $r | $p50 | $(python3 -c "print('%.2f' % (float('$r') / float('$base')))") |"
    fi
  done
  read -r r p50 <<<"$(bench_mem "$mp" MEM.REMEMBER "Note __rand_int__: the user's garden needs water on day __rand_int__" USER "u__rand_int__" NODEDUP)"
  echo "| $n | MEM.REMEMBER c 8 | through memproxy | $r | $p50 | |"
  read -r r p50 <<<"$(bench_mem "$mp" MEM.RECALL "what does the garden need on day __rand_int__?" USER "u__rand_int__")"
  echo "| $n | MEM.RECALL c 8 | through memproxy | $r | $p50 | |"
  kill "${PIDS[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  PIDS=()
done
