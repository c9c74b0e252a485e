"""Values at the edges of their types (#17 items 1, 2, 11): PostgreSQL infinity, BC dates, years
past 9999 and 24:00:00, NaN and infinite numbers, MariaDB zero dates, long TIMEs and extreme
decimals and floats. Each arrives equal through the snapshot and the log, crosses Spark and the
mirror exactly (in a session west of UTC, where year 1 used to fail), and a value a target
cannot hold stops its batch before anything is written, until the documented option is set.
MariaDB's zero dates read as NULL with ``zero_dates=null``, else as ``BadValue`` on both paths."""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from helpers.servers import MYSQL_ADMIN_URL, with_query

from sdk import (
    BadValue,
    ChangeEvent,
    ConnectionConfig,
    DataError,
    FatalSyncError,
    SnapshotSplit,
    TableId,
    TableSchema,
    get_dialect,
)
from sdk.dialect.codec import decode_value, encode_value
from sdk.dialect.temporal import (
    INT64_MAX,
    Interval,
    WideTemporal,
    civil_from_days,
    date_from_days,
    datetime_from_micros,
    days_from_civil,
)

W = WideTemporal

# --- the representation ------------------------------------------------------------------------


def test_civil_days_agree_with_python_and_invert_far_out() -> None:
    for ordinal in [*range(1, 3652060, 997), 3652059]:
        day = dt.date.fromordinal(ordinal)
        days = days_from_civil(day.year, day.month, day.day)
        assert days == ordinal - 719163 and civil_from_days(days) == (day.year, day.month, day.day)
    for days in (-2**31, -2440222, -735160, 2145042905, 2**31 - 1):
        assert days_from_civil(*civil_from_days(days)) == days


@pytest.mark.parametrize("value", [
    W.infinity("date"), W.infinity("date", -1), W.infinity("timestamp"),
    W.infinity("timestamp_tz", -1), W.of("date", -43, 3, 15),
    W.of("timestamp", 10000, 1, 1, 10, 0, 0, 5), W.of("timestamp_tz", 0, 2, 29, 23, 59, 59),
    W.of("time", 0, 0, 0, 24)])
def test_wide_values_round_trip_through_json_text_and_order(value: WideTemporal) -> None:
    assert decode_value(encode_value(value)) == value
    assert W.parse(str(value), value.type) == value == W.parse(value.isoformat(), value.type)
    if value.type == "date":
        assert (value > dt.date(2000, 1, 1)) == (value.units > 0)
    assert date_from_days(2**31 - 1) == W.infinity("date")
    assert datetime_from_micros(INT64_MAX, aware=True) == W.infinity("timestamp_tz")
    assert datetime_from_micros(0, aware=False) == dt.datetime(1970, 1, 1)


def test_sqlite_target_keeps_nan_and_wide_values(tmp_path: Path) -> None:
    from sdk import Column, LogicalType

    table = TableSchema(TableId("main", "edge"), (
        Column("id", LogicalType.INT64, "int", False), Column("f", LogicalType.FLOAT64, "real"),
        Column("d", LogicalType.DATE, "date"), Column("ts", LogicalType.TIMESTAMP_TZ, "ts"),
        Column("t", LogicalType.TIME, "time")), ("id",))
    rows = [(1, math.nan, W.infinity("date"), W.infinity("timestamp_tz", -1), W.of("time", 0, 0,
                                                                                   0, 24)),
            (2, -math.inf, W.of("date", -4712, 11, 24), W.of("timestamp_tz", 10000, 1, 1),
             dt.time(23, 59, 59, 999999))]
    got = _into_sqlite(tmp_path / "m.db", table, rows)
    assert math.isnan(got[(1,)][1]) and got[(1,)][2:] == rows[0][2:]
    assert got[(2,)] == rows[1]


def _into_sqlite(path: Path, table: TableSchema, rows: list[tuple[Any, ...]]
                 ) -> dict[Any, Any]:
    from sdk.dialect.types import Offset
    from sdk_sqlite import read_target

    sqlite = get_dialect("sqlite")
    conn = sqlite.connect(ConnectionConfig.from_url(f"sqlite:///{path}"))
    try:
        sqlite.create_table(conn, table)
        events = [ChangeEvent(table.table, "r", table.key_of(r), r, Offset("x")) for r in rows]
        assert sqlite.apply_changes(conn, table, events, "b1")
        return read_target(conn, table)
    finally:
        conn.close()


