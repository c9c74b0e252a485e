"""Schema changes: which ones a sync can follow (``sdk.algorithm.schema``), and the targets' tables
altered in place (``alter_table``), idempotently, keeping their rows."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from sdk import ChangeEvent, Column, ConnectionConfig, LogicalType, Offset, TableId, TableSchema
from sdk import get_dialect as dialect_named
from sdk.algorithm.schema import diff, projector, widens

L = LogicalType


def col(name: str, kind: LogicalType, source: str, precision: int | None = None,
        scale: int | None = None) -> Column:
    return Column(name, kind, source, True, precision, scale)


@pytest.mark.parametrize(("old", "new", "ok"), [
    (col("n", L.INT32, "int"), col("n", L.INT64, "bigint"), True),
    (col("n", L.INT64, "bigint"), col("n", L.INT32, "int"), False),
    (col("n", L.INT32, "int"), col("n", L.DECIMAL, "numeric(12,0)", 12, 0), True),
    (col("n", L.INT64, "bigint"), col("n", L.DECIMAL, "numeric(12,0)", 12, 0), False),
    (col("d", L.DECIMAL, "decimal(10,2)", 10, 2), col("d", L.DECIMAL, "decimal(14,2)", 14, 2),
     True),
    (col("d", L.DECIMAL, "decimal(10,2)", 10, 2), col("d", L.DECIMAL, "decimal(10,3)", 10, 3),
     False),
    (col("d", L.DECIMAL, "decimal(10,2)", 10, 2), col("d", L.DECIMAL, "numeric", None, None),
     True),
    (col("v", L.STRING, "varchar(10)"), col("v", L.STRING, "varchar(300)"), True),
    (col("v", L.STRING, "varchar(300)"), col("v", L.STRING, "varchar(10)"), False),
    (col("v", L.STRING, "varchar(10)"), col("v", L.STRING, "text"), True),
    (col("v", L.STRING, "text"), col("v", L.STRING, "varchar(10)"), False),
    (col("f", L.FLOAT32, "real"), col("f", L.FLOAT64, "double precision"), True),
    (col("t", L.TIMESTAMP, "datetime(3)"), col("t", L.TIMESTAMP, "datetime(6)"), True),
    (col("t", L.TIMESTAMP, "datetime(6)"), col("t", L.TIMESTAMP, "datetime(0)"), False),
    (col("v", L.STRING, "varchar(10)"), col("v", L.INT32, "int"), False),
])
def test_which_type_changes_keep_every_value(old: Column, new: Column, ok: bool) -> None:
    assert widens(old, new) is ok


T = TableId("s", "t")
OLD = TableSchema(T, (col("id", L.INT32, "int"), col("v", L.STRING, "varchar(10)"),
                      col("gone", L.INT32, "int")), ("id",))


def test_a_diff_names_what_changed_and_what_it_refuses() -> None:
    new = TableSchema(T, (col("id", L.INT32, "int"), col("extra", L.INT32, "int"),
                          col("v", L.STRING, "varchar(99)")), ("id",))
    found = diff(OLD, new)
    assert (found.added, found.dropped) == (("extra",), ("gone",))
    assert found.refusal() is None and found.needs_reread
    assert found.describe() == "added extra; dropped gone; v varchar(10) -> varchar(99)"
    narrowed = TableSchema(T, (col("id", L.INT32, "int"), col("v", L.STRING, "varchar(5)")),
                           ("id",))
    assert "can lose values (v varchar(10) -> varchar(5))" in (diff(OLD, narrowed).refusal()
                                                             or "")
    rekeyed = TableSchema(T, (col("id", L.INT32, "int"), col("v", L.STRING, "varchar(10)")),
                          ("v",))
    assert "key changed" in (diff(OLD, rekeyed).refusal() or "")
    widened_key = TableSchema(T, (col("id", L.INT64, "bigint"),), ("id",))
    assert "key changed" in (diff(OLD, widened_key).refusal() or "")
    assert not diff(OLD, widened_key).needs_reread


def test_rows_of_a_new_shape_read_as_the_old_one() -> None:
    new = TableSchema(T, (col("v", L.STRING, "text"), col("id", L.INT32, "int"),
                          col("extra", L.INT32, "int")), ("id",))
    project = projector(new, OLD)
    assert project(("x", 1, 5)) == (1, "x", None)
    assert project(None) is None


# --- the targets' alter_table, on real servers ----------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres),
                        pytest.param("mysql", marks=pytest.mark.mysql)])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Any, str]]:
    """A target dialect's name, a connection to it, and a schema to make tables in."""
    name = request.param
    schema = f"alter_{uuid.uuid4().hex[:8]}"
    if name == "sqlite":
        url, drop = f"sqlite:///{tmp_path}/t.db", None
        schema = "main"
    elif name == "postgres":
        admin = request.getfixturevalue("postgres_admin")
        admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION sdk_cdc")
        url = request.getfixturevalue("postgres_url")
        drop: Callable[[], None] | None = lambda: admin.execute(  # noqa: E731
            f"DROP SCHEMA {schema} CASCADE")
    else:
        admin = request.getfixturevalue("mysql_admin")
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE {schema}")
            cur.execute(f"GRANT ALL ON {schema}.* TO 'sdk_cdc'@'%'")
        url = request.getfixturevalue("mysql_url")

        def drop_mysql() -> None:
            with admin.cursor() as cur:
                cur.execute(f"DROP DATABASE {schema}")
        drop = drop_mysql
    dialect = dialect_named(name)
    conn = dialect.connect(ConnectionConfig.from_url(url))
    try:
        yield name, conn, schema
    finally:
        conn.close()
        if drop is not None:
            drop()


