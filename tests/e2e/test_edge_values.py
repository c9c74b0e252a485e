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
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from helpers.servers import MYSQL_ADMIN_URL, with_query

from sdk import (
    BadValue,
    ChangeEvent,
    ConnectionConfig,
    FatalSyncError,
    SnapshotSplit,
    TableId,
    TableSchema,
    get_dialect,
)
from sdk.dialect.codec import decode_value, encode_value
from sdk.dialect.temporal import (
    INT64_MAX,
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
    """A PostgreSQL table holding PG_ROWS (ids 1..), published with its own slot: yields the
    source URL, a connection and the schema. ``insert(first_id)`` is ``conn.insert``."""
    pg = get_dialect("postgres")
    tag = uuid.uuid4().hex[:10]
    name, slot = f"edge_{tag}", f"sdk_s_{tag}"
    url = with_query(postgres_url, slot=slot, publication=slot)
    postgres_admin.execute(PG_TABLE.format(name=name))
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
    assert zero[3] == dt.timedelta(hours=838, minutes=59, seconds=59)
    assert partial[3] == -zero[3] and high[3] == -dt.timedelta(microseconds=1)
    assert high[:2] == (dt.date(9999, 12, 31), dt.datetime(9999, 12, 31, 23, 59, 59, 999999))
    assert zero[4] == Decimal("9" * 35 + "." + "9" * 30) and zero[6] == 3.4028234663852886e38
    rows = [(k, *v) for k, v in snapshot.items()]
    # into PostgreSQL and SQLite, exactly
    with _pg_target(postgres_admin, postgres_url, table, rows) as (schema, target):
        got = {r[0]: tuple(r[1:]) for r in target.query(
            f'SELECT * FROM {schema}."{table.table.name}"')}
        assert got[3][4:6] == snapshot[3][4:6] and got[3][7] == snapshot[3][7]
        assert got[1][3] == zero[3] and got[1][4] == zero[4]
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

    from sdk.spark.batches import TableBatcher

    batcher = TableBatcher(table)
    events = [ChangeEvent(table.table, "c", (r[0],), r, _offset(), commit_ts=10**15)
              for r in rows]
    from sdk.spark.batches import event_rows

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
    from sdk.spark.mirror import Mirror
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
@pytest.mark.mysql
@pytest.mark.postgres
@pytest.mark.slow
def test_mysql_target_refuses_before_writing_then_proceeds_with_the_option(
        pg_table: Any, postgres_admin: Any, mysql_admin: Any, west_of_utc: Any) -> None:
    from sdk.spark.mirror import Mirror

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
