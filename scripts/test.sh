#!/usr/bin/env bash
# Set up the dependencies if needed, then run the whole test suite (unit + integration tests
# against a real redis-server with RedisJSON and RediSearch, started by the tests themselves).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo test --locked "$@"
