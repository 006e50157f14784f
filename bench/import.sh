#!/usr/bin/env bash
# `memproxy import` with and without --trust-embeddings, in one run: N memories (default 2000) of
# distinct sentences are written through memproxy, exported with --embeddings, and imported into an
# empty Redis each way, ROUNDS times (default 2), alternating. Prints seconds and lines/s per import.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${N:-2000}"; ROUNDS="${ROUNDS:-2}"
scripts/setup.sh
command -v redis-cli >/dev/null || { apt-get update -qq && apt-get install -y -qq redis-tools >/dev/null; }
cargo build --release --locked >/dev/null
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
SP=$(port); TP=$(port); MP=$(port)
scripts/redis.sh "$SP" --bind 127.0.0.1 >/dev/null 2>&1 & SPID=$!
scripts/redis.sh "$TP" --bind 127.0.0.1 >/dev/null 2>&1 & TPID=$!
trap 'kill $SPID $TPID $MPID 2>/dev/null || true' EXIT
for p in $SP $TP; do for _ in $(seq 100); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done; done
./target/release/memproxy --listen "127.0.0.1:$MP" --upstream "redis://127.0.0.1:$SP" --log warn & MPID=$!
for _ in $(seq 200); do redis-cli -p "$MP" MEM.PING >/dev/null 2>&1 && break; sleep 0.1; done
work=$(mktemp -d)
# Four words drawn from the recall evaluation sets per sentence: far enough apart that few
# deduplicate.
python3 - "$N" > "$work/plant.txt" <<'PY'
import random, re, sys
random.seed(7)
text = open("bench/data/recall-eval.tsv").read() + open("bench/data/recall-holdout.tsv").read()
words = sorted(set(re.findall(r"[a-z]{5,}", text.lower())))
for i in range(int(sys.argv[1])):
    w = random.sample(words, 4)
    print(f'MEM.REMEMBER "The user talked about {w[0]} and {w[1]} while fixing the {w[2]} {w[3]}." USER importer KIND semantic NODEDUP')
PY
redis-cli -p "$MP" < "$work/plant.txt" > /dev/null
./target/release/memproxy export --upstream "redis://127.0.0.1:$SP" --user importer --embeddings > "$work/export.jsonl" 2>/dev/null
echo "# memproxy import of $(wc -l < "$work/export.jsonl") exported memories into an empty Redis"
printf "%-26s %8s %10s  %s\n" how seconds lines/s report
for _ in $(seq "$ROUNDS"); do for how in model trust; do
  redis-cli -p "$TP" FLUSHALL > /dev/null
  flag=(); [ "$how" = trust ] && flag=(--trust-embeddings)
  s=$(date +%s.%N)
  ./target/release/memproxy import --upstream "redis://127.0.0.1:$TP" "${flag[@]}" < "$work/export.jsonl" 2> "$work/err"
  e=$(date +%s.%N)
  printf "%-26s %8.2f %10.0f  %s\n" "$([ "$how" = trust ] && echo "--trust-embeddings" || echo "re-embedded (default)")" \
    "$(python3 -c "print($e - $s)")" "$(python3 -c "print($(wc -l < "$work/export.jsonl") / ($e - $s))")" \
    "$(grep '^import:' "$work/err" | tr '\n' ' ')"
done; done
rm -rf "$work"
