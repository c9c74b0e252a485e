"""The Oracle dialect against a live server: the conformance kit, and the LogMiner cases the fake
cannot prove (AS OF SCN visibility, a transaction open across the snapshot, the redo formats).

Skipped unless ``SDK_TEST_ORACLE_URL`` names a capture user, e.g. with ``compose.yaml``'s
``oracle`` service and ``docker/oracle-init``::

    SDK_TEST_ORACLE_URL=oracle://c##sdk_cdc:sdk@127.0.0.1:1521/FREE?pdb=FREEPDB1
    SDK_TEST_ORACLE_ADMIN_URL=oracle://sdk_test:sdk@127.0.0.1:1521/FREEPDB1

The admin URL (a user owning the test tables, in the PDB) defaults to the capture URL.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

import sdk_oracle
from sdk import ChangeEvent, DialectManager, SnapshotSplit, TableId
from sdk.dialect.config import ConnectionConfig
from sdk.testing import Feature, GoldenColumn, Harness
from sdk.testing.suite import *  # noqa: F403

pytestmark = pytest.mark.oracle

URL = os.environ.get("SDK_TEST_ORACLE_URL")
ADMIN_URL = os.environ.get("SDK_TEST_ORACLE_ADMIN_URL", URL or "")
SKIP = ("no Oracle server: set SDK_TEST_ORACLE_URL (see docs/dialects/oracle.md; "
        "compose.yaml has an oracle service)")


def admin_connection(url: str = ADMIN_URL) -> Any:
    import oracledb

    config = ConnectionConfig.from_url(url)
    return oracledb.connect(user=config.user, password=config.password,
                            dsn=f"{config.host}:{config.port or 1521}/{config.database}")


class OracleHarness(Harness):
    """Tables owned by the admin user, with ALL COLUMNS supplemental logging."""

    dialect = "oracle"
    skip_reason = SKIP
    features = frozenset({Feature.CONCURRENT_WRITERS, Feature.KEY_UPDATES, Feature.LOG_SWITCH})

    def admin_connect(self) -> Any:
        return admin_connection()

    def column_type(self, kind: str) -> str:
        return {"int": "NUMBER(19)", "text": "VARCHAR2(64)"}[kind]

    def table_id(self, name: str) -> TableId:
        user = ConnectionConfig.from_url(ADMIN_URL).user or ""
        return TableId(user.upper(), name)

    def create_table(self, name: str, columns: Sequence[tuple[str, str]],
                     key: Sequence[str]) -> TableId:
        table = super().create_table(name, columns, key)
        self.execute(f"ALTER TABLE {self.qualified(name)} ADD SUPPLEMENTAL LOG DATA (ALL) "
                     "COLUMNS")
        return table

    def drop_table(self, name: str) -> None:
        self.execute(f"BEGIN EXECUTE IMMEDIATE 'DROP TABLE {self.qualified(name)} PURGE'; "
                     "EXCEPTION WHEN OTHERS THEN IF SQLCODE != -942 THEN RAISE; END IF; END;")

    def truncate_sql(self, name: str) -> str:
        return f"TRUNCATE TABLE {self.qualified(name)}"

    def force_log_switch(self) -> None:
        # a log switch is a CDB-wide operation: run it as the capture user (in the root)
        assert self.url is not None
        conn = admin_connection(self.url)
        try:
            conn.cursor().execute("ALTER SYSTEM SWITCH LOGFILE")
        finally:
            conn.close()

    def golden_columns(self) -> list[GoldenColumn]:
        return [
            GoldenColumn("NUMBER(10)", ["0", "-2147483648", "9999999999"]),
            GoldenColumn("NUMBER(38,10)", ["0.1", "-1234567890123456789012345678.0123456789"]),
            GoldenColumn("NUMBER", ["1e125", "-0.000001"]),
            GoldenColumn("BINARY_DOUBLE", ["0.1", "-1.5e300"]),
            GoldenColumn("BINARY_FLOAT", ["0.1", "3.4e38"]),
            GoldenColumn("VARCHAR2(100)", ["''", "'it''s'", "'ünï 😀'", "'a' || CHR(10) || 'b'"]),
            GoldenColumn("NVARCHAR2(50)", ["N'été'", "UNISTR('\\D83D\\DE00')"]),
            GoldenColumn("CHAR(5)", ["'ab'"]),
            GoldenColumn("DATE", ["DATE '2024-02-29'", "TO_DATE('0001-01-01 00:00:01', "
                                                       "'YYYY-MM-DD HH24:MI:SS')"]),
            GoldenColumn("TIMESTAMP(9)", ["TIMESTAMP '2024-01-02 03:04:05.123456789'"]),
            GoldenColumn("TIMESTAMP(6) WITH TIME ZONE",
                         ["TIMESTAMP '2024-01-02 03:04:05.5 +05:30'",
                          "TIMESTAMP '2024-07-01 12:00:00 Europe/Paris'"]),
            GoldenColumn("TIMESTAMP WITH LOCAL TIME ZONE",
                         ["TIMESTAMP '2024-01-02 03:04:05 +02:00'"]),
            GoldenColumn("INTERVAL DAY(3) TO SECOND(6)", ["INTERVAL '-1 02:03:04.5' DAY TO "
                                                          "SECOND"]),
            GoldenColumn("INTERVAL YEAR(2) TO MONTH", ["INTERVAL '2-3' YEAR TO MONTH"]),
            GoldenColumn("RAW(16)", ["HEXTORAW('00FF10')"]),
        ]


@pytest.fixture(scope="session")
def harness() -> Harness:
    return OracleHarness(URL)


@pytest.fixture
def live() -> Iterator[tuple[Any, Any]]:
    """The dialect connected with the capture URL, and an admin connection."""
    if URL is None:
        pytest.skip(SKIP)
    manager = DialectManager(load_entry_points=False)
    manager.register(sdk_oracle, "oracle")
    dialect = manager.get("oracle")
    conn = dialect.connect(ConnectionConfig.from_url(URL))
    admin = admin_connection()
    try:
        yield dialect, conn, admin  # type: ignore[misc]
    finally:
        conn.close()
        admin.close()


def test_transaction_open_across_the_snapshot_scn(live: Any) -> None:
    """A transaction that started before the snapshot SCN and commits after it is not in the
    AS OF SCN read and comes, whole, from the log; one committed before is only in the read."""
    dialect, conn, admin = live
    harness = OracleHarness(URL)
    table = harness.create_table("live_open", [("ID", "NUMBER(10)"), ("V", "VARCHAR2(20)")],
                                 ["ID"])
    cur = admin.cursor()
    cur.execute(f"INSERT INTO {harness.qualified('live_open')} VALUES (1, 'before')")
    admin.commit()
    cur.execute(f"INSERT INTO {harness.qualified('live_open')} VALUES (2, 'open')")
    schema = dialect.describe_table(conn, table)
    view = dialect.begin_snapshot(conn, None)
    rows = [r for batch in dialect.read_range(conn, schema, SnapshotSplit(table, 0, None, None),
                                              100) for r in batch]
    dialect.end_snapshot(conn)
    cur.execute(f"UPDATE {harness.qualified('live_open')} SET V = 'later' WHERE ID = 2")
    admin.commit()
    end = dialect.current_offset(conn)
    events = [e for e in dialect.stream_log(conn, [schema], view.offset, end)
              if isinstance(e, ChangeEvent)]
    assert rows == [(1, "before")]
    assert [(e.op, e.key, e.after) for e in events] == [("c", (2,), (2, "open")),
                                                        ("u", (2,), (2, "later"))]
    harness.drop_table("live_open")


def test_preflight_passes_for_the_capture_user(live: Any) -> None:
    dialect, conn, _ = live
    harness = OracleHarness(URL)
    table = harness.create_table("live_pre", [("ID", "NUMBER(10)")], ["ID"])
    missing = [str(r) for r in dialect.preflight(conn, [table]) if not r.ok and r.required]
    assert missing == []
    harness.drop_table("live_pre")
