#!/usr/bin/env bash
# Install what is missing, then train the quick start: vf-rl @ configs/rl/quickstart.toml
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/install.sh"
exec "$VENV/bin/vf-rl" @ configs/rl/quickstart.toml "$@"
