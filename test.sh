#!/usr/bin/env bash
# Install KV Lab and its test tools into ./.venv (first run only), then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup_env.sh requirements-dev.txt
bash scripts/install_browser.sh  # Debian chromium for tests/browser (no browser downloads)
bash scripts/install_postgres.sh  # Debian postgresql for tests/progress and tests/deploy (a throwaway cluster)
bash scripts/install_nginx.sh  # Debian nginx for tests/deploy (replicas behind deploy/nginx.conf on loopback)
exec .venv/bin/python -m pytest "$@"
