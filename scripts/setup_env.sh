#!/usr/bin/env bash
# Create ./.venv and install the requirements file given as $1 (re-installs only when it changed).
set -euo pipefail
cd "$(dirname "$0")/.."
req=${1:-requirements.txt}
py=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$py" -m venv .venv
stamp=.venv/.installed-$(basename "$req")
want=$(cat requirements*.txt | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r "$req"
  echo "$want" > "$stamp"
fi
