#!/usr/bin/env bash
# Runs every test of the workspace, as the README says and CI does (.ci/run):
# the unit tests, the kube-rs integration tests and the end-to-end tests in tests/.
#
# cargo-nextest runs each test binary's tests in parallel (.config/nextest.toml sets
# its timeouts). It is not part of a Rust install, so it is installed from crates.io
# with `cargo install --locked cargo-nextest` when `cargo nextest` is missing.
#
# Usage: hack/test.sh [NEXTEST ARGS...]   e.g. `hack/test.sh up_runs` runs the tests
# whose names contain up_runs.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! cargo nextest --version >/dev/null 2>&1; then
  echo "== installing cargo-nextest (cargo install --locked cargo-nextest)" >&2
  cargo install --locked cargo-nextest
fi
exec cargo nextest run --workspace "$@"
