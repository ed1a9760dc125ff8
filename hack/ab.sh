#!/usr/bin/env bash
# Compares two flotilla binaries on one scenario group, in interleaved runs.
#   hack/ab.sh GROUP PAIRS BEFORE AFTER [HARNESS ARGS...]
#   hack/ab.sh scheduler-assign 3 /tmp/before/flotilla target/bench-release/flotilla
#   hack/ab.sh controlplane 2 /tmp/before/flotilla target/bench-release/flotilla --quick
# GROUP is a value of the harness's --only. Each pair runs both binaries once, in
# alternating order (before-after, then after-before), so that a machine whose speed
# drifts within the hour weighs on both alike; single runs of one binary here have
# spread by half. Each JSON record the harness prints comes out prefixed with
# "before" or "after" and the pair's number; the control plane's CPU is in them
# (control_plane_cpu_secs, or cpu_secs in the failover). Arguments after AFTER go to
# the harness as they are (--quick for its smaller sizes).
set -euo pipefail
if [ $# -lt 4 ]; then
  sed -n '2,12s/^# \{0,1\}//p' "$0" >&2
  exit 2
fi
group=$1 pairs=$2 before=$3 after=$4
shift 4
extra=("$@")
for bin in "$before" "$after"; do
  [ -x "$bin" ] || { echo "hack/ab.sh: $bin is not an executable; build it first (cargo build --profile bench-release -p flotilla) and copy it aside" >&2; exit 2; }
done
cd "$(dirname "$0")/.."
# The same packages as hack/bench.sh builds, so that neither script rebuilds what the
# other just built (a different package set unifies features differently).
cargo build --profile bench-release -p flotilla -p flotilla-bench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
one() { # label pair binary
  target/bench-release/flotilla-bench --flotilla "$3" --only "$group" --runs 1 --out-dir "$out/$1-$2" ${extra[@]+"${extra[@]}"} |
    grep '^{"scenario"' | sed "s|^|$1 pair $2: |"
}
for i in $(seq 1 "$pairs"); do
  if [ $((i % 2)) -eq 1 ]; then
    one before "$i" "$before"
    one after "$i" "$after"
  else
    one after "$i" "$after"
    one before "$i" "$before"
  fi
done
