"""The MySQL/MariaDB dialect's server checksums (hooks ``checksum_range`` and ``row_hashes``):
for a column of every type the dialect maps, zero dates read as NULL, and mirror tables
``create_table`` made from a MySQL and a PostgreSQL table's schema, the server's hashes equal
the engine's (:mod:`sdk.dialect.checksum`) of the rows read back, per chunk and per row."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from helpers.servers import MYSQL_ADMIN_URL, with_query

from sdk import (
    Column,
    ConnectionConfig,
    Dialect,
    LogicalType,
    SnapshotSplit,
    TableId,
    TableSchema,
    get_dialect,
)
from sdk.testing.kit import check_checksums, fill_mirror, ranges

pytestmark = pytest.mark.mysql
L = LogicalType
UTC = dt.UTC


@pytest.fixture
def mysql() -> Dialect:
    return get_dialect("mysql")


@pytest.fixture
def conn(mysql: Dialect, mysql_admin: Any) -> Iterator[Any]:
    """The dialect's connection as the administrator (who may create mirror tables)."""
    connection = mysql.connect(ConnectionConfig.from_url(MYSQL_ADMIN_URL))
    yield connection
    connection.close()


@pytest.fixture
def database(mysql_admin: Any) -> Iterator[str]:
    """A database of this test's own, dropped with its tables afterwards."""
    name = f"sdk_ck_{uuid.uuid4().hex[:10]}"
    with mysql_admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
    yield name
    with mysql_admin.cursor() as cur:
        cur.execute(f"DROP DATABASE {name}")


def _write(statements: list[str]) -> None:
    """Run ``statements`` on an administrator's session of their own (they set its time zone
    and SQL mode)."""
    import pymysql

    c = ConnectionConfig.from_url(MYSQL_ADMIN_URL)
    with pymysql.connect(host=c.host, port=c.port or 3306, user=c.user, autocommit=True,
                         password=c.password or "", charset="utf8mb4") as admin, \
            admin.cursor() as cur:
        for statement in statements:
            cur.execute(statement)


def _read(mysql: Dialect, conn: Any, table: TableSchema, split: SnapshotSplit) -> list[Any]:
    return [tuple(r) for b in mysql.read_range(conn, table, split, 3) for r in b]


COLUMNS = """id BIGINT PRIMARY KEY, ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT,
    su SMALLINT UNSIGNED, mi MEDIUMINT, mu MEDIUMINT UNSIGNED, i INT, iu INT UNSIGNED,
    bi BIGINT, bu BIGINT UNSIGNED, flag BOOLEAN, n DECIMAL(10,2), n0 DECIMAL(12,0),
    wide DECIMAL(65,30), b1 BIT(1), b10 BIT(10), b64 BIT(64), yr YEAR, d DATE, dt DATETIME,
    dt6 DATETIME(6), ts TIMESTAMP NULL, ts6 TIMESTAMP(6) NULL, c CHAR(5), vc VARCHAR(20),
    lat VARCHAR(20) CHARACTER SET latin1, tt TINYTEXT, tx TEXT, mt MEDIUMTEXT, lt LONGTEXT,
    en ENUM('a','b c'), st SET('x','y'), bn BINARY(4), vb VARBINARY(8), tb TINYBLOB, bl BLOB,
    mb MEDIUMBLOB, lb LONGBLOB"""
ROWS = [
    "1, -128, 255, -32768, 65535, -8388608, 16777215, -2147483648, 4294967295, "
    "-9223372036854775808, 18446744073709551615, TRUE, 0, 0, 0, b'0', b'1000000001', "
    "b'1111111111111111111111111111111111111111111111111111111111111111', 2155, "
    "'1000-01-01', '2024-01-02 03:04:05', '2024-02-29 23:59:59.999999', "
    "'2024-03-10 02:30:00', '2038-01-19 08:44:07.000001', '', '', '', '', '', '', '', 'a', "
    "'', x'', x'', x'', x'', x'', x''",
    "2, 127, 0, 32767, 0, 8388607, 0, 2147483647, 0, 9223372036854775807, 0, FALSE, 1.50, "
    "100, 12345678901234567890123456789012345.123456789012345678901234567890, b'1', b'0', "
    "b'0', 1901, '9999-12-31', '9999-12-31 23:59:59', '1000-01-01 00:00:00.000001', "
    "'1970-01-01 05:30:01', '2024-01-01 05:30:00.5', 'ab', 'ünï 😀', 'çé', 'x', "
    "REPEAT('x', 5000), 'm', 'l', 'b c', 'x,y', x'0102', x'00ff10', x'00', x'5c4e', x'ff', "
    "x'00'",
    "3, -1, NULL, -1, NULL, -1, NULL, -1, NULL, -1, 1, NULL, 100.00, -5, -0.5, NULL, NULL, "
    "NULL, 0, '2024-02-29', NULL, NULL, NULL, NULL, 'abcde', 'a\\\\N', NULL, 'tab\there', "
    "NULL, NULL, NULL, NULL, '', NULL, NULL, NULL, NULL, NULL, NULL",
    "4, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, -0.50, 0, "
    "0.000000000000000000000000000001, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "' x', 'with  space ', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL",
    "5" + ", NULL" * 38,
]
"""Inserted in a session at ``+05:30``: TIMESTAMP literals are that zone's wall times."""


