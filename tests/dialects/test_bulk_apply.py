"""Set-based apply (#18): a batch's net changes (``sdk.dialect.apply.net_changes``) end as the
changes applied one by one, and the PostgreSQL (staging tables, ``COPY``) and MySQL (multi-row
statements) targets write batches past their thresholds exactly, with key moves, deletes, awkward
names and edge values, and a replay changes nothing."""

from __future__ import annotations

import datetime as dt
import math
import random
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from helpers.servers import MYSQL_ADMIN_URL, with_query

from sdk import (
    ChangeEvent,
    Column,
    ConnectionConfig,
    DataError,
    LogicalType,
    Offset,
    TableId,
    TableSchema,
    get_dialect,
)
from sdk.dialect.apply import net_changes
from sdk.dialect.tableformat import arrow_rows
from sdk.dialect.temporal import WideTemporal
from sdk_mysql import _target as mysql_target
from sdk_postgres import _target as pg_apply

L = LogicalType
OFFSET = Offset("test")
Model = dict[tuple[Any, ...], tuple[Any, ...]]


def upsert(table: TableSchema, row: tuple[Any, ...], old_key: tuple[Any, ...] | None = None
           ) -> ChangeEvent:
    return ChangeEvent(table.table, "u" if old_key else "c", table.key_of(row), row, OFFSET,
                       old_key=old_key)


def delete(table: TableSchema, key: tuple[Any, ...]) -> ChangeEvent:
    return ChangeEvent(table.table, "d", key, None, OFFSET)


def one_by_one(state: Model, events: list[ChangeEvent]) -> Model:
    """``state`` after ``events`` applied in order, as the contract defines them."""
    out = dict(state)
    for event in events:
        if event.op == "d":
            out.pop(event.key, None)
            continue
        if event.old_key is not None:
            out.pop(event.old_key, None)
        assert event.after is not None
        out[event.key] = event.after
    return out


def applied_as_events(dialect: Any, conn: Any, table: TableSchema, data: Any) -> bool:
    """A split's Arrow rows given to ``apply_changes`` as ``r`` events of the values
    ``python_values`` makes of them (what ``load_snapshot`` must store alike), as batch s/0."""
    from sdk.dialect.arrow import python_values

    values = zip(*[python_values(data.column(i), c.type) for i, c in enumerate(table.columns)],
                 strict=True)
    return bool(dialect.apply_changes(conn, table, [
        ChangeEvent(table.table, "r", (row[0],), row, OFFSET) for row in values], "s/0"))


# --- net changes, without a database ------------------------------------------------------------

NUMS = TableSchema(TableId("main", "t"), (Column("id", L.INT64, "bigint"),
                                          Column("v", L.STRING, "text")), ("id",))


def test_net_changes_keep_the_last_change_of_each_key() -> None:
    t = NUMS
    events = [upsert(t, (1, "a")), upsert(t, (2, "b"), old_key=(1,)),  # 1 inserted, moved away
              delete(t, (3,)), upsert(t, (3, "c")),  # deleted, then inserted again
              upsert(t, (4, "d")), delete(t, (4,)),  # inserted, then deleted
              upsert(t, (5, "e"), old_key=(6,)), upsert(t, (6, "f"))]  # moved, old key reused
    net = net_changes(events, str)
    assert sorted(net.deletes) == [("1",), ("4",)]
    assert sorted(net.upserts) == [("2", "b"), ("3", "c"), ("5", "e"), ("6", "f")]
    assert len(net) == 6


def test_net_changes_applied_as_two_sets_equal_the_changes_one_by_one() -> None:
    rng = random.Random(18)
    for _ in range(300):
        state: Model = {(k,): (k, "old") for k in rng.sample(range(12), 6)}
        events = []
        for n in range(rng.randrange(1, 25)):
            key, kind = rng.randrange(12), rng.randrange(3)
            if kind == 0:
                events.append(delete(NUMS, (key,)))
            elif kind == 1:
                events.append(upsert(NUMS, (key, f"v{n}")))
            else:
                events.append(upsert(NUMS, (key, f"m{n}"), old_key=(rng.randrange(12),)))
        net = net_changes(events)
        assert not {k for k in net.deletes} & {NUMS.key_of(r) for r in net.upserts}
        got = {k: v for k, v in state.items() if k not in set(net.deletes)}
        got.update({NUMS.key_of(r): r for r in net.upserts})
        assert got == one_by_one(state, events), events


