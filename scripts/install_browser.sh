#!/usr/bin/env bash
# Make sure a headless Chromium exists for the browser tests (Debian/Ubuntu package; never a download
# by Playwright). Runs apt-get as root; otherwise prints what to run. Set KVLAB_CHROMIUM to use another
# binary. Exit status is 0 even when it cannot install: the browser tests then skip with this reason.
set -uo pipefail
for b in "${KVLAB_CHROMIUM:-}" chromium chromium-browser; do
  if [ -n "$b" ] && command -v "$b" >/dev/null 2>&1; then exit 0; fi
done
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "install_browser: installing Debian's chromium package for the browser tests" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends chromium >/dev/null; then
    apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends chromium >/dev/null
  fi
  command -v chromium >/dev/null 2>&1 && exit 0
  echo "install_browser: WARNING: apt-get could not install chromium; browser tests will be skipped" >&2
elif command -v apt-get >/dev/null 2>&1; then
  echo "install_browser: WARNING: chromium is missing; run 'sudo apt-get install chromium' for the browser tests" >&2
else
  echo "install_browser: WARNING: chromium is missing and this is not a Debian/Ubuntu system;" \
       "install Chromium and set KVLAB_CHROMIUM=/path/to/chromium for the browser tests" >&2
fi
exit 0
