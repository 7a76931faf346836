#!/usr/bin/env bash
# Install what is missing, then run the test suite (pytest arguments pass through).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/install.sh"
exec "$VENV/bin/python" -m pytest "$@"
