#!/usr/bin/env bash
# What `make test-stack` needs from the OS besides Java: a Postgres server (initdb, postgres)
# and PostgreSQL's JDBC driver (for the Hive metastore). Installs the missing ones with
# apt-get when run as root on Debian/Ubuntu; otherwise says how.
set -u
missing=()
bindir="$(pg_config --bindir 2>/dev/null || true)"
if ! { [ -n "$bindir" ] && [ -x "$bindir/initdb" ]; } && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
if [ -z "${POSTGRES_JDBC_JAR:-}" ] && [ ! -f /usr/share/java/postgresql.jar ]; then
  missing+=(libpostgresql-jdbc-java)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing ${missing[*]} (apt-get)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  exit $?
fi
echo "make test-stack needs: ${missing[*]}. Debian/Ubuntu: sudo apt-get install -y ${missing[*]}" >&2
echo "(or point POSTGRES_JDBC_JAR at a PostgreSQL JDBC driver jar)" >&2
exit 1
