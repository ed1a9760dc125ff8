#!/usr/bin/env bash
# Installs what the dashboard's browser tests (tests/e2e/dashboard.rs) drive:
#   - Debian's chromium, at /usr/bin/chromium (the tests never download a browser);
#   - playwright-core into tests/browser/node_modules, at the version its
#     package-lock.json pins, from the npm registry, with the machine's Node.js.
#
# Idempotent: an install that is already right is left alone.
# Usage: hack/browser.sh
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "hack/browser.sh: Node.js and npm are needed (Debian: apt-get install nodejs npm)" >&2
  exit 1
fi

if [ ! -x /usr/bin/chromium ]; then
  echo "== installing Debian's chromium"
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q chromium
fi
/usr/bin/chromium --version

# npm ci installs exactly what the lock pins; the copy of the lock kept beside the
# install tells a later run that nothing changed.
stamp=tests/browser/node_modules/.flotilla-lock
if ! cmp -s tests/browser/package-lock.json "$stamp"; then
  echo "== npm ci in tests/browser"
  npm ci --prefix tests/browser --no-audit --no-fund
  cp tests/browser/package-lock.json "$stamp"
fi
echo "playwright-core $(node -p 'require("./tests/browser/node_modules/playwright-core/package.json").version')"
