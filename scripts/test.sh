#!/usr/bin/env bash
# Install what is missing, lint, then run the test suite (pytest arguments pass through).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/install.sh"
# ruff's settings are [tool.ruff] in pyproject.toml; it lists each finding above the line below
"$VENV/bin/ruff" check --quiet . || {
  echo "vfrl: ruff found the problems above: fix them ($VENV/bin/ruff check --fix . does the safe ones), then rerun" >&2
  exit 1
}
# Two pytest-xdist workers: one runs every real-stack module in turn, the other the rest beside it
# (tests/conftest.py, pytest_xdist_make_scheduler); `-n 0` after it runs everything in this process.
exec "$VENV/bin/python" -m pytest -n 2 "$@"
