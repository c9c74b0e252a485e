#!/usr/bin/env bash
# Prepare the local MariaDB/MySQL and PostgreSQL servers for change capture, idempotently:
#   MariaDB: row binlog with full images and metadata; PostgreSQL: wal_level=logical, slots.
# Restarts a server only when a setting changes, creates a least-privilege CDC user on each and
# a test database, then prints the URLs the tests read (eval "$(scripts/services.sh)" exports
# them). Run as root on a Debian-style machine whose servers run from Debian's packages.
set -euo pipefail

CDC_USER=${SDK_CDC_USER:-sdk_cdc}
CDC_PASSWORD=${SDK_CDC_PASSWORD:-sdk_cdc}
TEST_DB=${SDK_TEST_DB:-sdk_test}
MYSQL_CNF=/etc/mysql/sdk-cdc.cnf

say() { echo "services: $*" >&2; }
mysql_root() { mariadb -uroot -h127.0.0.1 -N -B "$@"; }

wait_for() {  # wait_for NAME COMMAND...: up to 60 s
  local name=$1; shift
  for _ in $(seq 1 120); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  say "$name did not come up"; return 1
}

if [ "$(id -u)" != 0 ]; then
  say "run as root (it edits server configuration and restarts the servers)"; exit 1
fi

# --- MariaDB / MySQL ---------------------------------------------------------------------------
if ! mysql_root -e "SELECT 1" >/dev/null 2>&1; then
  say "starting MariaDB"
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  wait_for MariaDB mysql_root -e "SELECT 1"
fi
cat > "$MYSQL_CNF.new" <<'EOF'
# Written by sdk scripts/services.sh: row-based binlog for change data capture.
[mysqld]
log_bin = mysql-bin
binlog_format = ROW
binlog_row_image = FULL
binlog_row_metadata = FULL
server_id = 1
binlog_expire_logs_seconds = 604800
EOF
mv "$MYSQL_CNF.new" "$MYSQL_CNF"
grep -qxF "!include $MYSQL_CNF" /etc/mysql/my.cnf || echo "!include $MYSQL_CNF" >> /etc/mysql/my.cnf
current=$(mysql_root -e "SELECT CONCAT_WS(',', @@log_bin, @@binlog_format, @@binlog_row_image,
  @@binlog_row_metadata)")
if [ "$current" != "1,ROW,FULL,FULL" ] && [ "$current" != "ON,ROW,FULL,FULL" ]; then
  say "restarting MariaDB for row binlog (was: $current)"
  mysql_root -e "SHUTDOWN" || true
  for _ in $(seq 1 60); do pgrep -x mariadbd >/dev/null || break; sleep 0.5; done
  start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
  wait_for MariaDB mysql_root -e "SELECT 1"
fi
mysql_root <<EOF
CREATE DATABASE IF NOT EXISTS \`$TEST_DB\` CHARACTER SET utf8mb4;
CREATE USER IF NOT EXISTS '$CDC_USER'@'%' IDENTIFIED BY '$CDC_PASSWORD';
GRANT SELECT, RELOAD, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '$CDC_USER'@'%';
EOF
say "MariaDB: $(mysql_root -e "SELECT CONCAT('log_bin=', @@log_bin, ' binlog_format=',
  @@binlog_format, ' row_image=', @@binlog_row_image, ' row_metadata=', @@binlog_row_metadata)")"

# --- PostgreSQL --------------------------------------------------------------------------------
PG_VERSION=$(ls /etc/postgresql | sort -V | tail -n 1)
PG_CONF=/etc/postgresql/$PG_VERSION/main
psql_admin() { psql -h127.0.0.1 -U postgres -v ON_ERROR_STOP=1 -qAt "$@"; }
if ! psql_admin -c "SELECT 1" >/dev/null 2>&1; then
  say "starting PostgreSQL"
  pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" main start
  wait_for PostgreSQL psql_admin -c "SELECT 1"
fi
cat > "$PG_CONF/conf.d/91-sdk-cdc.conf" <<'EOF'
# Written by sdk scripts/services.sh: logical decoding for change data capture.
wal_level = logical
max_replication_slots = 32
max_wal_senders = 32
max_slot_wal_keep_size = 4GB
EOF
grep -q "^host[[:space:]]\+replication[[:space:]]\+all[[:space:]]\+127.0.0.1/32" \
  "$PG_CONF/pg_hba.conf" || echo "host replication all 127.0.0.1/32 trust" >> "$PG_CONF/pg_hba.conf"
if [ "$(psql_admin -c 'SHOW wal_level')" != logical ]; then
  say "restarting PostgreSQL for wal_level=logical"
  pg_ctlcluster --skip-systemctl-redirect "$PG_VERSION" main restart
  wait_for PostgreSQL psql_admin -c "SELECT 1"
else
  psql_admin -c "SELECT pg_reload_conf()" >/dev/null
fi
. "$(dirname "$0")/pg_cdc_setup.sh"
pg_cdc_setup
say "PostgreSQL $PG_VERSION: wal_level=$(psql_admin -c 'SHOW wal_level')"

cat <<EOF
export SDK_TEST_MYSQL_URL=mysql://$CDC_USER:$CDC_PASSWORD@127.0.0.1:3306/$TEST_DB
export SDK_TEST_MYSQL_ADMIN_URL=mysql://root@127.0.0.1:3306/$TEST_DB
export SDK_TEST_POSTGRES_URL=postgresql://$CDC_USER:$CDC_PASSWORD@127.0.0.1:5432/$TEST_DB
export SDK_TEST_POSTGRES_ADMIN_URL=postgresql://postgres@127.0.0.1:5432/$TEST_DB
EOF
