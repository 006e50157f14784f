#!/usr/bin/env bash
# Passthrough throughput and latency: redis-benchmark against Redis directly, through memproxy,
# through twemproxy (Debian's nutcracker, one upstream connection) and through a plain byte splice
# (the floor for any proxy), in one run; the targets of each cell run back to back.
#   -t set,get -r 100000, clients c in {1, 50} x pipeline P in {1, 16}, each cell SECONDS (default 2) long.
# Prints rps, p50/p99 (ms), ratios to direct, and memproxy's CPU time per request.
# Needs redis-benchmark (Debian redis-tools) and nutcracker (Debian); installed if missing.
# COMPARE_BIN=path/to/an/older/memproxy adds a target "previous": that binary beside this one.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_CELL="${SECONDS_PER_CELL:-2}"
scripts/setup.sh
command -v redis-benchmark >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-tools >/dev/null; }
command -v nutcracker >/dev/null || apt-get install -y -qq nutcracker >/dev/null \
  || { apt-get update -qq && apt-get install -y -qq nutcracker >/dev/null; }
cargo build --release --locked --bench splice >/dev/null 2>&1
cargo build --release --locked >/dev/null
SPLICE=$(ls -t target/release/deps/splice-* | grep -v '\.d$' | head -1)
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
RP=$(port); MP=$(port); SP=$(port); TP=$(port); TS=$(port); OP=$(port)
scripts/redis.sh "$RP" --bind 127.0.0.1 >/dev/null 2>&1 & RPID=$!
OPID=
trap 'kill $RPID $MPID $SPID $TPID $OPID 2>/dev/null || true' EXIT
for _ in $(seq 100); do redis-cli -p "$RP" ping >/dev/null 2>&1 && break; sleep 0.1; done
./target/release/memproxy --listen "127.0.0.1:$MP" --upstream "redis://127.0.0.1:$RP" --log warn & MPID=$!
"$SPLICE" "127.0.0.1:$SP" "127.0.0.1:$RP" & SPID=$!
TCONF=$(mktemp --suffix .yml)
printf 'bench:\n  listen: 127.0.0.1:%s\n  redis: true\n  hash: fnv1a_64\n  distribution: ketama\n  auto_eject_hosts: false\n  server_connections: 1\n  servers:\n   - 127.0.0.1:%s:1\n' "$TP" "$RP" > "$TCONF"
nutcracker -c "$TCONF" -s "$TS" -o /dev/null & TPID=$!
targets="direct memproxy twemproxy splice"; ports="$MP $SP $TP"
if [ -n "${COMPARE_BIN:-}" ]; then
  "$COMPARE_BIN" --listen "127.0.0.1:$OP" --upstream "redis://127.0.0.1:$RP" --log warn & OPID=$!
  targets="direct memproxy previous twemproxy splice"; ports="$ports $OP"
fi
for p in $ports; do for _ in $(seq 200); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done; done

cpu_ticks() { awk '{print $14+$15}' "/proc/$MPID/stat"; }
hz=$(getconf CLK_TCK)
summary=()
printf "%-6s %-3s %-4s %-9s %12s %9s %9s %8s %14s\n" test c P target rps p50_ms p99_ms x_direct proxy_cpu_us/req
for t in set get; do for c in 1 50; do for P in 1 16; do
  n=$(( c == 1 && P == 1 ? 20000 : 400000 ))
  declare -A rps=() p50s=()
  for target in $targets; do
    case $target in direct) p=$RP;; memproxy) p=$MP;; previous) p=$OP;; twemproxy) p=$TP;; splice) p=$SP;; esac
    # Size the run to last about SECONDS_PER_CELL: a probe, then the real run.
    probe=$(redis-benchmark -p "$p" -t "$t" -r 100000 -c "$c" -P "$P" -n "$n" --csv 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
    total=$(python3 -c "print(max(1000, int(float('$probe') * $SECONDS_PER_CELL)))")
    before=$(cpu_ticks)
    line=$(redis-benchmark -p "$p" -t "$t" -r 100000 -c "$c" -P "$P" -n "$total" --csv 2>/dev/null | tail -1)
    after=$(cpu_ticks)
    r=$(echo "$line" | cut -d, -f2 | tr -d '"'); p50=$(echo "$line" | cut -d, -f5 | tr -d '"'); p99=$(echo "$line" | cut -d, -f7 | tr -d '"')
    rps[$target]=$r; p50s[$target]=$p50
    ratio=$(python3 -c "print('%.2f' % (float('$r') / float('${rps[direct]}')))")
    cpu="-"
    [ "$target" = memproxy ] && cpu=$(python3 -c "print('%.2f' % (($after - $before) / $hz * 1e6 / $total))")
    printf "%-6s %-3s %-4s %-9s %12s %9s %9s %8s %14s\n" "$t" "$c" "$P" "$target" "$r" "$p50" "$p99" "$ratio" "$cpu"
  done
  summary+=("$(python3 - "$t" "$c" "$P" "${rps[memproxy]}" "${rps[twemproxy]}" "${rps[direct]}" \
    "${p50s[memproxy]}" "${p50s[twemproxy]}" "${p50s[direct]}" "${rps[previous]:-0}" <<'PY'
import sys
t, c, P = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
m, w, d, pm, pw, pd, o = map(float, sys.argv[4:])
s = f"{t} c={c} P={P}: memproxy {m / w:.2f}x twemproxy, {m / d:.2f}x direct"
if o:
    s += f" (previous binary {o / d:.2f}x direct)"
if c == 1 and P == 1:
    s += f"; added p50 {(pm - pd) * 1000:.0f} us (twemproxy {(pw - pd) * 1000:.0f} us)"
print(s)
PY
)")
done; done; done
echo
printf '%s\n' "${summary[@]}"
echo "targets: memproxy >= twemproxy in every pipelined cell, >= 0.75x direct at c=50 P=16, added p50 <= 40 us at c=1 P=1"