# --- PostgreSQL: snapshot and log, and back into PostgreSQL ------------------------------------

PG_TABLE = """CREATE TABLE {name} (id int8 PRIMARY KEY, d date, ts timestamp(6),
  tz timestamptz(6), t time(6), n numeric, n2 numeric(10,2), f8 float8, f4 float4)"""
PG_ROWS = [
    "('infinity', 'infinity', 'infinity', '24:00:00', 'Infinity', 1.5, 'Infinity', "
    "'Infinity')",
    "('-infinity', '-infinity', '-infinity', '00:00:00', '-Infinity', 1.5, '-Infinity', "
    "'-Infinity')",
    "('0044-03-15 BC', '0044-03-15 12:00:01.5 BC', '4713-01-01 00:00:00+00 BC', "
    "'23:59:59.999999', 'NaN', NULL, 'NaN', 'NaN')",
    "('10000-01-01', '294000-12-31 23:59:59.999999', '12345-06-07 08:09:10.5+00', "
    "'12:00:00', 1e-30, 0.01, 1.7976931348623157e308, 3.4028235e38)",
    "('0001-01-01', '0001-01-01 00:00:00', '0001-01-01 00:00:00+00', '00:00:00.000001', "
    "-1e100, -99999999.99, 5e-324, 1e-45)",
    "('9999-12-31', '9999-12-31 23:59:59.999999', '9999-12-31 23:59:59.999999+00', "
    "'23:59:59', 0, 0, -0.0, -0.0)",
    "(NULL, NULL, NULL, NULL, NULL, 'NaN', NULL, NULL)",
]
SPARK_SAFE = [1, 2, 3, 4, 5, 6]  # a numeric(10,2) NaN (row 7) fits no Spark DecimalType


@pytest.fixture
def pg_table(postgres_url: str, postgres_admin: Any) -> Iterator[tuple[str, Any, TableSchema]]:
    """A PostgreSQL table of PG_TABLE's columns, published with its own slot: yields the
    source URL, a connection and the schema."""
    with _pg_source(postgres_url, postgres_admin, PG_TABLE) as source:
        yield source


@contextlib.contextmanager
def _pg_source(postgres_url: str, postgres_admin: Any, ddl: str
               ) -> Iterator[tuple[str, Any, TableSchema]]:
    """A table made by ``ddl`` (its ``{name}`` filled in), published with its own slot and
    ready for capture: the source URL, a connection and the schema; all dropped after."""
    pg = get_dialect("postgres")
    tag = uuid.uuid4().hex[:10]
    name, slot = f"edge_{tag}", f"sdk_s_{tag}"
    url = with_query(postgres_url, slot=slot, publication=slot)
    postgres_admin.execute(ddl.format(name=name))
    postgres_admin.execute(f"GRANT SELECT ON {name} TO sdk_cdc")
    postgres_admin.execute(f"CREATE PUBLICATION {slot} FOR TABLE {name}")
    conn = pg.connect(ConnectionConfig.from_url(url))
    schema = pg.describe_table(conn, TableId("public", name))
    pg.prepare_capture(conn, [schema])
    try:
        yield url, conn, schema
    finally:
        conn.close()
        postgres_admin.execute("SELECT pg_drop_replication_slot(slot_name) FROM "
                               "pg_replication_slots WHERE slot_name = %s", (slot,))
        postgres_admin.execute(f"DROP PUBLICATION IF EXISTS {slot}")
        postgres_admin.execute(f"DROP TABLE IF EXISTS {name}")


def _pg_insert(admin: Any, table: TableSchema, first_id: int) -> None:
    for j, row in enumerate(PG_ROWS):
        admin.execute(f"INSERT INTO {table.table.name} VALUES ({first_id + j}, {row[1:]}")


def _snapshot_and_log(dialect: Any, conn: Any, table: TableSchema, insert: Any
                      ) -> tuple[dict[int, tuple[Any, ...]], dict[int, tuple[Any, ...]]]:
    """Rows inserted from id 1 read by ``read_range``, and the same rows inserted again from
    id 1001 read from the log, each by id (1..)."""
    insert(1)
    whole = SnapshotSplit(table.table, 0, None, None)
    snapshot = {r[0]: tuple(r[1:]) for b in dialect.read_range(conn, table, whole, 100)
                for r in b}
    low = dialect.current_offset(conn)
    insert(1001)
    logged = {e.key[0] - 1000: tuple(e.after[1:]) for e in
              dialect.stream_log(conn, [table], low, dialect.current_offset(conn))
              if isinstance(e, ChangeEvent)}
    return snapshot, logged


