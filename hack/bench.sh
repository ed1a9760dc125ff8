#!/usr/bin/env bash
# Runs the benchmark harness against a build in the bench-release profile (the
# release profile with thin LTO; see Cargo.toml).
#   hack/bench.sh             full sizes, 3 runs of each scenario (about 22 minutes)
#   hack/bench.sh --quick     smaller sizes, one run, under 3 minutes; CI runs this
#   hack/bench.sh --publish   full run, then the report into docs/benchmarks.md and
#                             the plots into docs/bench/
# Results, plots and report.md go to target/bench/ (--out-dir to change it).
# Extra arguments go to the harness (see: hack/bench.sh --help).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --profile bench-release -p flotilla -p flotilla-bench
exec target/bench-release/flotilla-bench --flotilla target/bench-release/flotilla "$@"
