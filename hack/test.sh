#!/usr/bin/env bash
# Runs every test of the workspace, as the README says and CI does (.ci/run):
# the unit tests, the kube-rs integration tests and the end-to-end tests in tests/.
#
# cargo-nextest runs each test binary's tests in parallel (.config/nextest.toml sets
# its timeouts). It is not part of a Rust install, so it is installed from crates.io
# with `cargo install --locked cargo-nextest` when `cargo nextest` is missing.
#
# The end-to-end tests are one binary, e2e (tests/e2e/main.rs); a test's name is its
# module and function, e.g. `kubectl_resources::get_watch_sees_a_change`.
#
# Usage: hack/test.sh [NEXTEST ARGS...]   e.g. `hack/test.sh up_runs` runs the tests
# whose names contain up_runs. It ends with its own wall time, build included.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "== installing cargo-nextest (cargo install --locked cargo-nextest)" >&2
  cargo install --locked cargo-nextest
fi
began=$SECONDS
status=0
cargo nextest run --workspace "$@" || status=$?
echo "hack/test.sh: $((SECONDS - began)) s in all (build and tests), exit status $status"
exit "$status"
