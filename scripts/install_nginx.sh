#!/usr/bin/env bash
# Make sure nginx exists for the loopback replica test (tests/deploy) and bench/app/classroom_scale.py
# (Debian/Ubuntu package `nginx`). Runs apt-get as root; otherwise prints what to run. Set KVLAB_NGINX to
# use another binary. Exit status is 0 even when it cannot install: the replica tests then skip with this
# reason (and fail under CI=true).
set -uo pipefail
has_nginx() {
  for b in "${KVLAB_NGINX:-}" nginx /usr/sbin/nginx; do
    if [ -n "$b" ] && command -v "$b" >/dev/null 2>&1; then return 0; fi
  done
  return 1
}
has_nginx && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "install_nginx: installing Debian's nginx package for the replica tests" >&2
  export DEBIAN_FRONTEND=noninteractive
  # policy-rc.d 101: the package must not start a system nginx on port 80; the tests start their own.
  policy=/usr/sbin/policy-rc.d made_policy=""
  if [ ! -e "$policy" ]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1; fi
  if ! apt-get install -y -q --no-install-recommends nginx >/dev/null; then
    apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends nginx >/dev/null
  fi
  [ -n "$made_policy" ] && rm -f "$policy"
  has_nginx && exit 0
  echo "install_nginx: WARNING: apt-get could not install nginx; replica tests will be skipped" >&2
elif command -v apt-get >/dev/null 2>&1; then
  echo "install_nginx: WARNING: nginx is missing; run 'sudo apt-get install nginx' for the replica tests" >&2
else
  echo "install_nginx: WARNING: nginx is missing and this is not a Debian/Ubuntu system;" \
       "install it and set KVLAB_NGINX=/path/to/nginx for the replica tests" >&2
fi
exit 0