def _same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN, and of one type."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, Decimal) and a.is_nan():
        return b.is_nan()
    return bool(a == b) and str(a) == str(b)


def _assert_rows_equal(a: dict[int, tuple[Any, ...]], b: dict[int, tuple[Any, ...]]) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        for x, y in zip(a[key], b[key], strict=True):
            assert _same(x, y), f"id {key}: {x!r} != {y!r}"


@pytest.mark.postgres
def test_postgres_edge_values_snapshot_equals_log(pg_table: Any, postgres_admin: Any) -> None:
    _, conn, table = pg_table
    pg = get_dialect("postgres")
    snapshot, logged = _snapshot_and_log(pg, conn, table,
                                         lambda first: _pg_insert(postgres_admin, table, first))
    _assert_rows_equal(snapshot, logged)
    first, second, third, fourth = snapshot[1], snapshot[2], snapshot[3], snapshot[4]
    assert first[:4] == (W.infinity("date"), W.infinity("timestamp"),
                         W.infinity("timestamp_tz"), W.of("time", 0, 0, 0, 24))
    assert second[:3] == (W.infinity("date", -1), W.infinity("timestamp", -1),
                          W.infinity("timestamp_tz", -1))
    assert third[0] == W.of("date", -43, 3, 15) and third[2] == W.of("timestamp_tz", -4712, 1, 1)
    assert fourth[0] == W.of("date", 10000, 1, 1)
    assert first[4] == Decimal("Infinity") and first[6:] == (math.inf, math.inf)
    assert third[4].is_nan() and math.isnan(third[6]) and snapshot[7][5].is_nan()
    assert snapshot[5][:3] == (dt.date(1, 1, 1), dt.datetime(1, 1, 1),
                               dt.datetime(1, 1, 1, tzinfo=dt.UTC))


@pytest.mark.postgres
def test_postgres_edge_values_into_postgres_and_sqlite_targets(
        pg_table: Any, postgres_admin: Any, postgres_url: str, tmp_path: Path) -> None:
    _, conn, table = pg_table
    pg = get_dialect("postgres")
    snapshot, logged = _snapshot_and_log(pg, conn, table,
                                         lambda first: _pg_insert(postgres_admin, table, first))
    rows = [(k, *v) for k, v in snapshot.items()]
    # PostgreSQL: the target's text equals the source's text, infinity stays infinity
    with _pg_target(postgres_admin, postgres_url, table, rows) as (schema, _):
        columns = ", ".join(f"{c.name}::text" for c in table.columns)
        want = postgres_admin.execute(f"SELECT {columns} FROM {table.table.name} WHERE id < "
                                      "1000 ORDER BY id").fetchall()
        got = postgres_admin.execute(f"SELECT {columns} FROM {schema}.{table.table.name} "
                                     "ORDER BY id").fetchall()
        assert got == want
    # SQLite: every value back exactly
    got_sqlite = _into_sqlite(tmp_path / "pg.db", TableSchema(
        TableId("main", table.table.name), table.columns, table.key), rows)
    _assert_rows_equal({k[0]: tuple(v[1:]) for k, v in got_sqlite.items()}, logged)


@contextlib.contextmanager
def _pg_target(admin: Any, url: str, table: TableSchema, rows: list[tuple[Any, ...]]
               ) -> Iterator[tuple[str, Any]]:
    """``rows`` of ``table`` applied to a PostgreSQL target in a new schema: yields the schema
    and the target connection, then drops both."""
    pg = get_dialect("postgres")
    schema = f"sdk_edge_{uuid.uuid4().hex[:8]}"
    admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION sdk_cdc")
    target = pg.connect(ConnectionConfig.from_url(url))
    try:
        mirror = TableSchema(TableId(schema, table.table.name), table.columns, table.key)
        pg.create_table(target, mirror)
        events = [ChangeEvent(mirror.table, "r", (r[0],), r, _offset()) for r in rows]
        assert pg.apply_changes(target, mirror, events, "b1")
        yield schema, target
    finally:
        target.close()
        admin.execute(f"DROP SCHEMA {schema} CASCADE")


def _shortest32(value: float | None) -> float | None:
    """The double the shortest text of float32 ``value`` parses to (``3.4028235e+38``), as
    PostgreSQL prints a ``real``: how the SQLite target stores a FLOAT32."""
    import numpy as np

    return None if value is None else float(str(np.float32(value)))


