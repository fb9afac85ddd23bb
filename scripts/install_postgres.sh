#!/usr/bin/env bash
# Make sure PostgreSQL's server binaries exist for the progress-store and replica tests (Debian/Ubuntu
# package `postgresql`, found under /usr/lib/postgresql/*/bin). Runs apt-get as root; otherwise prints
# what to run. Set KVLAB_PG_BINDIR to use another install. Exit status is 0 even when it cannot install:
# the PostgreSQL tests then skip with this reason (and fail under CI=true).
# The server package depends on postgresql-client-NN, whose pg_dump / pg_restore progress/backup.py runs.
set -uo pipefail
has_pg() {
  [ -n "${KVLAB_PG_BINDIR:-}" ] && [ -x "${KVLAB_PG_BINDIR}/initdb" ] && return 0
  compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}
has_pg && exit 0
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "install_postgres: installing Debian's postgresql package for the progress and replica tests" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends postgresql >/dev/null; then
    apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends postgresql >/dev/null
  fi
  has_pg && exit 0
  echo "install_postgres: WARNING: apt-get could not install postgresql; PostgreSQL tests will be skipped" >&2
elif command -v apt-get >/dev/null 2>&1; then
  echo "install_postgres: WARNING: PostgreSQL is missing; run 'sudo apt-get install postgresql' for its tests" >&2
else
  echo "install_postgres: WARNING: PostgreSQL is missing and this is not a Debian/Ubuntu system;" \
       "install it and set KVLAB_PG_BINDIR=/path/to/postgresql/bin for its tests" >&2
fi
exit 0