# --- large batches with moves, deletes and replays ----------------------------------------------

def awkward_table(schema: str, name: str) -> TableSchema:
    """A composite key and names with a percent sign, quotes and a backquote."""
    return TableSchema(TableId(schema, name), (
        Column('k"%s', L.STRING, "text"), Column("n`o", L.INT64, "bigint"),
        Column("v%", L.STRING, "text"), Column("amount", L.DECIMAL, "numeric(12,2)",
                                                precision=12, scale=2),
        Column("at", L.TIMESTAMP, "timestamp")), ('k"%s', "n`o"))


def make_row(i: int, version: int) -> tuple[Any, ...]:
    return (f"k{i % 7}%'\\", i, f"v{version} \t\n\\N {i}" if i % 5 else None,
            Decimal(i * 3 + version) / 4 if i % 11 else None,
            dt.datetime(2024, 1, 1) + dt.timedelta(seconds=i, microseconds=version))


def batches(table: TableSchema, size: int) -> list[list[ChangeEvent]]:
    """An initial load of ``size`` rows, then a batch of updates, deletes, key moves (to new
    keys and onto keys deleted in the same batch) and rows inserted again."""
    load = [upsert(table, make_row(i, 0)) for i in range(size)]
    changes: list[ChangeEvent] = []
    for i in range(size):
        kind = i % 6
        if kind == 0:
            changes.append(delete(table, table.key_of(make_row(i, 0))))
        elif kind == 1:  # move to a new key
            changes.append(upsert(table, make_row(size + i, 1),
                                  old_key=table.key_of(make_row(i, 0))))
        elif kind == 2:  # move onto the key deleted just before (kind 0, i - 2)
            changes.append(upsert(table, make_row(i - 2, 2), old_key=table.key_of(make_row(i, 0))))
        elif kind == 3:
            changes.append(upsert(table, make_row(i, 1)))
    changes += [upsert(table, make_row(i, 3)) for i in range(0, size, 12)]  # after the delete
    changes += [delete(table, table.key_of(make_row(size + i, 1)))  # after the move
                for i in range(1, size, 24)]
    return [load, changes]


def check_batches(dialect: Any, conn: Any, table: TableSchema, read: Any, size: int) -> None:
    """Apply :func:`batches`, each twice (the replay changes nothing), checking the rows."""
    state: Model = {}
    for n, events in enumerate(batches(table, size)):
        state = one_by_one(state, events)
        assert dialect.apply_changes(conn, table, events, f"{n}-0")
        assert read() == state
        assert not dialect.apply_changes(conn, table, events[:1], f"{n}-0")  # a replay
        assert read() == state
    assert dialect.apply_changes(conn, table, [], "empty-0")


def pg_rows(conn: Any, table: TableSchema) -> Model:
    from sdk_postgres import qualified

    rows = conn.query(f"SELECT * FROM {qualified(table.table)}")
    return {table.key_of(tuple(r)): tuple(r) for r in rows}


@pytest.mark.postgres
@pytest.mark.parametrize("bulk_rows", [0, 10**9], ids=["staged", "executemany"])
def test_postgres_large_batches(pg_target: Any, monkeypatch: pytest.MonkeyPatch,
                                bulk_rows: int) -> None:
    conn, schema = pg_target
    monkeypatch.setattr(pg_apply, "BULK_ROWS", bulk_rows)
    pg = get_dialect("postgres")
    table = awkward_table(schema, 'mirror "%s" `x`')
    pg.create_table(conn, table)
    check_batches(pg, conn, table, lambda: pg_rows(conn, table), 1200)


PG_EDGE_COLUMNS = (
    Column("id", L.INT64, "bigint"), Column("d", L.DATE, "date"),
    Column("ts", L.TIMESTAMP, "timestamp"), Column("tz", L.TIMESTAMP_TZ, "timestamptz"),
    Column("t", L.TIME, "time"), Column("n", L.DECIMAL, "numeric"),
    Column("n2", L.DECIMAL, "numeric(10,2)", precision=10, scale=2),
    Column("f8", L.FLOAT64, "float8"), Column("f4", L.FLOAT32, "float4"),
    Column("b", L.BINARY, "bytea"), Column("i", L.INTERVAL, "interval"),
    Column("j", L.JSON, "json"), Column("s", L.STRING, "text"), Column("ok", L.BOOLEAN, "bool"))