def _offset() -> Any:
    from sdk.dialect.types import Offset

    return Offset("x")


# --- Intervals: months, days and microseconds apart, hours kept as hours (#59) ------------------

PG_INTERVALS = [
    "1 year 2 mons 3 days 04:05:06.789", "1 mon", "30 days", "720:00:00", "-3 days -04:00:00.5",
    "838:59:59", "-838:59:59", "1 year -2 mons +3 days -04:05:06", "-00:00:00.000001", "0",
    "P178956970Y7M2147483647DT2562047788H54.775807S",
    "P-178956970Y-8M-2147483648DT-2562047788H-54.775808S", None,
]
"""Years, months, days, hours past 24, negative and mixed signs, microseconds, PostgreSQL's
extremes (written in ISO 8601: PostgreSQL's own text of the last does not parse back), NULL."""
HOURS = {4: "720:00:00.000000", 6: "838:59:59.000000", 7: "-838:59:59.000000",
         9: "-00:00:00.000001", 10: "00:00:00.000000", 13: None}
"""The ids (1..) of the intervals of hours only, as MariaDB prints them in a TIME(6) column."""


@pytest.fixture
def pg_intervals(postgres_url: str, postgres_admin: Any
                 ) -> Iterator[tuple[str, Any, TableSchema]]:
    """A published PostgreSQL table of an interval column (see :func:`_pg_source`)."""
    ddl = "CREATE TABLE {name} (id int8 PRIMARY KEY, iv interval)"
    with _pg_source(postgres_url, postgres_admin, ddl) as source:
        yield source


def _insert_intervals(admin: Any, table: TableSchema, first_id: int) -> None:
    for j, text in enumerate(PG_INTERVALS):
        admin.execute(f"INSERT INTO {table.table.name} VALUES (%s, %s::interval)",
                      (first_id + j, text))


def _texts(admin: Any, sql: str, style: str = "postgres") -> list[Any]:
    """The first column of ``sql``'s rows as PostgreSQL prints them under ``IntervalStyle``
    ``style`` (the shared session's style restored after)."""
    admin.execute(f"SET IntervalStyle = {style}")
    try:
        return [r[0] for r in admin.execute(sql).fetchall()]
    finally:
        admin.execute("RESET IntervalStyle")


@contextlib.contextmanager
def _my_target(url: str, table: TableSchema, rows: list[tuple[Any, ...]]
               ) -> Iterator[Callable[[str], list[Any]]]:
    """``rows`` of ``table`` applied to a MariaDB target table in sdk_test: yields a function
    giving the first column of a query's rows (``{name}``: the table), then drops the table."""
    my = get_dialect("mysql")
    mirror = TableSchema(TableId("sdk_test", f"iv_{uuid.uuid4().hex[:10]}"), table.columns,
                         table.key)
    target = my.connect(ConnectionConfig.from_url(url))

    def column(sql: str) -> list[Any]:
        with target.raw.cursor() as cur:
            cur.execute(sql.format(name=f"`{mirror.table.name}`"))
            return [r[0] for r in cur.fetchall()]

    try:
        my.create_table(target, mirror)
        events = [ChangeEvent(mirror.table, "r", (r[0],), r, _offset()) for r in rows]
        assert my.apply_changes(target, mirror, events, "b1")
        yield column
    finally:
        column("DROP TABLE IF EXISTS {name}")
        column(f"DELETE FROM _sdk_applied WHERE tbl = '{mirror.table.name}'")
        target.close()


