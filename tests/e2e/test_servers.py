"""The test servers are set up for capture as scripts/services.sh promises, and the
least-privilege CDC user can do what the dialects need."""

from __future__ import annotations

import pytest

from sdk import ConnectionConfig


@pytest.mark.mysql
def test_mysql_has_row_binlog_and_cdc_user(mysql_url: str) -> None:
    import pymysql

    config = ConnectionConfig.from_url(mysql_url)
    conn = pymysql.connect(host=config.host, port=config.port or 3306, user=config.user,
                           password=config.password or "", database=config.database)
    with conn.cursor() as cur:
        cur.execute("SELECT @@log_bin, @@binlog_format, @@binlog_row_image, "
                    "@@binlog_row_metadata, @@server_id")
        assert cur.fetchone() == (1, "ROW", "FULL", "FULL", 1)
        cur.execute("SHOW BINARY LOGS")
        assert cur.fetchall()
        cur.execute("SHOW GRANTS")
        grants = " ".join(r[0] for r in cur.fetchall())
        assert "REPLICATION SLAVE" in grants or "REPLICATION REPLICA" in grants
    conn.close()


@pytest.mark.postgres
def test_postgres_has_logical_wal_and_replication_user(postgres_url: str) -> None:
    import psycopg

    with psycopg.connect(postgres_url, autocommit=True) as conn:
        assert conn.execute("SHOW wal_level").fetchone() == ("logical",)
        conn.execute("SELECT pg_create_logical_replication_slot('sdk_probe', 'pgoutput')")
        conn.execute("SELECT pg_drop_replication_slot('sdk_probe')")
    with psycopg.connect(postgres_url, autocommit=True, replication="database") as repl:
        (row,) = repl.execute("IDENTIFY_SYSTEM").fetchall()
        assert row[0]  # system id