W = WideTemporal
EAST = dt.timezone(dt.timedelta(hours=5, minutes=30))
PG_EDGE_ROWS: list[tuple[Any, ...]] = [
    (W.infinity("date"), W.infinity("timestamp"), W.infinity("timestamp_tz"),
     W.of("time", 0, 0, 0, 24), Decimal("Infinity"), Decimal("1.5"), math.inf, math.inf,
     b"\x00\\x\n", dt.timedelta(days=-3, microseconds=1), '{"a": [1, "\\\\"]}', "\\N", True),
    (W.infinity("date", -1), W.infinity("timestamp", -1), W.infinity("timestamp_tz", -1),
     dt.time(0), Decimal("-Infinity"), None, -math.inf, -math.inf, b"", dt.timedelta(0),
     "null", "", False),
    (W.of("date", -43, 3, 15), W.of("timestamp", -43, 3, 15, 12, 0, 1, 500000),
     W.of("timestamp_tz", -4712, 1, 1), dt.time(23, 59, 59, 999999), Decimal("NaN"), None,
     math.nan, math.nan, None, None, None, "tab\there\nnewline\r", None),
    (W.of("date", 10000, 1, 1), dt.datetime(2024, 5, 6, 7, 8, 9, 10, tzinfo=EAST),
     dt.datetime(2024, 5, 6, 7, 8, 9, 10, tzinfo=EAST), dt.time(12, tzinfo=EAST),
     Decimal("1e-30"), Decimal("0.01"), 1.7976931348623157e308, 3.4028234663852886e38,
     bytes(range(256)), dt.timedelta(days=40000), "[]", "ünïcødé '\"", None),
    (dt.date(1, 1, 1), dt.datetime(1, 1, 1), dt.datetime(1, 1, 1, tzinfo=dt.UTC),
     dt.time(0, 0, 0, 1), Decimal(-10) ** 100, Decimal("-99999999.99"), 5e-324, -0.0, b"x",
     dt.timedelta(hours=-1), "1", "x" * 10000, True),
    (None,) * 13,
]


