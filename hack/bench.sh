#!/usr/bin/env bash
# Runs the benchmark harness.
#   hack/bench.sh             full sizes, 3 runs of each scenario (about 22 minutes), on a
#                             build in the bench-release profile (the release profile with
#                             thin LTO; see Cargo.toml): the figures docs/benchmarks.md shows
#   hack/bench.sh --quick     smaller sizes, one run, on the test build (the one that
#                             `cargo nextest run` and CI use), so that it compiles nothing
#                             after the tests; it proves that every scenario works, and its
#                             timings are not the figures to compare. CI runs this
#   hack/bench.sh --publish   full run, then the report into docs/benchmarks.md and
#                             the plots into docs/bench/
# Results, plots and report.md go to target/bench/ (--out-dir to change it).
# Extra arguments go to the harness (see: hack/bench.sh --help).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=false
for arg in "$@"; do
  [ "$arg" != --quick ] || quick=true
done
if $quick; then
  # Every target, as the tests build them: a smaller set of packages would unify the
  # dependencies' features differently (dev-dependencies turn some on) and rebuild them.
  cargo build --workspace --all-targets
  dir=target/debug
else
  cargo build --profile bench-release -p flotilla -p flotilla-bench
  dir=target/bench-release
fi
exec "$dir/flotilla-bench" --flotilla "$dir/flotilla" "$@"
