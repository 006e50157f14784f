#!/usr/bin/env bash
# Coverage-guided fuzzing of the request framer / reply scanner (target `framer`) and the MEM.*
# argument parser (target `mem_args`) with cargo-fuzz (libFuzzer) on the stable toolchain.
#   scripts/fuzz.sh [TARGET] [RUNS]     default: both targets, 5,000,000 runs each
#   scripts/fuzz.sh questions [N]       the generated question corpus (stopwords, punctuation, query
#                                       syntax, unicode, long texts) through MEM.RECALL in keyword,
#                                       hybrid and vector mode against a real redis-server; default
#                                       200,000 (the test suite runs 10,000)
# The corpus grows in fuzz/corpus/<target>; crashes land in fuzz/artifacts/<target> (turn each into
# a regression test). A bounded random run of both is part of every `scripts/test.sh`.
set -euo pipefail
if [ "${1:-}" = questions ]; then
  cd "$(dirname "$0")/.."
  scripts/setup.sh
  MEMPROXY_FUZZ_QUESTIONS="${2:-200000}" exec cargo test --release --test resilience no_question_harms_the_upstream -- --nocapture
fi
cd "$(dirname "$0")/../fuzz"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
RUNS="${2:-5000000}"
for t in ${1:-framer mem_args}; do
  mkdir -p "corpus/$t"
  # RUSTC_BOOTSTRAP lets cargo-fuzz pass its -Z flags to the stable compiler; no sanitizer needed
  # for safe Rust, which keeps the run fast.
  RUSTC_BOOTSTRAP=1 cargo fuzz run "$t" --sanitizer none -O "corpus/$t" -- -runs="$RUNS" -max_len=4096 2>&1 | tail -4
  echo "corpus/$t: $(ls "corpus/$t" | wc -l) inputs"
done