def _matrix(mysql: Dialect, conn: Any, database: str) -> TableSchema:
    """Table ``matrix`` of :data:`COLUMNS` (and MariaDB's UUID and INET6) holding
    :data:`ROWS`."""
    columns, rows = COLUMNS, ROWS
    if conn.mariadb:
        columns += ", u UUID, ip INET6"
        rows = [*(f"{r}, NULL, NULL" for r in ROWS[1:]),
                f"{ROWS[0]}, '123e4567-e89b-12d3-a456-426655440000', '2001:db8::ff00:42:8329'"]
    _write(["SET time_zone = '+05:30'", f"CREATE TABLE {database}.matrix ({columns})",
            *(f"INSERT INTO {database}.matrix VALUES ({r})" for r in rows)])
    return mysql.describe_table(conn, TableId(database, "matrix"))


def test_every_mapped_type_hashes_in_the_server_as_the_engine_does(
        mysql: Dialect, conn: Any, database: str) -> None:
    table = _matrix(mysql, conn, database)
    whole = SnapshotSplit(table.table, 0, None, None)
    row = {r[0]: r for r in _read(mysql, conn, table, whole)}[1]
    assert row[22] == dt.datetime(2024, 3, 9, 21, 0, tzinfo=UTC)  # stored at +05:30
    assert row[10] == Decimal(2**64 - 1) and row[17] == Decimal(2**64 - 1)  # BIGINT UNSIGNED
    for split in (whole, SnapshotSplit(table.table, 1, (2,), (4,)),
                  SnapshotSplit(table.table, 2, (3,), (3,)),
                  SnapshotSplit(table.table, 3, None, None, "n IS NOT NULL AND vc LIKE '%a%'")):
        assert check_checksums(mysql, conn, table, split, _read(mysql, conn, table, split))


def test_zero_dates_read_as_null_hash_as_null(mysql: Dialect, database: str) -> None:
    """With ``zero_dates=null`` the server hashes a date Python cannot hold as the NULL
    ``read_range`` reads: zero dates, zero months and days, year 0, a day past its month."""
    _write(["SET sql_mode = 'ALLOW_INVALID_DATES'",
            f"CREATE TABLE {database}.zeros (id INT PRIMARY KEY, d DATE, dt DATETIME(6), "
            "ts TIMESTAMP NULL)",
            f"INSERT INTO {database}.zeros VALUES (1, '0000-00-00', '0000-00-00 00:00:00', "
            "'0000-00-00 00:00:00'), (2, '2024-02-31', '2024-02-31 01:00:00.5', NULL), "
            "(3, '2024-00-10', '0000-01-01 00:00:00', NULL), (4, '0000-01-01', "
            "'2024-01-01 00:00:00.5', '2024-01-01 00:00:00'), (5, '2024-02-29', NULL, NULL)"])
    conn = mysql.connect(ConnectionConfig.from_url(with_query(MYSQL_ADMIN_URL,
                                                              zero_dates="null")))
    try:
        table = mysql.describe_table(conn, TableId(database, "zeros"))
        whole = SnapshotSplit(table.table, 0, None, None)
        rows = _read(mysql, conn, table, whole)
        assert sorted(rows)[:2] == [(1, None, None, None), (2, None, None, None)]
        assert check_checksums(mysql, conn, table, whole, rows)
    finally:
        conn.close()


