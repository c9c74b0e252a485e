"""The conformance kit against the MySQL/MariaDB dialect on the real server."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.servers import MYSQL_ADMIN_URL

from sdk import ConnectionConfig, Offset, TableId
from sdk.testing import Feature, GoldenColumn, Harness
from sdk.testing.suite import *  # noqa: F403
from sdk_mysql._offsets import make_offset, parts

pytestmark = pytest.mark.mysql


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
        file, pos, _ = parts(offset)
        return make_offset(file, pos + 10**9)

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


@pytest.fixture(scope="session")
def harness(mysql_url: str) -> Harness:
    return MysqlHarness(mysql_url, MYSQL_ADMIN_URL)
