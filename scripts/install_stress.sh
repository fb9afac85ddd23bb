#!/usr/bin/env bash
# Make sure stress-ng exists for the loaded test run (KVLAB_TEST_HOG=1 ./test.sh keeps every core busy beside
# the suite; tests/hog.py starts and stops it). Debian/Ubuntu package `stress-ng`; runs apt-get as root,
# otherwise prints what to run. Set KVLAB_STRESS_NG to use another binary. Exit status is 0 even when it
# cannot install: a hog run then stops at once with this reason (a quiet run never needs it).
set -uo pipefail
has_stress() {
  for b in "${KVLAB_STRESS_NG:-}" stress-ng /usr/bin/stress-ng; do
    if [ -n "$b" ] && command -v "$b" >/dev/null 2>&1; then return 0; fi
  done
  return 1
}
has_stress && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "install_stress: installing Debian's stress-ng package for the loaded test run" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends stress-ng >/dev/null; then
    apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends stress-ng >/dev/null
  fi
  has_stress && exit 0
  echo "install_stress: WARNING: apt-get could not install stress-ng; KVLAB_TEST_HOG=1 cannot run" >&2
elif command -v apt-get >/dev/null 2>&1; then
  echo "install_stress: WARNING: stress-ng is missing; run 'sudo apt-get install stress-ng' for KVLAB_TEST_HOG=1" >&2
else
  echo "install_stress: WARNING: stress-ng is missing and this is not a Debian/Ubuntu system;" \
       "install it and set KVLAB_STRESS_NG=/path/to/stress-ng for KVLAB_TEST_HOG=1" >&2
fi
exit 0
