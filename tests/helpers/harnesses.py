"""The conformance kit's harnesses of the built-in dialects (SQLite, MySQL, PostgreSQL), shared
by their kit runs and the tests that use a dialect the kit's way."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sdk import ConnectionConfig, Offset, TableId
from sdk.testing import Feature, GoldenColumn, Harness
from sdk_mysql import _offsets as mysql_offsets
from sdk_postgres import _offsets as pg_offsets


class SqliteHarness(Harness):
    """A SQLite file; SQLite serialises writers, which the kit's writer threads wait for."""

    dialect = "sqlite"
    features = frozenset({Feature.KEY_UPDATES})

    def admin_connect(self) -> sqlite3.Connection:
        assert self.url is not None
        conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), timeout=60,
                               check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        return conn

    def column_type(self, kind: str) -> str:
        return {"int": "INTEGER", "text": "TEXT"}[kind]

    def table_id(self, name: str) -> TableId:
        return TableId("main", name)

    def offset_past(self, offset: Offset) -> Offset:
        seq = offset["seq"]
        assert isinstance(seq, int)
        return Offset("sqlite", seq=seq + 10**9)

    def golden_columns(self) -> list[GoldenColumn]:
        return [GoldenColumn("INTEGER", ["0", "-9223372036854775808", "9223372036854775807"]),
                GoldenColumn("REAL", ["0.1", "-1.5e300", "2.2250738585072014e-308"]),
                GoldenColumn("TEXT", ["''", "'it''s'", "'ünï 😀'", "'a\nb'"]),
                GoldenColumn("BLOB", ["x''", "x'00ff10'"])]


class MysqlHarness(Harness):
    """The test server's ``sdk_test`` database; tables are made by its administrator."""

    dialect = "mysql"
    features = frozenset(Feature)

    def truncate_sql(self, name: str) -> str:
        return f"TRUNCATE TABLE {self.qualified(name)}"

    def __init__(self, url: str | None, admin_url: str) -> None:
        super().__init__(url)
        self.admin = ConnectionConfig.from_url(admin_url)

    def admin_connect(self) -> Any:
        import pymysql

        c = self.admin
        return pymysql.connect(host=c.host, port=c.port or 3306, user=c.user,
                               password=c.password or "", database=c.database,
                               charset="utf8mb4")

    def column_type(self, kind: str) -> str:
        return {"int": "BIGINT", "text": "VARCHAR(64)"}[kind]

    def table_id(self, name: str) -> TableId:
        assert self.admin.database
        return TableId(self.admin.database, name)

    def quote(self, name: str) -> str:
        return "`" + name.replace("`", "``") + "`"

    def offset_past(self, offset: Offset) -> Offset:
        file, pos, _ = mysql_offsets.parts(offset)
        return mysql_offsets.make_offset(file, pos + 10**9)

    def force_log_switch(self) -> None:
        self.execute("FLUSH BINARY LOGS")

    def end_session(self, conn: Any) -> None:
        self.execute(f"KILL {conn.raw.thread_id()}")

    def golden_columns(self) -> list[GoldenColumn]:
        return [
            GoldenColumn("TINYINT", ["-128", "127"]),
            GoldenColumn("INT UNSIGNED", ["0", "4294967295"]),
            GoldenColumn("BIGINT UNSIGNED", ["18446744073709551615"]),
            GoldenColumn("DECIMAL(38,10)", ["0.0000000001", "-1234567890123456789012345678.5"]),
            GoldenColumn("DOUBLE", ["0.1", "-1.5e300"]),
            GoldenColumn("DATE", ["'1000-01-01'", "'9999-12-31'"]),
            GoldenColumn("DATETIME(6)", ["'2024-02-29 23:59:59.999999'"]),
            GoldenColumn("TIMESTAMP(6) NULL", ["'2038-01-19 03:14:07.000001'"]),
            GoldenColumn("TIME(6)", ["'-838:59:59'", "'12:00:00.5'"]),
            GoldenColumn("YEAR", ["1901", "2155"]),
            GoldenColumn("VARCHAR(20)", ["''", "'it''s ünï 😀'"]),
            GoldenColumn("TEXT", ["REPEAT('x', 5000)"]),
            GoldenColumn("VARBINARY(8)", ["x''", "x'00ff10'"]),
            GoldenColumn("BLOB", ["x'000102'"]),
            GoldenColumn("BIT(10)", ["b'1000000001'"]),
            GoldenColumn("ENUM('a','b c')", ["'b c'"]),
            GoldenColumn("SET('x','y')", ["'x,y'", "''"]),
            GoldenColumn("JSON", ["'{\"a\": [1, 2.5, null]}'"]),
            GoldenColumn("BOOLEAN", ["TRUE", "FALSE"]),
        ]

    def target_url(self) -> str:
        return self.admin.url

    def refused_login_url(self) -> str:
        c = ConnectionConfig.from_url(self.url or "")
        return f"mysql://{c.user}:not-the-password-4x@{c.host}:{c.port or 3306}/{c.database}"

    def unprivileged_url(self) -> str:
        """A user who can log in and read but has no replication privileges."""
        assert self.url is not None
        self.execute("CREATE USER IF NOT EXISTS 'sdk_kit_noprivs'@'%' IDENTIFIED BY 'kitpw'",
                     f"GRANT SELECT ON {self.quote(self.admin.database or '')}.* "
                     "TO 'sdk_kit_noprivs'@'%'")
        c = ConnectionConfig.from_url(self.url)
        return f"mysql://sdk_kit_noprivs:kitpw@{c.host}:{c.port or 3306}/{c.database}"


