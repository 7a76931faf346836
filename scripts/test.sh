#!/usr/bin/env bash
# Install what is missing, lint, then run the test suite (pytest arguments pass through).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/install.sh"
# ruff's settings are [tool.ruff] in pyproject.toml; it lists each finding above the line below
"$VENV/bin/ruff" check --quiet . || {
  echo "vfrl: ruff found the problems above: fix them ($VENV/bin/ruff check --fix . does the safe ones), then rerun" >&2
  exit 1
}
exec "$VENV/bin/python" -m pytest "$@"
