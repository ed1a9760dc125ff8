#!/usr/bin/env bash
# Writes the dashboard's screenshots that the README shows (docs/images/dashboard-*.png):
# the browser test that drives `flotilla up` and a failover takes them along the way.
# Needs what hack/browser.sh installs.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p docs/images
FLOTILLA_SCREENSHOTS="$PWD/docs/images" FLOTILLA_REQUIRE_BROWSER=1 \
  cargo nextest run --test e2e -E 'test(the_dashboard_shows_up_s_fleet)'
ls -l docs/images/dashboard-*.png
