# Sourced by scripts/services.sh and scripts/postgres13.sh: the least-privilege CDC role and the
# test database on a PostgreSQL server, idempotently. The caller defines psql_admin (psql as the
# superuser on that server) and CDC_USER, CDC_PASSWORD and TEST_DB.
pg_cdc_setup() {
  psql_admin <<EOF_SQL
DO \$\$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '$CDC_USER') THEN
    CREATE ROLE $CDC_USER LOGIN REPLICATION PASSWORD '$CDC_PASSWORD';
  END IF;
END \$\$;
EOF_SQL
  psql_admin -c "SELECT 1 FROM pg_database WHERE datname = '$TEST_DB'" | grep -q 1 ||
    psql_admin -c "CREATE DATABASE $TEST_DB"
  psql_admin -d "$TEST_DB" <<EOF_SQL
GRANT CONNECT, CREATE ON DATABASE $TEST_DB TO $CDC_USER;
GRANT USAGE ON SCHEMA public TO $CDC_USER;
GRANT SELECT ON ALL TABLES IN SCHEMA public TO $CDC_USER;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO $CDC_USER;
EOF_SQL
  # the role writes the tests' mirrors too: what a DBA grants a target user (PostgreSQL 15 and
  # later) so that a sync applies as a replica does (docs/operations.md)
  if [ "$(psql_admin -c 'SHOW server_version_num')" -ge 150000 ]; then
    psql_admin -c "GRANT SET ON PARAMETER session_replication_role TO $CDC_USER"
  fi
}
