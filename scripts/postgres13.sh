#!/usr/bin/env bash
# A PostgreSQL 13 server for the postgres dialect's pre-15 paths (EXPORT_SNAPSHOT syntax of
# CREATE_REPLICATION_SLOT, pgoutput protocol 1 without streaming), with no system service:
# Debian bullseye's packages are downloaded and unpacked under $SDK_PG13_ROOT (no dpkg install,
# so the machine's own PostgreSQL is untouched), a cluster is made under $SDK_PG13_ROOT/data
# with wal_level=logical and started on 127.0.0.1:$SDK_PG13_PORT, and the CDC role and test
# database are created as scripts/services.sh does. Idempotent; prints the URLs the tests read:
#   eval "$(bash scripts/postgres13.sh)" && python -m pytest -m postgres
#   bash scripts/postgres13.sh stop
# Needs a Debian-style machine (apt-get, dpkg-deb) that reaches deb.debian.org; run as root
# (the server runs as the postgres user) or as an ordinary user.
set -euo pipefail

ROOT=${SDK_PG13_ROOT:-/tmp/sdk-pg13}
PORT=${SDK_PG13_PORT:-5433}
CDC_USER=${SDK_CDC_USER:-sdk_cdc}
CDC_PASSWORD=${SDK_CDC_PASSWORD:-sdk_cdc}
TEST_DB=${SDK_TEST_DB:-sdk_test}
BIN=$ROOT/usr/lib/postgresql/13/bin
DATA=$ROOT/data
export LD_LIBRARY_PATH=$ROOT/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

say() { echo "postgres13: $*" >&2; }
as_owner() {  # run a server command as the data directory's owner
  if [ "$(id -u)" = 0 ]; then
    su postgres -s /bin/bash -c "LD_LIBRARY_PATH=$LD_LIBRARY_PATH $(printf '%q ' "$@")"
  else
    "$@"
  fi
}
psql_admin() { psql -h127.0.0.1 -p "$PORT" -U postgres -v ON_ERROR_STOP=1 -qAt "$@"; }

if [ "${1:-}" = stop ]; then
  [ -d "$DATA" ] && as_owner "$BIN/pg_ctl" -D "$DATA" -m fast stop >&2 || true
  exit 0
fi

if [ ! -x "$BIN/postgres" ]; then
  say "downloading PostgreSQL 13 from Debian bullseye into $ROOT"
  apt_dir=$ROOT/apt
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs"
  echo "deb http://deb.debian.org/debian bullseye main" > "$apt_dir/sources.list"
  apt_opts=(-o "Dir::Etc::sourcelist=$apt_dir/sources.list" -o "Dir::Etc::sourceparts=-"
            -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
            -o "APT::Sandbox::User=$(id -un)" -o "Debug::NoLocking=1")
  apt-get "${apt_opts[@]}" -qq update >&2
  # the server and the libraries bullseye built it against that bookworm no longer ships
  (cd "$apt_dir/debs" && apt-get "${apt_opts[@]}" -qq download postgresql-13 libicu67 \
    libldap-2.4-2 libllvm11 libssl1.1 >&2)
  for deb in "$apt_dir"/debs/*.deb; do dpkg-deb -x "$deb" "$ROOT"; done
fi
"$BIN/postgres" --version >&2

if [ ! -f "$DATA/PG_VERSION" ]; then
  mkdir -p "$DATA"
  [ "$(id -u)" = 0 ] && chown postgres "$DATA"
  as_owner "$BIN/initdb" -D "$DATA" -A trust -U postgres >/dev/null
  cat >> "$DATA/postgresql.conf" <<EOF
# Written by sdk scripts/postgres13.sh
port = $PORT
listen_addresses = '127.0.0.1'
unix_socket_directories = '$DATA'
wal_level = logical
max_replication_slots = 20
max_wal_senders = 20
EOF
fi
if ! psql_admin -c "SELECT 1" >/dev/null 2>&1; then
  as_owner "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w start >/dev/null
fi
. "$(dirname "$0")/pg_cdc_setup.sh"
pg_cdc_setup
say "$(psql_admin -c 'SELECT version()' | cut -d' ' -f1-2) on port $PORT: wal_level=$(psql_admin -c 'SHOW wal_level')"
echo "export SDK_TEST_POSTGRES_URL=postgresql://$CDC_USER:$CDC_PASSWORD@127.0.0.1:$PORT/$TEST_DB"
echo "export SDK_TEST_POSTGRES_ADMIN_URL=postgresql://postgres@127.0.0.1:$PORT/$TEST_DB"
