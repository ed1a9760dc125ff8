#!/usr/bin/env bash
# Runs the benchmark harness against a release build.
#   hack/bench.sh           full run (several minutes)
#   hack/bench.sh --quick   smaller sizes, under 3 minutes; CI runs this
# Extra arguments go to the harness (see: hack/bench.sh --help).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p flotilla -p flotilla-bench
exec target/release/flotilla-bench --flotilla target/release/flotilla "$@"
