#!/usr/bin/env bash
# What the browser tests need, installed by the system's and npm's own clients (nothing is downloaded while
# the tests run):
# 1. a headless Chromium (Debian/Ubuntu package; never a download by Playwright). Runs apt-get as root;
#    otherwise prints what to run. Set KVLAB_CHROMIUM to use another binary.
# 2. axe-core, the accessibility rules tests/browser/test_a11y.py injects into each page, and oidc-provider,
#    the OpenID Provider tests/browser/test_sso.py signs learners in with (run by node): the versions pinned
#    in package.json / package-lock.json, installed with `npm ci` into ./node_modules (git-ignored).
# Exit status is 0 even when it cannot install: the browser tests then skip with the reason (CI fails them).
set -uo pipefail
cd "$(dirname "$0")/.."

have_chromium() {
  for b in "${KVLAB_CHROMIUM:-}" chromium chromium-browser; do
    if [ -n "$b" ] && command -v "$b" >/dev/null 2>&1; then return 0; fi
  done
  return 1
}

apt_install() {  # apt_install PACKAGE...: as root on Debian/Ubuntu only; returns apt-get's status
  [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1 || return 1
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "$@" >/dev/null ||
    { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "$@" >/dev/null; }
}

if ! have_chromium; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "install_browser: installing Debian's chromium package for the browser tests" >&2
    apt_install chromium
    command -v chromium >/dev/null 2>&1 ||
      echo "install_browser: WARNING: apt-get could not install chromium; browser tests will be skipped" >&2
  elif command -v apt-get >/dev/null 2>&1; then
    echo "install_browser: WARNING: chromium is missing; run 'sudo apt-get install chromium' for the browser tests" >&2
  else
    echo "install_browser: WARNING: chromium is missing and this is not a Debian/Ubuntu system;" \
         "install Chromium and set KVLAB_CHROMIUM=/path/to/chromium for the browser tests" >&2
  fi
fi

# Each JavaScript package package.json pins (axe-core for tests/browser/test_a11y.py, oidc-provider, the OpenID
# Provider of tests/browser/test_sso.py): `npm ci` when any is missing or at another version.
stale=""
for pkg in axe-core oidc-provider; do
  want=$(sed -n "s/.*\"$pkg\": *\"\([^\"]*\)\".*/\1/p" package.json | head -1)
  got=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "node_modules/$pkg/package.json" 2>/dev/null | head -1)
  if [ -n "$want" ] && [ "$want" != "$got" ]; then stale="$stale $pkg@$want"; fi
done
if [ -n "$stale" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "install_browser: installing Debian's npm package for$stale" >&2
    apt_install npm
  fi
  if command -v npm >/dev/null 2>&1; then
    npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null ||
      echo "install_browser: WARNING: 'npm ci' could not install$stale; the tests that need them will be skipped" >&2
  else
    echo "install_browser: WARNING: npm is missing; install Node.js and npm, then 'npm ci', for$stale" >&2
  fi
fi
exit 0
