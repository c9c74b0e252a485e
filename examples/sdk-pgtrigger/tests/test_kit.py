"""The conformance kit against this dialect, on the PostgreSQL of SDK_TEST_POSTGRES_URL (the
capture user) and SDK_TEST_POSTGRES_ADMIN_URL (who creates the kit's tables and writes them)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pytest

from sdk import TableId
from sdk.testing import Feature, GoldenColumn, Harness
from sdk.testing.suite import *  # noqa: F403

GOLDEN = {  # every type the dialect captures, with its edge values
    "SMALLINT": ["-32768", "32767"], "INTEGER": ["-2147483648"], "BIGINT": ["0"],
    "NUMERIC(38,10)": ["0.0000000001", "-1234567890123456789012345678.5"],
    "DOUBLE PRECISION": ["0.1", "'-Infinity'"], "REAL": ["1.5"], "BOOLEAN": ["TRUE", "FALSE"],
    "DATE": ["'0001-01-01'", "'9999-12-31'"], "TIMESTAMP(6)": ["'2024-02-29 23:59:59.999999'"],
    "TIMESTAMPTZ": ["'2024-03-10 02:30:00+05:30'"], "VARCHAR(10)": ["'ünï'"], "CHAR(2)": ["'a'"],
    "TEXT": ["''", "'it''s ünï 😀'", "repeat('x', 5000)"], "BYTEA": ["'\\x'", "'\\x00ff10'"],
}


class PgTriggerHarness(Harness):
    dialect = "pgtrigger"
    features = frozenset({Feature.CONCURRENT_WRITERS, Feature.KEY_UPDATES, Feature.END_SESSION})

    def __init__(self, url: str | None, admin_url: str | None, user: str = "") -> None:
        super().__init__(url)
        self.admin_url, self.user = admin_url, user

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
        if self.user:  # what a DBA grants the capture user
            self.execute(f"GRANT SELECT, TRIGGER ON {self.qualified(name)} TO {self.user}")
        return table

    def end_session(self, conn: Any) -> None:
        self.execute(f"SELECT pg_terminate_backend({conn.info.backend_pid})")

    def truncate_sql(self, name: str) -> str:
        return f"TRUNCATE TABLE {self.qualified(name)}"

    def refused_login_url(self) -> str:
        """A role that does not exist (test servers trust loopback: a wrong password logs in)."""
        scheme, _, rest = (self.url or "").partition("://")
        return f"{scheme}://sdk_kit_nobody:pw-4x@{rest.rsplit('@', 1)[-1]}"

    def golden_columns(self) -> list[GoldenColumn]:
        return [GoldenColumn(sql_type, literals) for sql_type, literals in GOLDEN.items()]


@pytest.fixture(scope="session")
def harness() -> Harness:
    url = os.environ.get("SDK_TEST_POSTGRES_URL")
    return PgTriggerHarness(url.replace("postgresql://", "pgtrigger://", 1) if url else None,
                            os.environ.get("SDK_TEST_POSTGRES_ADMIN_URL"),
                            os.environ.get("SDK_TEST_POSTGRES_CAPTURE_USER", ""))
