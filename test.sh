#!/usr/bin/env bash
# Install KV Lab and its test tools into ./.venv (first run only), then run the whole test suite on pytest-xdist
# workers, one per core (at most 4: each worker starts its own app server, Chromium and PostgreSQL; set
# KVLAB_TEST_WORKERS to choose, or pass -n 0 to run in one process). KVLAB_TEST_HOG=1 keeps every core busy
# beside the tests with stress-ng (tests/hog.py, docs/TESTING.md). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup_env.sh requirements-dev.txt
bash scripts/install_browser.sh  # Debian chromium for tests/browser (no browser downloads)
bash scripts/install_postgres.sh  # Debian postgresql for tests/progress and tests/deploy (a throwaway cluster)
bash scripts/install_nginx.sh  # Debian nginx for tests/deploy (replicas behind deploy/nginx.conf on loopback)
case "${KVLAB_TEST_HOG:-}" in "" | 0 | no | false | off) ;; *) bash scripts/install_stress.sh ;; esac
workers="${KVLAB_TEST_WORKERS:-$(nproc)}"
if [ -z "${KVLAB_TEST_WORKERS:-}" ] && [ "$workers" -gt 4 ]; then workers=4; fi
# loadgroup: tests marked @pytest.mark.xdist_group(name) run one after another on one worker
exec .venv/bin/python -m pytest -n "$workers" --dist loadgroup "$@"
