#!/usr/bin/env bash
# Set up the dependencies if needed, then run the whole test suite (unit + integration tests
# against a real redis-server with RedisJSON and RediSearch, started by the tests themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# Tests that could not run here leave a line in this file (tests/common: skipped()); cargo reports
# them as passed, so the list is printed after the run, whatever its outcome.
skipped="${CARGO_TARGET_DIR:-target}/tmp/skipped-tests"
rm -f "$skipped"
trap '[ -s "$skipped" ] && { echo; echo "Skipped (could not run on this machine):"; sed "s/^/  SKIPPED /" "$skipped"; } || true' EXIT
cargo test --locked "$@"