@pytest.mark.postgres
def test_postgres_staged_values_equal_row_by_row_values(pg_target: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Edge values (infinities, BC and far dates, 24:00, NaN, instants with an offset into a
    ``timestamp`` column, bytes, backslashes, tabs) land the same through the staging table as
    through the row-by-row statements."""
    conn, schema = pg_target
    pg = get_dialect("postgres")
    texts = []
    for name, bulk_rows, op in (("staged", 0, "c"), ("rows", 10**9, "c"), ("loaded", 0, "r")):
        monkeypatch.setattr(pg_apply, "BULK_ROWS", bulk_rows)
        table = TableSchema(TableId(schema, name), PG_EDGE_COLUMNS, ("id",))
        pg.create_table(conn, table)
        events = [ChangeEvent(table.table, op, (i,), (i, *row), OFFSET)
                  for i, row in enumerate(PG_EDGE_ROWS)]
        assert pg.apply_changes(conn, table, events, "1-0")
        columns = ", ".join(f'"{c.name}"::text' for c in PG_EDGE_COLUMNS)
        texts.append(conn.query(f'SELECT {columns} FROM {schema}."{name}" ORDER BY id'))
    assert texts[0] == texts[1] == texts[2]
    assert texts[0][3][2] == "2024-05-06 01:38:09.00001"  # the instant's UTC wall time
    assert len(texts[0]) == len(PG_EDGE_ROWS)


ARROW_COPY_COLUMNS = (
    Column("id", L.INT64, "bigint"), Column("d", L.DATE, "date"),
    Column("ts", L.TIMESTAMP, "timestamp"), Column("tz", L.TIMESTAMP_TZ, "timestamptz"),
    Column("n2", L.DECIMAL, "numeric(10,2)", precision=10, scale=2),
    Column("f8", L.FLOAT64, "float8"), Column("f4", L.FLOAT32, "float4"),
    Column("s", L.STRING, "text"), Column("ok", L.BOOLEAN, "bool"), Column("i4", L.INT32, "int"))
ARROW_COPY_ROWS: list[tuple[Any, ...]] = [  # values the staged COPY writes through Arrow
    (dt.date(2024, 5, 6), dt.datetime(2024, 5, 6, 7, 8, 9, 10),
     dt.datetime(2024, 5, 6, 7, 8, 9, 10, tzinfo=EAST), Decimal("0.01"),
     1.7976931348623157e308, 3.4028234663852886e38, "ünïcødé '\"", None, -2**31),
    (dt.date(1, 1, 1), dt.datetime(1, 1, 1), dt.datetime(1, 1, 1, tzinfo=dt.UTC),
     Decimal("-99999999.99"), 5e-324, -0.0, "x" * 10000, True, 2**31 - 1),
    (dt.date(9999, 12, 31), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
     dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC), Decimal("-0.5"), math.nan,
     math.inf, "back\\slash\\N \\. tab\tcr\rlf\n", False, 0),
    (None,) * 9,
]


@pytest.mark.postgres
def test_postgres_staged_copy_through_arrow_equals_row_by_row(
        pg_target: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A staged batch is copied as the text Arrow's kernels make when every column and value
    allows, and lands as the row-by-row statements write it; a value Arrow would not take as
    it is (a decimal past its scale, a year outside 1-9999, an instant with an offset in a
    ``timestamp``) sends the batch through psycopg's rows, with the same result."""
    conn, schema = pg_target
    pg = get_dialect("postgres")
    made: list[bool] = []
    copy_text = pg_apply.copy_text
    monkeypatch.setattr(pg_apply, "copy_text",
                        lambda rows: made.append(True) or copy_text(rows))
    rounded = (*ARROW_COPY_ROWS[0][:3], Decimal("1.005"), *ARROW_COPY_ROWS[0][4:])
    far = (W.infinity("date"), *ARROW_COPY_ROWS[0][1:])
    aware = (ARROW_COPY_ROWS[0][0], ARROW_COPY_ROWS[0][2], *ARROW_COPY_ROWS[0][2:])
    cases = (("arrow", ARROW_COPY_ROWS, True), ("rounded", [rounded], False),
             ("far", [far], False), ("aware", [aware], False))
    for name, rows, by_arrow in cases:
        texts = []
        for how, bulk_rows in (("staged", 0), ("rows", 10**9)):
            monkeypatch.setattr(pg_apply, "BULK_ROWS", bulk_rows)
            made.clear()
            table = TableSchema(TableId(schema, f"{name}_{how}"), ARROW_COPY_COLUMNS, ("id",))
            pg.create_table(conn, table)
            events = [ChangeEvent(table.table, "u", (i,), (i, *row), OFFSET)
                      for i, row in enumerate(rows)]
            assert pg.apply_changes(conn, table, events, "1-0")
            assert bool(made) is (by_arrow and how == "staged")
            columns = ", ".join(f'"{c.name}"::text' for c in ARROW_COPY_COLUMNS)
            texts.append(conn.query(f'SELECT {columns} FROM {schema}."{table.table.name}" '
                                    "ORDER BY id"))
        assert texts[0] == texts[1], name
        assert len(texts[0]) == len(rows)


@pytest.mark.postgres
def test_postgres_snapshot_rows_are_copied_straight_in_or_merged_over_rows_there(
        pg_target: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A split's rows (op ``r``) go into the table with one ``COPY``, no staging and merge; into
    a table that already holds some of their keys (a table snapshotted again) the ``COPY`` is
    rolled back and they are merged as upserts: the same rows either way, and a replay is still
    a no-op."""
    conn, schema = pg_target
    pg = get_dialect("postgres")
    table = awkward_table(schema, "loaded")
    pg.create_table(conn, table)
    merges: list[int] = []
    real_write = pg_apply.write

    def counted(*args: Any) -> None:
        merges.append(len(args[4]))
        real_write(*args)

    monkeypatch.setattr(pg_apply, "write", counted)

    def split(first: int, last: int, version: int) -> list[ChangeEvent]:
        rows = [make_row(i, version) for i in range(first, last)]
        return [ChangeEvent(table.table, "r", table.key_of(r), r, OFFSET) for r in rows]

    state: Model = {}
    for n, (events, merged) in enumerate([(split(0, 700, 0), False),  # an empty table
                                          (split(700, 1400, 0), False),  # keys not there
                                          (split(350, 1050, 1), True)]):  # half there
        state.update({e.key: e.after for e in events if e.after is not None})
        assert pg.apply_changes(conn, table, events, f"snap/{n}")
        assert bool(merges) is merged
        assert pg_rows(conn, table) == state
        assert not pg.apply_changes(conn, table, events, f"snap/{n}")  # a replay
        assert pg_rows(conn, table) == state
    assert merges == [700]


ARROW_TEXT_ROWS: list[tuple[Any, ...]] = [  # every value one Arrow writes as COPY text
    (dt.date(2024, 5, 6), *PG_EDGE_ROWS[3][1:8], *PG_EDGE_ROWS[3][10:]),
    PG_EDGE_ROWS[4][:8] + PG_EDGE_ROWS[4][10:],
    (dt.date(9999, 12, 31), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
     dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC), dt.time(0),
     Decimal("-1e-30"), Decimal("-0.50"), math.nan, math.inf, '{"k": "a\\tb"}',
     "back\\slash\\N \\. tab\tcr\rlf\n", False),
    (None,) * 11,
]


@pytest.mark.postgres
def test_postgres_loads_arrow_splits_as_apply_changes_does(pg_target: Any) -> None:
    """A split loaded from Arrow (``load_snapshot``) lands as the same rows given to
    ``apply_changes`` do: written by Arrow's kernels when every column and value allows (escapes,
    NULLs, NaN, decimals, years 1 and 9999, an instant with an offset in a ``timestamp``),
    by the row path when one does not (bytes, intervals, infinities, BC and far dates); a
    replay changes nothing."""
    conn, schema = pg_target
    pg = get_dialect("postgres")
    no_bytes = tuple(c for c in PG_EDGE_COLUMNS if c.name not in ("b", "i"))
    far = [row[:8] + row[10:] for row in PG_EDGE_ROWS]
    for name, columns, rows, by_arrow in (("text", no_bytes, ARROW_TEXT_ROWS, True),
                                          ("far", no_bytes, far, False),
                                          ("bc", no_bytes, [(*far[2][:2], None, *far[2][3:])],
                                           False),
                                          ("rows", PG_EDGE_COLUMNS, PG_EDGE_ROWS, False)):
        texts = []
        for how in ("apply", "load"):
            table = TableSchema(TableId(schema, f"{name}_{how}"), columns, ("id",))
            pg.create_table(conn, table)
            values = [(i, *row) for i, row in enumerate(rows)]
            if how == "apply":
                assert pg.apply_changes(conn, table, [
                    ChangeEvent(table.table, "c", (r[0],), r, OFFSET) for r in values], "s/0")
            else:
                data = arrow_rows(table, values)
                assert (pg_apply.copy_text(data) is not None) is by_arrow
                assert pg.load_snapshot(conn, table, data, "s/0")
                assert not pg.load_snapshot(conn, table, data, "s/0")  # a replay
            names = ", ".join(f'"{c.name}"::text' for c in columns)
            texts.append(conn.query(f'SELECT {names} FROM {schema}."{table.table.name}" '
                                    "ORDER BY id"))
        assert texts[0] == texts[1]
        assert len(texts[0]) == len(rows)


@pytest.mark.postgres
def test_postgres_arrow_split_over_rows_there_is_merged(pg_target: Any) -> None:
    """Into a table already holding some of a split's keys (a table snapshotted again), the
    Arrow ``COPY`` is rolled back and the rows are merged as upserts."""
    conn, schema = pg_target
    pg = get_dialect("postgres")
    table = awkward_table(schema, "merged")
    pg.create_table(conn, table)
    state: Model = {}
    for n, (first, last, version) in enumerate([(0, 700, 0), (350, 1050, 1)]):
        rows = [make_row(i, version) for i in range(first, last)]
        assert pg.load_snapshot(conn, table, arrow_rows(table, rows), f"snap/{n}")
        state.update({table.key_of(r): r for r in rows})
        assert pg_rows(conn, table) == state


# --- MySQL --------------------------------------------------------------------------------------

@pytest.fixture
def my_target(mysql_admin: Any) -> Iterator[tuple[Any, str]]:
    name = f"bulk_{uuid.uuid4().hex[:8]}"
    conn = get_dialect("mysql").connect(ConnectionConfig.from_url(MYSQL_ADMIN_URL))
    try:
        yield conn, name
    finally:
        conn.close()
        with mysql_admin.cursor() as cur:
            for suffix in ("", "_one", "_nan", "_apply", "_load", "_one_apply", "_one_load",
                           "_plain"):
                cur.execute(f"DROP TABLE IF EXISTS `{name}{suffix}`")


def my_rows(conn: Any, table: TableSchema) -> Model:
    from sdk_mysql import q

    rows = conn.query(f"SELECT * FROM {q(table.table.schema)}.{q(table.table.name)}")
    return {table.key_of(tuple(r)): tuple(r) for r in rows}


@pytest.mark.mysql
def test_mysql_large_batches(my_target: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    conn, name = my_target
    monkeypatch.setattr(mysql_target, "DELETE_CHUNK", 97)  # many chunks, the last one short
    my = get_dialect("mysql")
    table = awkward_table("sdk_test", name)
    my.create_table(conn, table)
    check_batches(my, conn, table, lambda: my_rows(conn, table), 1500)
    single = TableSchema(TableId("sdk_test", f"{name}_one"), NUMS.columns, NUMS.key)
    my.create_table(conn, single)
    events = [upsert(single, (i, f"v{i}")) for i in range(3000)]
    events += [delete(single, (i,)) for i in range(0, 3000, 2)]
    events += [upsert(single, (i + 5000, "moved"), old_key=(i,)) for i in range(1, 3000, 4)]
    assert my.apply_changes(conn, single, events, "x-0")
    assert my_rows(conn, single) == one_by_one({}, events)


@pytest.mark.mysql
def test_mysql_out_of_range_in_a_large_batch(my_target: Any) -> None:
    """A NaN in a large batch stops it before anything is written (and leaves no ledger row,
    so a retry applies); with ``out_of_range=null`` the batch lands with NULL there."""
    conn, name = my_target
    my = get_dialect("mysql")
    table = TableSchema(TableId("sdk_test", f"{name}_nan"), (
        Column("id", L.INT64, "bigint"), Column("f", L.FLOAT64, "double"),
        Column("at", L.TIMESTAMP_TZ, "timestamptz")), ("id",))
    my.create_table(conn, table)
    instant = dt.datetime(2024, 1, 1, 12, tzinfo=EAST)
    events = [upsert(table, (i, math.nan if i == 1500 else i / 2, instant))
              for i in range(3000)]
    with pytest.raises(DataError, match="cannot hold nan"):
        my.apply_changes(conn, table, events, "1-0")
    assert my_rows(conn, table) == {}
    lenient = my.connect(ConnectionConfig.from_url(with_query(MYSQL_ADMIN_URL,
                                                              out_of_range="null")))
    try:
        assert my.apply_changes(lenient, table, events, "1-0")
        assert not my.apply_changes(lenient, table, events, "1-0")
    finally:
        lenient.close()
    rows = my_rows(conn, table)
    assert len(rows) == 3000 and rows[(1500,)][1] is None and rows[(7,)][1] == 3.5
    assert rows[(7,)][2] == dt.datetime(2024, 1, 1, 6, 30)  # instants as UTC


MY_ARROW_COLUMNS = (
    Column("id", L.INT64, "bigint"), Column("d", L.DATE, "date"),
    Column("ts", L.TIMESTAMP, "timestamp"), Column("tz", L.TIMESTAMP_TZ, "timestamptz"),
    Column("n", L.DECIMAL, "numeric"),  # unbounded: carried as text, stored as LONGTEXT
    Column("n2", L.DECIMAL, "numeric(10,2)", precision=10, scale=2),
    Column("n10", L.DECIMAL, "numeric(38,10)", precision=38, scale=10),  # Arrow: 1.000E-7
    Column("f8", L.FLOAT64, "float8"), Column("f4", L.FLOAT32, "float4"),
    Column("j", L.JSON, "json"), Column("s", L.STRING, "text"), Column("ok", L.BOOLEAN, "bool"),
    Column("i8", L.INT8, "tinyint"))
MY_ARROW_ROWS: list[tuple[Any, ...]] = [  # every value one Arrow writes as a MySQL literal
    (dt.date(1, 1, 1), dt.datetime(1, 1, 1), dt.datetime(1, 1, 1, tzinfo=dt.UTC),
     Decimal("1E+5"), Decimal("-0.50"), Decimal("1E-7"), 0.1, 3.4028234663852886e38,
     '{"k": 1}', "ünïcødé '\"", True, -128),
    (dt.date(9999, 12, 31), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
     dt.datetime(2024, 5, 6, 7, 8, 9, 10, tzinfo=EAST), Decimal("-1e-30"), Decimal("0.00"),
     Decimal("0"), 1.7976931348623157e308, -0.0, "[]",
     "back\\slash \\' 'q' nul\0 sub\x1a lf\n cr\r tab\t %s", False, 127),
    (dt.date(1969, 12, 31), dt.datetime(1970, 1, 1), dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
     None, Decimal("-99999999.99"), Decimal("-12345.6789012345"), 5e-324, 1 / 3, None, "",
     None, 0),
    (None,) * 12,
]


@pytest.mark.mysql
def test_mysql_loads_arrow_splits_as_apply_changes_does(my_target: Any,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A split loaded from Arrow (``load_snapshot``) stores what ``apply_changes`` stores for
    the same values as ``r`` events: by literals Arrow's kernels wrote (escapes, years 1 and
    9999, an instant at another offset, decimals with an exponent, the largest FLOAT) in
    statements cut at ``STATEMENT_BYTES`` (a row longer than that goes alone), or value by value
    when a column needs it (bytes); a replay changes nothing, a split read again replaces the
    rows it holds, and a NaN stops the split before anything is written."""
    conn, name = my_target
    my = get_dialect("mysql")
    monkeypatch.setattr(mysql_target, "STATEMENT_BYTES", 700)
    rows = [(*MY_ARROW_ROWS[i % 4][:-1], (i % 4) or None if i % 7 else i % 100)
            for i in range(300)]
    rows[5] = (*rows[5][:9], "x" * 5000, *rows[5][10:])  # longer than a statement
    binary = (*MY_ARROW_COLUMNS, Column("b", L.BINARY, "bytea"))
    by_suffix = {}
    for suffix, columns, by_arrow in (("", MY_ARROW_COLUMNS, True), ("_one", binary, False)):
        stored = []
        for how in ("apply", "load"):
            table = TableSchema(TableId("sdk_test", f"{name}{suffix}_{how}"), columns, ("id",))
            my.create_table(conn, table)
            extra = (b"\x00'\\",) if len(columns) > len(MY_ARROW_COLUMNS) else ()
            data = arrow_rows(table, [(i, *row, *extra) for i, row in enumerate(rows)])
            if how == "apply":
                assert applied_as_events(my, conn, table, data)
            else:
                assert (mysql_target.literal_rows(table, data, False) is not None) is by_arrow
                assert my.load_snapshot(conn, table, data, "s/0")
                assert not my.load_snapshot(conn, table, data.slice(0, 1), "s/0")  # a replay
                assert my.load_snapshot(conn, table, data.slice(1), "s/1")  # read again
            stored.append(my_rows(conn, table))
        assert stored[0] == stored[1]
        assert len(stored[0]) == len(rows)
        assert stored[1][(1,)][10].startswith("back\\slash \\' 'q' nul\0")
        by_suffix[suffix] = stored[1]
    table = TableSchema(TableId("sdk_test", f"{name}_plain"), MY_ARROW_COLUMNS, ("id",))
    my.create_table(conn, table)
    (mode,) = conn.query("SELECT @@SESSION.sql_mode")[0]
    conn.query("SET SESSION sql_mode = CONCAT(@@sql_mode, ',NO_BACKSLASH_ESCAPES')")
    try:  # a backslash is plain text in this mode: only quotes are escaped, doubled
        assert my.load_snapshot(conn, table, arrow_rows(
            table, [(i, *row) for i, row in enumerate(rows)]), "p/0")
    finally:
        conn.query("SET SESSION sql_mode = %s", (mode,))
    assert my_rows(conn, table) == by_suffix[""]
    table = TableSchema(TableId("sdk_test", f"{name}_nan"), MY_ARROW_COLUMNS, ("id",))
    my.create_table(conn, table)
    nan = arrow_rows(table, [(i, *MY_ARROW_ROWS[2][:6], math.nan, *MY_ARROW_ROWS[2][7:])
                             for i in range(3)])
    with pytest.raises(DataError, match="cannot hold nan"):
        my.load_snapshot(conn, table, nan, "n/0")
    assert my_rows(conn, table) == {}
    assert my.load_snapshot(conn, table, nan.slice(0, 0), "n/0")  # the batch was not claimed


# --- SQLite -------------------------------------------------------------------------------------

SQLITE_ARROW_ROWS: list[tuple[Any, ...]] = [  # every column built by Arrow's kernels
    (dt.date(1, 1, 1), dt.datetime(1, 1, 1), dt.datetime(1, 1, 1, tzinfo=dt.UTC),
     dt.time(0, 0, 0, 1), Decimal("1E+5"), Decimal("-0.50"), math.nan, -0.0, b"x",
     dt.timedelta(hours=-1), '{"k": 1}', "ünïcødé '\"", True),
    (dt.date(9999, 12, 31), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
     dt.datetime(2024, 5, 6, 7, 8, 9, 10, tzinfo=EAST), dt.time(23), Decimal("-1e-30"),
     Decimal("0.00"), 1.7976931348623157e308, 3.4028234663852886e38, b"", dt.timedelta(0),
     "[]", "", False),
    (dt.date(1969, 12, 31), dt.datetime(1970, 1, 1), dt.datetime(1970, 1, 1, tzinfo=dt.UTC),
     None, None, Decimal("-99999999.99"), 5e-324, math.inf, None, None, None, None, None),
    (None,) * 13,
]


@pytest.mark.parametrize("rows", [SQLITE_ARROW_ROWS, PG_EDGE_ROWS], ids=["arrow", "edge"])
def test_sqlite_loads_arrow_splits_as_apply_changes_does(tmp_path: Any,
                                                         rows: list[tuple[Any, ...]]) -> None:
    """A split loaded from Arrow (``load_snapshot``) stores what ``apply_changes`` stores for
    the same split's values as ``r`` events: the same text, numbers and blobs, each of the
    same storage class (``quote``), whether Arrow built a column (years 1 and 9999, NaN,
    decimals of scale 2 and 10, an instant at another offset) or the values went one by one
    (far and BC dates, infinities, a decimal without a scale, times, intervals); a replay
    changes nothing, and a split read again replaces the rows it holds."""
    lite = get_dialect("sqlite")
    conn = lite.connect(ConnectionConfig.from_url(f"sqlite:///{tmp_path}/mirror.db"))
    columns = (*PG_EDGE_COLUMNS, Column("n10", L.DECIMAL, "numeric(38,10)", precision=38,
                                        scale=10))  # written with an exponent: 1.000E-7
    scaled = [Decimal("1E-7"), Decimal("0"), Decimal("-12345.6789012345"), None]
    stored = []
    for how in ("apply", "load"):
        table = TableSchema(TableId("main", how), columns, ("id",))
        lite.create_table(conn, table)
        data = arrow_rows(table, [(i, *row, scaled[i % 4]) for i, row in enumerate(rows)])
        if how == "apply":
            assert applied_as_events(lite, conn, table, data)
        else:
            assert lite.load_snapshot(conn, table, data, "s/0")
            assert not lite.load_snapshot(conn, table, data.slice(0, 1), "s/0")  # a replay
            assert lite.load_snapshot(conn, table, data.slice(1), "s/1")  # read again
        quoted = ", ".join(f'quote("{c.name}")' for c in table.columns)
        stored.append(conn.execute(f'SELECT {quoted} FROM "{how}" ORDER BY id').fetchall())
    conn.close()
    assert stored[0] == stored[1]
    assert len(stored[0]) == len(rows)
