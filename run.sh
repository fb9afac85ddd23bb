#!/usr/bin/env bash
# Install KV Lab into ./.venv (first run only) and start the app on http://localhost:8501
set -euo pipefail
cd "$(dirname "$0")"
bash scripts/setup_env.sh requirements.txt
exec .venv/bin/python -m ui.serve "$@"  # streamlit run app.py, its imports done before it answers
