"""The SQL Server dialect against a real server with the Agent (compose.yaml's ``sqlserver``
service): the conformance kit and the type cases. Skipped unless SDK_TEST_SQLSERVER_URL names
one, e.g. ``sqlserver://sa:Sdk_passw0rd@127.0.0.1:1433/master``; the tests create and use the
database ``sdk_test``. Never run here (no SQL Server on the machine that wrote them).
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Iterator, Sequence
from decimal import Decimal
from typing import Any

import pytest

import sdk_sqlserver
from sdk import ChangeEvent, SnapshotSplit, TableId
from sdk.dialect.config import ConnectionConfig
from sdk.testing import Feature, GoldenColumn, Harness
from sdk.testing.suite import *  # noqa: F403

pytestmark = pytest.mark.sqlserver
URL = os.environ.get("SDK_TEST_SQLSERVER_URL")
SKIP = ("no SQL Server: set SDK_TEST_SQLSERVER_URL (docker compose up sqlserver; "
        "sqlserver://sa:Sdk_passw0rd@127.0.0.1:1433/master)")


def _in_test_database(url: str) -> str:
    """``url`` pointing at the database ``sdk_test`` instead of the one it names."""
    head, _, tail = url.partition("?")
    base = head.rsplit("/", 1)[0]
    return f"{base}/sdk_test" + (f"?{tail}" if tail else "")


class SqlServerHarness(Harness):
    """Tables in ``sdk_test.dbo``, each with CDC enabled (a capture instance) on creation."""

    dialect = "sqlserver"
    skip_reason = SKIP
    features = frozenset({Feature.CONCURRENT_WRITERS, Feature.KEY_UPDATES})

    def admin_connect(self) -> Any:
        import pymssql

        assert self.url is not None
        c = ConnectionConfig.from_url(self.url)
        return pymssql.connect(server=c.host, port=str(c.port or 1433), user=c.user,
                               password=c.password or "", database="sdk_test")

    def column_type(self, kind: str) -> str:
        return {"int": "BIGINT", "text": "NVARCHAR(64)"}[kind]

    def table_id(self, name: str) -> TableId:
        return TableId("dbo", name)

    def quote(self, name: str) -> str:
        return "[" + name.replace("]", "]]") + "]"

    def create_table(self, name: str, columns: Sequence[tuple[str, str]],
                     key: Sequence[str]) -> TableId:
        table = super().create_table(name, columns, key)
        self.execute(f"EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', "
                     f"@source_name = N'{name}', @role_name = NULL")
        return table

    def drop_table(self, name: str) -> None:
        self.execute(f"IF OBJECT_ID(N'dbo.{name}') IS NOT NULL BEGIN "
                     f"IF (SELECT is_tracked_by_cdc FROM sys.tables WHERE name = N'{name}') = 1 "
                     f"EXEC sys.sp_cdc_disable_table N'dbo', N'{name}', N'all'; "
                     f"DROP TABLE dbo.{self.quote(name)} END")

    def golden_columns(self) -> list[GoldenColumn]:
        return [
            GoldenColumn("DATETIME2(7)", ["'2024-01-02 03:04:05.1234567'",
                                          "'9999-12-31 23:59:59.9999999'"]),
            GoldenColumn("DATETIMEOFFSET(7)", ["'2024-01-02 03:04:05.1234567 +02:00'"]),
            GoldenColumn("DATE", ["'0001-01-01'"]),
            GoldenColumn("TIME(7)", ["'23:59:59.9999999'"]),
            GoldenColumn("MONEY", ["-922337203685477.5808"]),
            GoldenColumn("DECIMAL(38,4)", ["1234567890123456789012345678901234.5678"]),
            GoldenColumn("UNIQUEIDENTIFIER", ["'6F9619FF-8B86-D011-B42D-00C04FC964FF'"]),
            GoldenColumn("NVARCHAR(MAX)", ["N''", "REPLICATE(CONVERT(nvarchar(max), N'é'), 9000)"]),
            GoldenColumn("VARBINARY(MAX)", ["0x", "0x00FF10"]),
            GoldenColumn("BIT", ["0", "1"]),
            GoldenColumn("FLOAT", ["0.1"]),
        ]


@pytest.fixture(scope="session")
def harness() -> Harness:
    if not URL:
        return SqlServerHarness(None)
    admin = sdk_sqlserver.connect(ConnectionConfig.from_url(URL))
    admin.query("IF DB_ID(N'sdk_test') IS NULL CREATE DATABASE sdk_test")
    admin.query("ALTER DATABASE sdk_test SET ALLOW_SNAPSHOT_ISOLATION ON")
    admin.close()
    url = _in_test_database(URL)
    c = sdk_sqlserver.connect(ConnectionConfig.from_url(url))
    c.query("IF (SELECT is_cdc_enabled FROM sys.databases WHERE database_id = DB_ID()) = 0 "
            "EXEC sys.sp_cdc_enable_db")
    c.close()
    return SqlServerHarness(url)


@pytest.fixture(scope="module")
def conn() -> Iterator[sdk_sqlserver.MssqlConnection]:
    if not URL:
        pytest.skip("no SQL Server: set SDK_TEST_SQLSERVER_URL (docker compose up sqlserver; "
                    "sqlserver://sa:Sdk_passw0rd@127.0.0.1:1433/master)")
    admin = sdk_sqlserver.connect(ConnectionConfig.from_url(URL))
    admin.query("IF DB_ID(N'sdk_test') IS NULL CREATE DATABASE sdk_test")
    admin.query("ALTER DATABASE sdk_test SET ALLOW_SNAPSHOT_ISOLATION ON")
    admin.close()
    config = ConnectionConfig.from_url(URL)
    config = ConnectionConfig(config.dialect, config.host, config.port, config.user,
                              config.password, "sdk_test", config.options)
    c = sdk_sqlserver.connect(config)
    c.query("IF (SELECT is_cdc_enabled FROM sys.databases WHERE database_id = DB_ID()) = 0 "
            "EXEC sys.sp_cdc_enable_db")
    c.query("IF OBJECT_ID(N'dbo.live') IS NOT NULL BEGIN "
            "IF (SELECT is_tracked_by_cdc FROM sys.tables WHERE name = N'live') = 1 "
            "EXEC sys.sp_cdc_disable_table N'dbo', N'live', N'all'; DROP TABLE dbo.live END")
    c.query("CREATE TABLE dbo.live (id int PRIMARY KEY, d2 datetime2(7), dto datetimeoffset(7),"
            " m money, big decimal(38,4), g uniqueidentifier, t nvarchar(max), b varbinary(max),"
            " f bit)")
    c.query("EXEC sys.sp_cdc_enable_table @source_schema = N'dbo', @source_name = N'live', "
            "@role_name = NULL, @supports_net_changes = 0")
    deadline = time.monotonic() + 60
    while sdk_sqlserver.max_lsn(c) is None and time.monotonic() < deadline:
        time.sleep(1)
    yield c
    c.close()


def _events(stream: Iterator[Any]) -> list[ChangeEvent]:
    return [e for e in stream if isinstance(e, ChangeEvent)]


def test_preflight_passes_on_the_compose_server(conn: sdk_sqlserver.MssqlConnection) -> None:
    failing = [str(r) for r in sdk_sqlserver.preflight(conn, [TableId("dbo", "live")])
               if not r.ok and r.required]
    assert failing == []


def test_changes_between_watermarks_match_the_snapshot(
        conn: sdk_sqlserver.MssqlConnection) -> None:
    table = sdk_sqlserver.describe_table(conn, TableId("dbo", "live"))
    low = sdk_sqlserver.current_offset(conn)
    conn.query("INSERT INTO dbo.live VALUES (1, '2024-01-02 03:04:05.1234567', "
               "'2024-01-02 03:04:05.1234567 +02:00', -12.3456, 12345678901234567890.1234, "
               "NEWID(), REPLICATE(CONVERT(nvarchar(max), N'é'), 9000), 0x00FF, 1)")
    conn.query("UPDATE dbo.live SET f = 0 WHERE id = 1")
    high = sdk_sqlserver.current_offset(conn)
    got = _events(sdk_sqlserver.stream_log(conn, [table], low, high))
    assert [e.op for e in got] == ["c", "u"]
    assert got[1].before is not None and got[1].before[6] == got[1].after[6]  # LOB filled
    (row,) = [r for batch in sdk_sqlserver.read_range(
        conn, table, SnapshotSplit(table.table, 0, None, None), 10) for r in batch]
    assert got[1].after == row
    assert row[1] == dt.datetime(2024, 1, 2, 3, 4, 5, 123456)
    assert row[2] == dt.datetime(2024, 1, 2, 1, 4, 5, 123456, tzinfo=dt.UTC)
    assert row[3] == Decimal("-12.3456")
    assert _events(sdk_sqlserver.stream_log(conn, [table], low, high)) == got
