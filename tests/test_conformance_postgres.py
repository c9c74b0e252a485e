"""The conformance kit against the PostgreSQL dialect on the real server (or the embedded one)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from helpers.servers import with_query

from sdk import Offset, TableId
from sdk.testing import Feature, GoldenColumn, Harness
from sdk.testing.suite import *  # noqa: F403
from sdk_postgres._offsets import make_offset, parts

pytestmark = pytest.mark.postgres


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
        return make_offset(parts(offset)[0] + 2**40)

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
                     "GRANT SELECT ON ALL TABLES IN SCHEMA public TO sdk_kit_noprivs")
        parts = urlsplit(self.url)
        host = parts.netloc.rsplit("@", 1)[-1]
        return urlunsplit(parts._replace(netloc=f"sdk_kit_noprivs:kitpw@{host}"))


@pytest.fixture(scope="session")
def harness(postgres_url: str, postgres_admin_url: str, postgres_admin: Any
            ) -> Iterator[Harness]:
    tag = uuid.uuid4().hex[:10]
    slot, publication = f"sdk_kit_{tag}", f"sdk_kit_{tag}"
    postgres_admin.execute(f"CREATE PUBLICATION {publication}")
    yield PostgresHarness(with_query(postgres_url, slot=slot, publication=publication),
                          postgres_admin_url, publication)
    postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                           "pg_replication_slots WHERE slot_name = %s", (slot,))
    postgres_admin.execute(f"DROP PUBLICATION IF EXISTS {publication}")