@pytest.mark.postgres
@pytest.mark.mysql
def test_postgres_intervals_reach_each_target_exactly_from_snapshot_and_log(
        pg_intervals: Any, postgres_admin: Any, postgres_url: str, tmp_path: Path) -> None:
    """A month is not 30 days nor a day 24 hours: each interval keeps its three parts into a
    PostgreSQL target (the same ``::text``), SQLite (ISO 8601, PostgreSQL's ``iso_8601`` text)
    and MariaDB's TIME(6) (hours only; months or days stop the batch, or are NULL with
    ``out_of_range=null``), from the snapshot and from the log alike."""
    _, conn, table = pg_intervals
    pg, name = get_dialect("postgres"), table.table.name
    snapshot, logged = _snapshot_and_log(
        pg, conn, table, lambda first: _insert_intervals(postgres_admin, table, first))
    _assert_rows_equal(snapshot, logged)
    source = f"SELECT iv::text FROM {name} WHERE id < 1000 ORDER BY id"
    want, iso = _texts(postgres_admin, source), _texts(postgres_admin, source, "iso_8601")
    assert want[:3] == ["1 year 2 mons 3 days 04:05:06.789", "1 mon", "30 days"]
    assert want[4:7] == ["-3 days -04:00:00.5", "838:59:59", "-838:59:59"]
    for phase in (snapshot, logged):
        rows = [(k, *v) for k, v in sorted(phase.items())]
        with _pg_target(postgres_admin, postgres_url, table, rows) as (schema, _):
            assert _texts(postgres_admin, f"SELECT iv::text FROM {schema}.{name} "
                                          "ORDER BY id") == want
        path = tmp_path / f"{len(list(tmp_path.iterdir()))}.db"
        _into_sqlite(path, TableSchema(TableId("main", name), table.columns, table.key), rows)
        with contextlib.closing(sqlite3.connect(path)) as sqlite:
            assert [r[0] for r in sqlite.execute(f'SELECT iv FROM "{name}" ORDER BY id')] == iso
        with _my_target(with_query(MYSQL_ADMIN_URL, out_of_range="null"), table, rows) as mine:
            assert mine("SELECT CAST(iv AS CHAR) FROM {name} ORDER BY id") == [
                HOURS.get(k) for k, _ in rows]
        with pytest.raises(DataError, match=r"column 'iv': MySQL's TIME\(6\) cannot hold "
                                            r"P1Y2M3DT4H5M6.789S"), \
                _my_target(MYSQL_ADMIN_URL, table, rows):
            pass
        with _my_target(MYSQL_ADMIN_URL, table, [r for r in rows if r[0] in HOURS]) as mine:
            assert mine("SELECT CAST(iv AS CHAR) FROM {name} ORDER BY id") == list(
                HOURS.values())
    # a split loaded from Arrow (load_snapshot): the ISO 8601 text copied as it is
    from sdk.dialect.tableformat import arrow_rows

    split = arrow_rows(table, [(k, *v) for k, v in sorted(snapshot.items())])
    with _pg_target(postgres_admin, postgres_url, table, []) as (schema, target):
        assert pg.load_snapshot(target, TableSchema(TableId(schema, name), table.columns,
                                                    table.key), split, "b2")
        assert _texts(postgres_admin, f"SELECT iv::text FROM {schema}.{name} ORDER BY id") == want


# --- MariaDB: zero dates, long TIMEs, extreme decimals and floats -------------------------------

MY_TABLE = """CREATE TABLE `{name}` (id BIGINT PRIMARY KEY, d DATE, dt DATETIME(6),
  ts TIMESTAMP(6) NULL, t TIME(6), w DECIMAL(65,30), n DECIMAL(38,10), f FLOAT, g DOUBLE)"""
MY_ROWS = [
    "('0000-00-00', '0000-00-00 00:00:00', '0000-00-00 00:00:00', '838:59:59', "
    "99999999999999999999999999999999999.999999999999999999999999999999, "
    "9999999999999999999999999999.9999999999, 3.402823466e38, 1.7976931348623157e308)",
    "('0000-01-01', '2024-00-01 00:00:00', '1970-01-01 00:00:01', '-838:59:59', "
    "-99999999999999999999999999999999999.999999999999999999999999999999, "
    "-0.0000000001, -3.402823466e38, -1.7976931348623157e308)",
    "('9999-12-31', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07.999999', "
    "'-00:00:00.000001', 0.000000000000000000000000000001, 0, 1.175494351e-38, "
    "2.2250738585072014e-308)",
    "('1000-01-01', '1000-01-01 00:00:00', NULL, '24:00:00', 1, 1, 1.5, 5e-324)",
]