def test_floats_times_json_spatial_and_wide_decimals_are_declined_without_a_read(
        mysql: Dialect, conn: Any) -> None:
    for column in (Column("x", L.FLOAT32, "float"), Column("x", L.FLOAT64, "double"),
                   Column("x", L.INTERVAL, "time(6)"), Column("x", L.JSON, "json"),
                   Column("x", L.BINARY, "point"), Column("x", L.DECIMAL, "numeric|numeric"),
                   Column("x", L.DECIMAL, "numeric|numeric(70,2)", True, 70, 2)):
        missing = TableSchema(TableId("no_such_database", "no_such_table"),
                              (Column("id", L.INT64, "bigint", False), column), ("id",))
        split = SnapshotSplit(missing.table, 0, None, None)
        assert mysql.checksum_range(conn, missing, split) is None, column  # no query
        assert mysql.row_hashes(conn, missing, split) is None, column


def _check_mirror(mysql: Dialect, conn: Any, source: TableSchema, table: TableId,
                  rows: list[Any], read_back: bool = True) -> None:
    """``source``'s schema as mirror ``table`` (``create_table``) holding ``rows``: its
    server hashes are the engine's of ``rows``, chunk by chunk and row by row, and (with
    ``read_back``) of the rows ``read_range`` reads back."""
    mirror = fill_mirror(mysql, conn, source, table, rows, f"ck {table}")
    for split in ranges(mirror, rows):
        inside = [r for r in rows if split.contains(mirror.key_of(r))]
        assert check_checksums(mysql, conn, mirror, split, inside)
        if read_back:
            assert check_checksums(mysql, conn, mirror, split,
                                   _read(mysql, conn, mirror, split))


def test_a_mysql_mirror_hashes_as_its_source(mysql: Dialect, conn: Any, database: str) -> None:
    source = _matrix(mysql, conn, database)
    rows = _read(mysql, conn, source, SnapshotSplit(source.table, 0, None, None))
    _check_mirror(mysql, conn, source, TableId(database, "matrix_mirror"), rows)


PG_COLUMNS = (
    Column("id", L.INT64, "int8|bigint", False), Column("b", L.BOOLEAN, "bool|boolean"),
    Column("i2", L.INT16, "int2|smallint"), Column("o", L.INT64, "oid|oid"),
    Column("n", L.DECIMAL, "numeric|numeric(12,2)", True, 12, 2),
    Column("wide", L.DECIMAL, "numeric|numeric(65,30)", True, 65, 30),
    Column("by", L.BINARY, "bytea|bytea"), Column("d", L.DATE, "date|date"),
    Column("t", L.TIME, "time|time without time zone"),
    Column("ts", L.TIMESTAMP, "timestamp|timestamp without time zone"),
    Column("tz", L.TIMESTAMP_TZ, "timestamptz|timestamp with time zone"),
    Column("s", L.STRING, "text|text", False), Column("bp", L.STRING, "bpchar|character(5)"),
    Column("u", L.STRING, "astext|uuid"), Column("arr", L.STRING, "astext|integer[]"))
"""A PostgreSQL table as the PostgreSQL dialect describes it (its key: ``s`` and ``id``)."""
PG_ROWS = [
    (1, True, -32768, 4294967295, Decimal("1.50"), Decimal("-0.5" + "0" * 29), b"\x00\xff",
     dt.date(2024, 1, 2), dt.time(12, 0, 0, 500000), dt.datetime(2024, 1, 2, 3, 4, 5),
     dt.datetime(2024, 3, 9, 21, 0, 0, 500000, tzinfo=UTC), "ünï 😀", "ab   ",
     "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "{1,NULL,3}"),
    (2, False, 32767, 0, Decimal("100.00"), Decimal("0E-30"), b"", dt.date(1, 1, 1),
     dt.time(0, 0), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
     dt.datetime(1, 1, 1, tzinfo=UTC), "", "     ", None, "{}"),
    (3, None, None, None, Decimal("-0.50"), None, None, None, dt.time(23, 59, 59, 999999),
     None, None, "B", None, None, None),
    (4, None, None, None, None, None, None, None, None, None, None, "a", None, None, None),
    (5, True, 0, 0, Decimal("0.00"), Decimal("1E-30"), b"\\N", dt.date(9999, 12, 31), None,
     dt.datetime(2000, 1, 1, 0, 0, 0, 1), None, "a", " x   ", None, None),
]
"""Values as the PostgreSQL dialect's ``read_range`` gives them."""


def test_a_mirror_of_a_postgres_table_hashes_as_its_source(mysql: Dialect, conn: Any,
                                                          database: str) -> None:
    source = TableSchema(TableId("public", "items"), PG_COLUMNS, ("s", "id"))
    # not read back: read_range gives a TIME(6) mirror column as a timedelta (hashed as its
    # text by the engine), not as the time it holds
    _check_mirror(mysql, conn, source, TableId(database, "from_postgres"), PG_ROWS, False)