def test_a_target_table_altered_in_place_keeps_its_rows(target: tuple[str, Any, str]) -> None:
    name, conn, schema = target
    dialect = dialect_named(name)
    table = TableId(schema, "t")
    old = TableSchema(table, (col("id", L.INT32, "int"), col("n", L.INT32, "int"),
                              col("v", L.STRING, "varchar(10)"),
                              col("gone", L.STRING, "text")), ("id",))
    new = TableSchema(table, (col("id", L.INT32, "int"),
                              col("amount", L.DECIMAL, "decimal(14,2)", 14, 2),
                              col("n", L.INT64, "bigint"), col("v", L.STRING, "varchar(300)")),
                      ("id",))
    dialect.create_table(conn, old)
    assert dialect.apply_changes(conn, old, [ChangeEvent(table, "r", (i,), (i, i, f"v{i}", "x"),
                                                         Offset("t")) for i in range(3)], "b1")
    for _ in range(2):  # the second is a replayed batch's: nothing changes
        dialect.alter_table(conn, old, new)
    big = (5, Decimal("123456789012.25"), 2**40, "w" * 300)
    assert dialect.apply_changes(conn, new, [ChangeEvent(table, "c", (5,), big, Offset("t")),
                                             ChangeEvent(table, "u", (1,), (1, Decimal("1.50"),
                                                                            7, "u"),
                                                         Offset("t"))], "b2")
    dialect.create_table(conn, new)  # the altered table is the new schema's (a restart)
    rows = {r[0]: r for b in dialect.read_range(conn, new, _whole(table), 100) for r in b}
    expected = {0: (0, None, 0, "v0"), 1: (1, Decimal("1.50"), 7, "u"),
                2: (2, None, 2, "v2"), 5: big}
    if name == "sqlite":  # a decimal is kept as its text
        rows = {k: tuple(Decimal(v) if isinstance(v, str) and v[0].isdigit() else v
                         for v in r) for k, r in rows.items()}
    assert rows == expected


def _whole(table: TableId) -> Any:
    from sdk import SnapshotSplit

    return SnapshotSplit(table, 0, None, None)