@pytest.fixture
def my_table(mysql_admin: Any, mysql_url: str) -> Iterator[tuple[Any, TableSchema]]:
    """A table of MY_TABLE's columns, and a connection that reads zero dates as NULL."""
    name = f"edge_{uuid.uuid4().hex[:10]}"
    with mysql_admin.cursor() as cur:
        cur.execute("SELECT @@SESSION.sql_mode")
        (mode,) = cur.fetchone()  # restored after: the administrator's session is shared
        cur.execute("SET SESSION sql_mode = ''")  # zero dates, as servers that allow them
        cur.execute(MY_TABLE.format(name=name))
    my = get_dialect("mysql")
    conn = my.connect(ConnectionConfig.from_url(with_query(mysql_url, zero_dates="null")))
    try:
        yield conn, my.describe_table(conn, TableId("sdk_test", name))
    finally:
        conn.close()
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{name}`")
            cur.execute("SET SESSION sql_mode = %s", (mode,))


def _my_insert(admin: Any, table: TableSchema, first_id: int) -> None:
    with admin.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        for j, row in enumerate(MY_ROWS):
            cur.execute(f"INSERT INTO `{table.table.name}` VALUES ({first_id + j}, {row[1:]}")


@pytest.mark.mysql
@pytest.mark.postgres
def test_mariadb_edge_values_snapshot_equals_log_and_reach_targets(
        my_table: Any, mysql_admin: Any, postgres_admin: Any, postgres_url: str,
        tmp_path: Path) -> None:
    conn, table = my_table
    my = get_dialect("mysql")
    snapshot, logged = _snapshot_and_log(my, conn, table,
                                         lambda first: _my_insert(mysql_admin, table, first))
    _assert_rows_equal(snapshot, logged)
    zero, partial, high, _ = snapshot[1], snapshot[2], snapshot[3], snapshot[4]
    assert zero[:3] == (None, None, None)  # zero dates with zero_dates=null: NULL, as Debezium
    assert partial[:2] == (None, None)  # year 0 and zero months too (no value Python holds)
    assert zero[3] == Interval(0, 0, (838 * 3600 + 59 * 60 + 59) * 1_000_000)  # hours, no days
    assert partial[3] == Interval(0, 0, -zero[3].micros) and high[3] == Interval(0, 0, -1)
    assert high[:2] == (dt.date(9999, 12, 31), dt.datetime(9999, 12, 31, 23, 59, 59, 999999))
    assert zero[4] == Decimal("9" * 35 + "." + "9" * 30) and zero[6] == 3.4028234663852886e38
    rows = [(k, *v) for k, v in snapshot.items()]
    # into PostgreSQL and SQLite, exactly
    with _pg_target(postgres_admin, postgres_url, table, rows) as (schema, target):
        got = {r[0]: tuple(r[1:]) for r in target.query(
            f'SELECT * FROM {schema}."{table.table.name}"')}
        assert got[3][4:6] == snapshot[3][4:6] and got[3][7] == snapshot[3][7]
        assert got[1][3] == zero[3] and got[1][4] == zero[4]
        # a TIME's hours stay hours: 838:59:59, not 34 days 22:59:59
        assert _texts(postgres_admin, f'SELECT t::text FROM {schema}."{table.table.name}" '
                                      "ORDER BY id") == ["838:59:59", "-838:59:59",
                                                         "-00:00:00.000001", "24:00:00"]
    with _my_target(MYSQL_ADMIN_URL, table, rows) as mine, mysql_admin.cursor() as cur:
        cur.execute(f"SELECT CAST(t AS CHAR) FROM `{table.table.name}` WHERE id < 1000 "
                    "ORDER BY id")  # and into MariaDB as they were
        assert mine("SELECT CAST(t AS CHAR) FROM {name} ORDER BY id") == [
            r[0] for r in cur.fetchall()]
    got_sqlite = _into_sqlite(tmp_path / "my.db", TableSchema(
        TableId("main", table.table.name), table.columns, table.key), rows)
    # a FLOAT as the double its shortest text parses to (MariaDB prints six digits: 3.40282e38)
    _assert_rows_equal({k[0]: tuple(v[1:]) for k, v in got_sqlite.items()},
                       {k: (*v[:6], _shortest32(v[6]), v[7]) for k, v in snapshot.items()})


@pytest.mark.mysql
def test_mariadb_zero_dates_are_bad_values_by_default(my_table: Any, mysql_admin: Any,
                                                      mysql_url: str) -> None:
    """Without ``zero_dates=null`` a date Python cannot hold reads as a ``BadValue`` of the
    text SELECT gives for it (the column's fraction digits included), the same through the
    snapshot and the log, so the engine names it and applies errors.mode; the rest of the row
    reads as with ``zero_dates=null``."""
    null_conn, table = my_table
    my = get_dialect("mysql")
    conn = my.connect(ConnectionConfig.from_url(mysql_url))
    try:
        snapshot, logged = _snapshot_and_log(my, conn, table,
                                             lambda first: _my_insert(mysql_admin, table, first))
    finally:
        conn.close()
    _assert_rows_equal(snapshot, logged)
    zero, partial = snapshot[1], snapshot[2]
    reason = zero[0].reason
    assert reason.startswith("is not a date") and "add zero_dates=null to the source URL" in reason
    assert zero[:3] == (BadValue("0000-00-00", reason),
                        BadValue("0000-00-00 00:00:00.000000", reason),
                        BadValue("0000-00-00 00:00:00.000000", reason))
    assert partial[:2] == (BadValue("0000-01-01", reason),
                           BadValue("2024-00-01 00:00:00.000000", reason))
    assert partial[2] == dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=dt.UTC)
    nulls = {r[0]: tuple(r[1:]) for b in my.read_range(
        null_conn, table, SnapshotSplit(table.table, 0, None, None), 100) for r in b}
    for key, row in snapshot.items():  # the rest as zero_dates=null reads it
        _assert_rows_equal({key: tuple(None if isinstance(v, BadValue) else v for v in row)},
                           {key: nulls[key]})


# --- Spark and the mirror: a session west of UTC, targets that cannot hold a value -------------


def _frame(spark: Any, table: TableSchema, rows: list[tuple[Any, ...]], name: str) -> Any:
    """A DataFrame of ``rows`` as the cdc source gives them (through TableBatcher)."""
    from helpers.spark import probe

    from sdk.spark.executor.batches import TableBatcher

    batcher = TableBatcher(table)
    events = [ChangeEvent(table.table, "c", (r[0],), r, _offset(), commit_ts=10**15)
              for r in rows]
    from sdk.spark.executor.batches import event_rows

    columns = event_rows(batcher, events)
    return probe(spark, name, [batcher.batch(*columns, 0)], batcher.spark_schema)


@pytest.fixture
def west_of_utc(spark: Any) -> Iterator[Any]:
    """The session in America/Los_Angeles, where 0001-01-01 00:00 UTC is year 0 locally."""
    spark.conf.set("spark.sql.session.timeZone", "America/Los_Angeles")
    try:
        yield spark
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.slow
def test_mirror_carries_postgres_edge_values_through_spark(
        pg_table: Any, postgres_admin: Any, postgres_url: str, west_of_utc: Any,
        tmp_path: Path) -> None:
    from sdk.spark import Mirror
    from sdk_sqlite import read_target

    _, conn, table = pg_table
    pg = get_dialect("postgres")
    _, logged = _snapshot_and_log(pg, conn, table,
                                  lambda first: _pg_insert(postgres_admin, table, first))
    rows = [(k, *logged[k]) for k in SPARK_SAFE]
    frame = _frame(west_of_utc, table, rows, "edge_pg_probe")
    # SQLite mirror
    sqlite_mirror = Mirror(f"sqlite:///{tmp_path / 'm.db'}", [table], target_schema="main")
    sqlite_mirror(frame, 0)
    target = get_dialect("sqlite").connect(
        ConnectionConfig.from_url(f"sqlite:///{tmp_path / 'm.db'}"))
    try:
        got = read_target(target, TableSchema(TableId("main", table.table.name), table.columns,
                                              table.key))
    finally:
        target.close()
    # Spark's FloatType holds psycopg's float4 (a double parsed from text) as the float32,
    # which SQLite stores as the double of its shortest text: psycopg's double again
    _assert_rows_equal({k[0]: tuple(v[1:]) for k, v in got.items()},
                       {k: logged[k] for k in SPARK_SAFE})
    # PostgreSQL mirror: the same text as the source
    schema = f"sdk_edge_{uuid.uuid4().hex[:8]}"
    postgres_admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION sdk_cdc")
    try:
        Mirror(postgres_url, [table], target_schema=schema)(frame, 0)
        columns = ", ".join(f"{c.name}::text" for c in table.columns)
        ids = ", ".join(map(str, SPARK_SAFE))
        want = postgres_admin.execute(f"SELECT {columns} FROM {table.table.name} WHERE id IN "
                                      f"({ids}) ORDER BY id").fetchall()
        got_pg = postgres_admin.execute(f"SELECT {columns} FROM {schema}.{table.table.name} "
                                        "ORDER BY id").fetchall()
        assert got_pg == want
    finally:
        postgres_admin.execute(f"DROP SCHEMA {schema} CASCADE")
    # numeric(10,2) NaN: no Spark decimal holds it; the error names table, key and column
    with pytest.raises(FatalSyncError, match=r"key \(7,\) column 'n2'"):
        _frame(west_of_utc, table, [(7, *logged[7])], "edge_nan_probe")


@pytest.mark.spark
@pytest.mark.postgres
@pytest.mark.slow
def test_mirror_carries_postgres_intervals_through_spark(
        pg_intervals: Any, postgres_admin: Any, postgres_url: str, spark: Any,
        tmp_path: Path) -> None:
    """Through Spark (ISO 8601 text there) the intervals keep their ``::text`` into a
    PostgreSQL mirror and PostgreSQL's ``iso_8601`` text into SQLite."""
    from sdk.spark import Mirror

    _, conn, table = pg_intervals
    _, logged = _snapshot_and_log(get_dialect("postgres"), conn, table,
                                  lambda first: _insert_intervals(postgres_admin, table, first))
    frame = _frame(spark, table, [(k, *v) for k, v in sorted(logged.items())], "iv_probe")
    assert frame.schema[table.columns[1].name].dataType.simpleString() == "string"
    name = table.table.name
    source = f"SELECT iv::text FROM {name} WHERE id < 1000 ORDER BY id"
    Mirror(f"sqlite:///{tmp_path / 'm.db'}", [table], target_schema="main")(frame, 0)
    with contextlib.closing(sqlite3.connect(tmp_path / "m.db")) as sqlite:
        assert [r[0] for r in sqlite.execute(f'SELECT iv FROM "{name}" ORDER BY id')] == \
            _texts(postgres_admin, source, "iso_8601")
    schema = f"sdk_edge_{uuid.uuid4().hex[:8]}"
    postgres_admin.execute(f"CREATE SCHEMA {schema} AUTHORIZATION sdk_cdc")
    try:
        Mirror(postgres_url, [table], target_schema=schema)(frame, 0)
        assert _texts(postgres_admin, f"SELECT iv::text FROM {schema}.{name} ORDER BY id") == \
            _texts(postgres_admin, source)
    finally:
        postgres_admin.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.mark.spark
@pytest.mark.mysql
@pytest.mark.postgres
@pytest.mark.slow
def test_mysql_target_refuses_before_writing_then_proceeds_with_the_option(
        pg_table: Any, postgres_admin: Any, mysql_admin: Any, west_of_utc: Any) -> None:
    from sdk.spark import Mirror

    _, conn, table = pg_table
    _pg_insert(postgres_admin, table, 1)
    whole = SnapshotSplit(table.table, 0, None, None)
    pg = get_dialect("postgres")
    rows = [tuple(r) for b in pg.read_range(conn, table, whole, 100) for r in b
            if r[0] in SPARK_SAFE]
    frame = _frame(west_of_utc, table, rows, "edge_my_probe")
    name = table.table.name

    def count(sql: str) -> int:
        with mysql_admin.cursor() as cur:
            cur.execute(sql)
            return int(cur.fetchone()[0])

    try:
        mirror = Mirror(MYSQL_ADMIN_URL, [table], partitions=1, target_schema="sdk_test")
        with pytest.raises(Exception, match=rf"sdk_test.{name} key \(\d+,\) column '\w+': "
                                            r"MySQL's \w+.* cannot hold .*out_of_range=null"):
            mirror(frame, 7)
        assert count(f"SELECT COUNT(*) FROM `{name}`") == 0
        assert count(f"SELECT COUNT(*) FROM _sdk_applied WHERE tbl = '{name}'") == 0
        fixed = Mirror(with_query(MYSQL_ADMIN_URL, out_of_range="null"), [table], partitions=1,
                       target_schema="sdk_test")
        fixed(frame, 7)  # the rerun of the same batch, after the fix
        assert count(f"SELECT COUNT(*) FROM `{name}`") == len(SPARK_SAFE)
        assert count(f"SELECT COUNT(*) FROM `{name}` WHERE d IS NULL") == 4  # ±inf, BC, 10000
        assert count(f"SELECT COUNT(*) FROM `{name}` WHERE id = 5 AND d = '0001-01-01' AND "
                     "tz = '0001-01-01 00:00:00'") == 1
        assert count(f"SELECT COUNT(*) FROM `{name}` WHERE id = 1 AND t = '24:00:00'") == 1
        fixed(frame, 7)  # a replay changes nothing
        assert count(f"SELECT COUNT(*) FROM _sdk_applied WHERE tbl = '{name}'") == 1
    finally:
        with mysql_admin.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS `{name}`")
            cur.execute(f"DELETE FROM _sdk_applied WHERE tbl = '{name}'")
