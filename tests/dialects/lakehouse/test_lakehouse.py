"""Delta Lake (delta-rs) and Apache Iceberg (pyiceberg, SQL catalog on SQLite) as sync targets,
on local paths: a batch of changes lands as each key's last state, exactly once (a replay
writes nothing and adds no commit), a snapshot of keys the table lacks is appended, tables are
altered as the source's columns change, and the golden type tables of MariaDB and PostgreSQL
come back as the source gives them, except what each format cannot hold (said here)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any, cast

import pytest
from helpers.lakehouse import TABLE, commit_marks, commits

from sdk import (
    ChangeEvent,
    Column,
    ConfigurationError,
    ConnectionConfig,
    Dialect,
    LogicalType,
    Offset,
    SnapshotSplit,
    TableId,
    TableSchema,
    get_dialect,
)
from sdk.dialect.manager import default_manager

FORMATS = ["delta", "iceberg"]


@pytest.fixture(params=FORMATS)
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Dialect, Any, str]]:
    """(dialect, connection, URL) of a fresh lakehouse root of each format."""
    url = f"{request.param}://{tmp_path}/lake"
    dialect, config = default_manager().dialect_for_url(url)
    conn = dialect.connect(config)
    yield dialect, conn, url
    conn.close()


def row(i: int, v: str = "x") -> tuple[Any, ...]:
    return (i, f"{v}{i}", Decimal(i) / 4, dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
            + dt.timedelta(seconds=i), i % 300)


def event(op: str, after: tuple[Any, ...] | None, key: int, old: int | None = None
          ) -> ChangeEvent:
    return ChangeEvent(TABLE.table, op, (key,), after, Offset("t", n=key),
                       old_key=None if old is None else (old,))


def read(dialect: Dialect, conn: Any, table: TableSchema = TABLE,
         split: SnapshotSplit | None = None) -> dict[Any, tuple[Any, ...]]:
    whole = split or SnapshotSplit(table.table, 0, None, None)
    return {r[0]: r for b in dialect.read_range(conn, table, whole, 7) for r in b}


def test_changes_land_once_as_each_keys_last_state(lake: tuple[Dialect, Any, str]) -> None:
    dialect, conn, _ = lake
    dialect.create_table(conn, TABLE)
    dialect.create_table(conn, TABLE)  # again: nothing to do
    snapshot = [event("r", row(i), i) for i in range(1, 41)]
    assert dialect.apply_changes(conn, TABLE, snapshot[:20], "split/1")
    assert dialect.apply_changes(conn, TABLE, snapshot[20:], "split/2")
    assert not dialect.apply_changes(conn, TABLE, snapshot[:20], "split/1")  # a replay
    expected = {i: row(i) for i in range(1, 41)}
    assert read(dialect, conn) == expected
    log = [event("u", row(3, "u"), 3), event("c", row(50), 50), event("d", None, 4),
           event("u", row(60, "m"), 60, old=5),  # the key moved from 5 to 60
           event("u", row(50, "again"), 50), event("d", None, 60), event("c", row(4, "b"), 4),
           event("r", row(7, "re"), 7)]  # a row read again
    assert dialect.apply_changes(conn, TABLE, log, "log/1/0")
    assert not dialect.apply_changes(conn, TABLE, log, "log/1/0")
    expected.update({3: row(3, "u"), 50: row(50, "again"), 4: row(4, "b"), 7: row(7, "re")})
    del expected[5]
    assert read(dialect, conn) == expected
    assert commits(dialect, conn) == ["split/1", "split/2", "log/1/0"]  # none twice
    part = SnapshotSplit(TABLE.table, 1, (10,), (20,))
    assert read(dialect, conn, split=part) == {k: v for k, v in expected.items()
                                               if 10 <= k < 20}


def test_each_commit_records_where_in_the_source_it_reaches(
        lake: tuple[Dialect, Any, str]) -> None:
    """Neither format commits several tables at once: each table's commit records the log
    position of its last change and when its newest source transaction committed, so a
    reader can line tables up."""
    dialect, conn, _ = lake
    dialect.create_table(conn, TABLE)
    assert dialect.apply_changes(conn, TABLE, [event("r", row(i), i) for i in range(3)], "s")
    at = dt.datetime(2026, 12, 7, 12, 0, 0, 250000, tzinfo=dt.UTC)
    micros = int(at.timestamp() * 1e6)
    log = [replace(event("c", row(9), 9), commit_ts=micros - 5),
           replace(event("u", row(9, "u"), 9), commit_ts=micros)]
    assert dialect.apply_changes(conn, TABLE, log, "log/1")
    deletes = [replace(event("d", None, 1), commit_ts=micros + 1_000_000)]  # nothing written
    assert dialect.apply_changes(conn, TABLE, deletes, "log/2")
    marks = [{k: v for k, v in m.items() if k.startswith(("sdk.batch", "sdk.source"))}
             for m in commit_marks(dialect, conn)]
    assert marks[0] == {"sdk.batch": "s", "sdk.source_position": Offset("t", n=2).json_text()}
    assert marks[1] == {"sdk.batch": "log/1",
        "sdk.source_position": Offset("t", n=9).json_text(),
        "sdk.source_commit": "2026-12-07T12:00:00.250000+00:00"}
    assert marks[-1]["sdk.batch"] == "log/2" and \
        marks[-1]["sdk.source_commit"] == "2026-12-07T12:00:01.250000+00:00"


def test_a_snapshot_of_keys_the_table_holds_is_merged(lake: tuple[Dialect, Any, str]) -> None:
    """Rows read again (a snapshot on demand, or a table the target already has) replace
    the rows of their keys, never duplicate them."""
    dialect, conn, _ = lake
    dialect.create_table(conn, TABLE)
    assert dialect.apply_changes(conn, TABLE, [event("r", row(i), i) for i in range(10)], "a")
    assert dialect.apply_changes(conn, TABLE, [event("r", row(i, "y"), i)
                                               for i in range(5, 15)], "b")
    got = read(dialect, conn)
    assert len(got) == 15 and got[7] == row(7, "y") and got[2] == row(2)


def test_a_table_made_again_holds_no_batch_and_is_read_again(
        lake: tuple[Dialect, Any, str]) -> None:
    """``applied_tables``: a table with batches says so, one made again (dropped, created
    empty) says none, one missing is left out. A resumed sync reads the missing one again
    whole (:meth:`sdk.job.target.Target.lost`), and those without a row (made again, or all rows
    deleted) while the source has rows (:meth:`sdk.job.target.Target.empty`)."""
    from sdk.job.target import Target

    dialect, conn, url = lake
    other = TableSchema(TableId("shop", "lines"), TABLE.columns, TABLE.key)
    gone = TableSchema(TableId("shop", "gone"), TABLE.columns, TABLE.key)
    for table in (TABLE, other):
        dialect.create_table(conn, table)
        assert dialect.apply_changes(conn, table, [event("r", row(i), i) for i in range(3)],
                                     f"{table.table.name}/1")
    assert dialect.applied_tables(conn, [TABLE, other, gone]) == {
        TABLE.table: True, other.table: True}
    _drop(dialect, conn, other)
    dialect.create_table(conn, other)
    assert dialect.applied_tables(conn, [TABLE, other]) == {TABLE.table: True,
                                                            other.table: False}
    target = Target.of(url)
    lost = target.lost([TABLE, other, gone])
    assert list(lost) == [gone.table] and "missing from the target" in lost[gone.table]
    assert target.empty([TABLE, other]) == [other.table]
    assert dialect.apply_changes(conn, TABLE, [event("d", None, i) for i in range(3)], "d/1")
    assert target.empty([TABLE, other]) == [TABLE.table, other.table]


def _drop(dialect: Dialect, conn: Any, table: TableSchema) -> None:
    """Drop ``table`` as a user would: its Delta directory removed, its Iceberg table dropped
    from the catalog."""
    if dialect.name == "delta":
        import shutil

        shutil.rmtree(conn.table_uri(table))
    else:
        conn.catalog.drop_table(conn.identifier(table))


def test_a_table_with_other_columns_is_refused(lake: tuple[Dialect, Any, str]) -> None:
    dialect, conn, _ = lake
    dialect.create_table(conn, TABLE)
    other = TableSchema(TABLE.table, (TABLE.columns[0], TABLE.columns[1]), ("id",))
    with pytest.raises(ConfigurationError, match="exists with other columns"):
        dialect.create_table(conn, other)


def test_a_table_an_earlier_release_wrote_intervals_into_as_microseconds_is_refused(
        lake: tuple[Dialect, Any, str]) -> None:
    """Intervals were whole microseconds (a ``long``) before they kept their months and days:
    such a table is refused at once, naming the column, not at the first write of its text."""
    dialect, conn, _ = lake
    key = TABLE.columns[0]
    now = TableSchema(TableId(TABLE.table.schema, "spans"),
                      (key, Column("iv", LogicalType.INTERVAL, "interval")), ("id",))
    dialect.create_table(conn, TableSchema(now.table, (key, Column("iv", LogicalType.INT64,
                                                                   "bigint")), ("id",)))
    with pytest.raises(ConfigurationError, match=r"interval column\(s\) iv as whole microseconds"):
        dialect.create_table(conn, now)
    fresh = TableSchema(TableId(TABLE.table.schema, "spans_now"), now.columns, ("id",))
    dialect.create_table(conn, fresh)
    dialect.create_table(conn, fresh)  # this release's table: taken as it is


def test_columns_added_dropped_and_widened(lake: tuple[Dialect, Any, str]) -> None:
    dialect, conn, _ = lake
    dialect.create_table(conn, TABLE)
    assert dialect.apply_changes(conn, TABLE, [event("r", row(i), i) for i in range(5)], "a")
    wider = TableSchema(TABLE.table, (
        *TABLE.columns[:2],
        Column("amount", LogicalType.DECIMAL, "decimal(14,2)", precision=14, scale=2),
        Column("n", LogicalType.INT32, "int"), Column("extra", LogicalType.STRING, "text"),
    ), ("id",))  # "at" dropped, amount and n widened, extra added
    dialect.alter_table(conn, TABLE, wider)
    dialect.alter_table(conn, TABLE, wider)  # again (a replay): nothing changes
    assert read(dialect, conn, wider)[3] == (3, "x3", Decimal("0.75"), 3, None)
    dialect.create_table(conn, wider)  # the altered table is the wider one's
    assert dialect.apply_changes(conn, wider, [
        ChangeEvent(TABLE.table, "u", (3,), (3, "z", Decimal("123456789012.25"), 70000, "e"),
                    Offset("t", n=1))], "b")
    assert read(dialect, conn, wider)[3] == (3, "z", Decimal("123456789012.25"), 70000, "e")


def test_a_lakehouse_cannot_be_a_source(tmp_path: Path) -> None:
    from sdk.job.spec import resolve

    with pytest.raises(ConfigurationError, match="target only"):
        resolve({"url": f"delta://{tmp_path}/lake", "tables": "*"})


def test_the_url_names_an_absolute_path() -> None:
    for url in ("delta://relative/path", "iceberg://host/path"):
        dialect, config = default_manager().dialect_for_url(url)
        with pytest.raises(ConfigurationError, match="absolute path"):
            dialect.connect(config)


# --- the golden type tables -----------------------------------------------------------------

def _golden(harness_class: Any) -> list[Any]:
    return list(harness_class.golden_columns(cast(Any, None)))


def _round_trip(dialect_name: str, url: str, run: Any, qualified: str, table: TableId,
                golden: list[Any], lake_url: str) -> None:
    names = [f"c{i}" for i in range(len(golden))]
    columns = ", ".join(f"{n} {g.sql_type}" for n, g in zip(names, golden, strict=True))
    run(f"CREATE TABLE {qualified} (id int PRIMARY KEY, {columns})")
    depth = max(len(g.literals) for g in golden)
    for j in range(depth + 1):
        values = [g.literals[j] if j < len(g.literals) else "NULL" for g in golden]
        run(f"INSERT INTO {qualified} VALUES ({j}, {', '.join(values)})")
    source = get_dialect(dialect_name)
    conn = source.connect(ConnectionConfig.from_url(url))
    try:
        schema = source.describe_table(conn, table)
        rows = read(source, conn, schema)
    finally:
        conn.close()
    target, config = default_manager().dialect_for_url(lake_url)
    lake = target.connect(config)
    try:
        target.create_table(lake, schema)
        events = [ChangeEvent(table, "r", (k,), r, Offset("t", n=0)) for k, r in rows.items()]
        assert target.apply_changes(lake, schema, events, "golden")
        back = read(target, lake, schema)
    finally:
        lake.close()
    assert back.keys() == rows.keys()
    for key, expected in rows.items():
        for column, a, b in zip(schema.columns, expected, back[key], strict=True):
            same = a == b or (a != a and b != b)  # NaN equals NaN here
            assert same and type(a) is type(b), \
                f"{target.name} {column.source_type} ({column.type.value}): the source " \
                f"gives {a!r}, the table gives back {b!r}"


@pytest.mark.mysql
@pytest.mark.parametrize("fmt", FORMATS)
def test_mariadb_golden_types_round_trip(fmt: str, mysql_admin: Any, mysql_url: str,
                                         tmp_path: Path) -> None:
    from helpers.harnesses import MysqlHarness

    name = f"lk_{uuid.uuid4().hex[:10]}"

    def run(sql: str) -> None:
        with mysql_admin.cursor() as cur:
            cur.execute(sql)
    try:
        _round_trip("mysql", mysql_url, run, f"`{name}`", TableId("sdk_test", name),
                    _golden(MysqlHarness), f"{fmt}://{tmp_path}/lake")
    finally:
        run(f"DROP TABLE IF EXISTS `{name}`")


@pytest.mark.postgres
@pytest.mark.parametrize("fmt", FORMATS)
def test_postgres_golden_types_round_trip(fmt: str, postgres_admin: Any, postgres_url: str,
                                          tmp_path: Path) -> None:
    from helpers.harnesses import PostgresHarness

    name = f"lk_{uuid.uuid4().hex[:10]}"
    try:
        _round_trip("postgres", postgres_url, postgres_admin.execute, f'"{name}"',
                    TableId("public", name), _golden(PostgresHarness),
                    f"{fmt}://{tmp_path}/lake")
    finally:
        postgres_admin.execute(f'DROP TABLE IF EXISTS "{name}"')


def test_a_batch_with_no_changes_is_recorded_and_changes_nothing(
        lake: tuple[Dialect, Any, str]) -> None:
    """A split read again that found no rows, in a key range the table has none of either,
    gives the target an empty batch: it writes no row and is not applied twice."""
    dialect, conn, _ = lake
    dialect.create_table(conn, TABLE)
    assert dialect.apply_changes(conn, TABLE, [event("r", row(1), 1)], "a")
    dialect.apply_changes(conn, TABLE, [], "empty")
    dialect.apply_changes(conn, TABLE, [], "empty")  # a replay
    assert read(dialect, conn) == {1: row(1)}
    applied = commits(dialect, conn)
    assert len(applied) == len(set(applied))
