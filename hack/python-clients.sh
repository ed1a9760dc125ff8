#!/usr/bin/env bash
# Creates the pinned Python virtualenvs that tests/e2e/clients.rs drives against a workspace:
#
#   target/python-clients/kubernetes-37   kubernetes==37.0.2   (the official client, current)
#   target/python-clients/kubernetes-35   kubernetes==35.0.0   (pre-37: sends watch=True, force=True)
#   target/python-clients/kopf            kopf==1.45.2         (an operator framework; the test
#                                         operator's handlers use kubernetes==37.0.2)
#   target/python-clients/kr8s            kr8s==0.20.15        (an asyncio client)
#
# Idempotent: a venv whose stamp and installed versions match is left alone, so a second
# run costs a few Python start-ups. Safe to run concurrently (tests/e2e/clients.rs runs it
# from parallel tests): one run at a time holds target/python-clients/.lock.
#
# Usage: hack/python-clients.sh [NAME...]   (no NAME: all of them)
# Needs python3 (3.9+) with venv, and PyPI (or the pip index configured on the machine).
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT="${FLOTILLA_PYTHON_CLIENTS:-target/python-clients}"
PYTHON="${PYTHON:-python3}"

# A venv's name, then its exact pinned requirements.
pins() {
  cat <<'EOF'
kubernetes-37 kubernetes==37.0.2
kubernetes-35 kubernetes==35.0.0
kopf kopf==1.45.2 kubernetes==37.0.2
kr8s kr8s==0.20.15
EOF
}

# True when the venv at $1 was completed by this script for the requirements $2...
# and has each of them installed at exactly its version.
installed() {
  local dir=$1
  shift
  [ -x "$dir/bin/python" ] || return 1
  [ "$(cat "$dir/.flotilla-pin" 2>/dev/null)" = "$*" ] || return 1
  "$dir/bin/python" - "$@" <<'PY' 2>/dev/null
import importlib.metadata, sys
sys.exit(any(importlib.metadata.version(d) != v for d, v in (r.split("==") for r in sys.argv[1:])))
PY
}

mkdir -p "$ROOT"
exec 9>"$ROOT/.lock"
flock 9

wanted=("$@")
found_any=0
while read -r name reqs; do
  if [ ${#wanted[@]} -gt 0 ] && [[ " ${wanted[*]} " != *" $name "* ]]; then
    continue
  fi
  found_any=1
  read -r -a req <<<"$reqs"
  dir="$ROOT/$name"
  if installed "$dir" "${req[@]}"; then
    echo "python-clients: $name (${req[*]}) already installed in $dir"
    continue
  fi
  echo "python-clients: installing $name (${req[*]}) into $dir"
  # The stamp is written last, so a venv left half-made by an interrupted run is rebuilt.
  rm -rf "$dir"
  "$PYTHON" -m venv "$dir"
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "${req[@]}"
  echo "${req[*]}" >"$dir/.flotilla-pin"
  installed "$dir" "${req[@]}" || { echo "python-clients: $name: ${req[*]} did not install" >&2; exit 1; }
  echo "python-clients: $name: $("$dir/bin/python" -m pip --disable-pip-version-check freeze | tr '\n' ' ')"
done < <(pins)

if [ "$found_any" = 0 ]; then
  echo "python-clients: no such venv: $*; known: $(pins | cut -d' ' -f1 | tr '\n' ' ')" >&2
  exit 2
fi