class PostgresHarness(Harness):
    """Schema ``public``; tables are made and published by the administrator, as a DBA would
    for a least-privilege capture user."""

    dialect = "postgres"
    features = frozenset(Feature)

    def truncate_sql(self, name: str) -> str:
        return f"TRUNCATE TABLE {self.qualified(name)}"

    def __init__(self, url: str, admin_url: str, publication: str) -> None:
        super().__init__(url)
        self.admin_url, self.publication = admin_url, publication

    def admin_connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.admin_url)

    def column_type(self, kind: str) -> str:
        return {"int": "BIGINT", "text": "TEXT"}[kind]

    def table_id(self, name: str) -> TableId:
        return TableId("public", name)

    def create_table(self, name: str, columns: Sequence[tuple[str, str]],
                     key: Sequence[str]) -> TableId:
        table = super().create_table(name, columns, key)
        self.execute(f"ALTER PUBLICATION {self.publication} ADD TABLE {self.qualified(name)}")
        return table

    def end_session(self, conn: Any) -> None:
        self.execute(f"SELECT pg_terminate_backend({conn.raw.info.backend_pid})")

    def offset_past(self, offset: Offset) -> Offset:
        return pg_offsets.make_offset(pg_offsets.parts(offset)[0] + 2**40)

    def force_log_switch(self) -> None:
        self.execute("SELECT pg_switch_wal()")

    def golden_columns(self) -> list[GoldenColumn]:
        return [
            GoldenColumn("SMALLINT", ["-32768", "32767"]),
            GoldenColumn("INTEGER", ["-2147483648"]),
            GoldenColumn("NUMERIC(38,10)", ["0.0000000001", "-1234567890123456789012345678.5"]),
            GoldenColumn("NUMERIC", ["'NaN'", "1e-30"]),
            GoldenColumn("DOUBLE PRECISION", ["0.1", "'-Infinity'"]),
            GoldenColumn("REAL", ["1.5"]),
            GoldenColumn("BOOLEAN", ["TRUE", "FALSE"]),
            GoldenColumn("DATE", ["'0001-01-01'", "'9999-12-31'"]),
            GoldenColumn("TIMESTAMP(6)", ["'2024-02-29 23:59:59.999999'"]),
            GoldenColumn("TIMESTAMPTZ", ["'2024-03-10 02:30:00+05:30'"]),
            GoldenColumn("TIME", ["'23:59:59.999999'"]),
            GoldenColumn("INTERVAL", ["'1 year 2 mons 3 days 04:05:06.7'"]),
            GoldenColumn("TEXT", ["''", "'it''s ünï 😀'", "repeat('x', 5000)"]),
            GoldenColumn("BYTEA", ["'\\x'", "'\\x00ff10'"]),
            GoldenColumn("UUID", ["'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'"]),
            GoldenColumn("JSONB", ["'{\"a\": [1, 2.5, null]}'"]),
            GoldenColumn("INTEGER[]", ["'{1,2,NULL}'"]),
        ]

    def target_url(self) -> str:
        return self.admin_url

    def refused_login_url(self) -> str:
        """A role that does not exist (the test servers trust loopback, so a wrong password
        would still log in)."""
        parts = urlsplit(self.url or "")
        host = parts.netloc.rsplit("@", 1)[-1]
        return urlunsplit(parts._replace(netloc=f"sdk_kit_nobody:pw-4x@{host}"))

    def unprivileged_url(self) -> str:
        """A role that can log in and read but lacks REPLICATION."""
        assert self.url is not None
        self.execute("DO $$ BEGIN CREATE ROLE sdk_kit_noprivs LOGIN PASSWORD 'kitpw'; "
                     "EXCEPTION WHEN duplicate_object THEN NULL; END $$",
                     # not ON ALL TABLES: that touches every other test's tables as well
                     "GRANT pg_read_all_data TO sdk_kit_noprivs")
        parts = urlsplit(self.url)
        host = parts.netloc.rsplit("@", 1)[-1]
        return urlunsplit(parts._replace(netloc=f"sdk_kit_noprivs:kitpw@{host}"))
