"""The PostgreSQL dialect's server checksums (hooks ``checksum_range`` and ``row_hashes``): for a
column of every type the dialect maps, and for mirror tables ``create_table`` made from a
PostgreSQL and a MySQL table's schema, the server's hashes equal the engine's
(:mod:`sdk.dialect.checksum`) of the rows read back, per chunk and per row."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

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
from sdk.dialect.checksum import checksum_rows
from sdk.testing.kit import check_checksums, fill_mirror, ranges

pytestmark = pytest.mark.postgres
L = LogicalType
UTC = dt.UTC


@pytest.fixture
def pg() -> Dialect:
    return get_dialect("postgres")


@pytest.fixture
def schema(postgres_admin: Any) -> Iterator[str]:
    """A schema of this test's own, dropped with its tables afterwards."""
    name = f"sdk_ck_{uuid.uuid4().hex[:10]}"
    postgres_admin.execute(f"CREATE SCHEMA {name}")
    yield name
    postgres_admin.execute(f"DROP SCHEMA {name} CASCADE")


@pytest.fixture
def conn(pg: Dialect, postgres_admin_url: str) -> Iterator[Any]:
    """The dialect's connection as the administrator (who may create mirror tables)."""
    connection = pg.connect(ConnectionConfig.from_url(postgres_admin_url))
    yield connection
    connection.close()


COLUMNS = """id int8 PRIMARY KEY, b bool, i2 int2, i4 int4, i8 int8, o oid, n numeric,
    n2 numeric(12,2), wide numeric(70,35), by bytea, d date, t time, ts timestamp,
    ts0 timestamp(0), tz timestamptz, s text, vc varchar(10), bp char(5), nm name, u uuid,
    arr int4[], mood {schema}.mood"""
ROWS = [
    "1, true, -32768, -2147483648, -9223372036854775808, 0, 0, 0, 0, '\\x', "
    "'2024-01-02', '00:00', '2024-01-02 03:04:05', '2024-01-02 03:04:05', "
    "'2024-03-10 02:30:00+05:30', '', '', '', '', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', "
    "'{}', 'happy'",
    "2, false, 32767, 2147483647, 9223372036854775807, 4294967295, 1.50, 1.50, "
    "'12345678901234567890123456789012345.12345678901234567890123456789012345', "
    "'\\x00ff10', 'infinity', '24:00:00', '2024-02-29 23:59:59.999999', "
    "'1999-12-31 23:59:59', '2024-03-10 02:30:00.5-08:00', 'ünï 😀', 'x', 'ab', 'name', "
    "NULL, '{1,NULL,3}', 'sad'",
    "3, NULL, -1, -1, -1, NULL, 100.00, 100.00, '-0.00000000000000000000000000000000001', "
    "'\\x5c4e', '-infinity', '12:00:00.5', 'infinity', NULL, 'infinity', 'a\\N', "
    "'with space', 'abcde', NULL, NULL, NULL, NULL",
    "4, NULL, NULL, NULL, NULL, NULL, -0.5, -0.50, '1e-35', NULL, '0044-03-15 BC', "
    "'23:59:59.999999', '-infinity', NULL, '-infinity', 'tab\there', NULL, ' x', NULL, NULL, "
    "NULL, NULL",
    "5, NULL, NULL, NULL, NULL, NULL, 'NaN', 0.01, 0, NULL, '0001-01-01 BC', NULL, "
    "'0044-03-15 01:02:03.5 BC', NULL, '0001-01-01 00:00:00+00', NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL",
    "6, NULL, NULL, NULL, NULL, NULL, '1e-30', NULL, '123.450', NULL, '12345-06-07', NULL, "
    "'12345-06-07 08:09:10.123', NULL, '12345-06-07 08:09:10.5+01', NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL",
    "7, NULL, NULL, NULL, NULL, NULL, '1000000000000000000000000000000', NULL, NULL, NULL, "
    "'9999-12-31', NULL, '2000-01-01 00:00:00.000001', NULL, '1970-01-01 00:00:00+14', "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL",
    "8, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
    "NULL, NULL, NULL, NULL, NULL, NULL, NULL",
]


def _make(admin: Any, schema: str, name: str, columns: str, rows: list[str]) -> TableId:
    admin.execute(f"CREATE TABLE {schema}.{name} ({columns.format(schema=schema)})")
    for row in rows:
        admin.execute(f"INSERT INTO {schema}.{name} VALUES ({row})")
    return TableId(schema, name)


def _read(pg: Dialect, conn: Any, table: TableSchema, split: SnapshotSplit) -> list[Any]:
    return [tuple(r) for b in pg.read_range(conn, table, split, 3) for r in b]


INFINITIES = [f"{i}, NULL, NULL, NULL, NULL, NULL, '{text}'" + ", NULL" * 15
              for i, text in ((9, "Infinity"), (10, "-Infinity"))]
"""Numeric infinities (PostgreSQL 14+)."""


def _matrix(pg: Dialect, conn: Any, admin: Any, schema: str) -> TableSchema:
    """Table ``matrix`` of :data:`COLUMNS` holding :data:`ROWS`."""
    admin.execute(f"CREATE TYPE {schema}.mood AS ENUM ('sad', 'happy')")
    rows = ROWS + (INFINITIES if admin.info.server_version >= 140000 else [])
    return pg.describe_table(conn, _make(admin, schema, "matrix", COLUMNS, rows))


def test_every_mapped_type_hashes_in_the_server_as_the_engine_does(
        pg: Dialect, conn: Any, postgres_admin: Any, schema: str) -> None:
    table = _matrix(pg, conn, postgres_admin, schema)
    kinds = {c.source_type.split("|")[0] for c in table.columns}
    assert {"bool", "int2", "int4", "int8", "oid", "numeric", "bytea", "date", "time",
            "timestamp", "timestamptz", "text", "varchar", "bpchar", "name", "astext"} <= kinds
    whole = SnapshotSplit(table.table, 0, None, None)
    padded = {r[0]: r[17] for r in _read(pg, conn, table, whole)}
    assert padded[3] == "abcde" and padded[4] == " x   "  # bpchar keeps its padding
    for split in (whole, SnapshotSplit(table.table, 1, (2,), (6,)),
                  SnapshotSplit(table.table, 2, (4,), (4,)),
                  SnapshotSplit(table.table, 3, None, None, "n IS NOT NULL AND i2 < 0")):
        assert check_checksums(pg, conn, table, split, _read(pg, conn, table, split))
    assert pg.checksum_range(conn, table, SnapshotSplit(table.table, 4, (100,), None)) == \
        checksum_rows(table, [])


def test_a_float_interval_or_json_column_is_declined_without_a_read(pg: Dialect, conn: Any
                                                                      ) -> None:
    for kind in (L.FLOAT32, L.FLOAT64, L.INTERVAL, L.JSON):
        missing = TableSchema(TableId("no_such_schema", "no_such_table"),
                              (Column("id", L.INT64, "int8|bigint", False),
                               Column("x", kind, "astext|x")), ("id",))
        split = SnapshotSplit(missing.table, 0, None, None)
        assert pg.checksum_range(conn, missing, split) is None  # no query: no error
        assert pg.row_hashes(conn, missing, split) is None


def _check_mirror(pg: Dialect, conn: Any, source: TableSchema, table: TableId,
                  rows: list[Any]) -> None:
    """``source``'s schema as mirror ``table`` (``create_table``) holding ``rows``: its
    server hashes are the engine's of ``rows``, chunk by chunk and row by row, and of the
    rows it reads back."""
    mirror = fill_mirror(pg, conn, source, table, rows, f"ck {table}")
    for split in ranges(mirror, rows):
        inside = [r for r in rows if split.contains(mirror.key_of(r))]
        assert check_checksums(pg, conn, mirror, split, inside)
        assert check_checksums(pg, conn, mirror, split, _read(pg, conn, mirror, split))


def test_a_postgres_mirror_hashes_as_its_source(pg: Dialect, conn: Any, postgres_admin: Any,
                                                 schema: str) -> None:
    source = _matrix(pg, conn, postgres_admin, schema)
    rows = _read(pg, conn, source, SnapshotSplit(source.table, 0, None, None))
    _check_mirror(pg, conn, source, TableId(schema, "matrix_mirror"), rows)
    kinds = dict(postgres_admin.execute(
        "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
        f"'{schema}.matrix_mirror'::regclass AND attnum > 0").fetchall())
    assert kinds["bp"] == kinds["mood"] == "text"  # the mirror's types come from the logical


MYSQL_COLUMNS = (
    Column("id", L.INT64, "bigint", False), Column("ti", L.INT8, "tinyint"),
    Column("flag", L.INT8, "tinyint(1)"), Column("us", L.INT32, "smallint unsigned"),
    Column("ui", L.INT64, "int unsigned"), Column("bu", L.DECIMAL, "bigint unsigned", True, 20, 0),
    Column("b64", L.DECIMAL, "bit(64)", True, 20, 0), Column("b10", L.INT64, "bit(10)"),
    Column("yr", L.INT16, "year"), Column("dec", L.DECIMAL, "decimal(38,10)", True, 38, 10),
    Column("ch", L.STRING, "char(5) COLLATE utf8mb4_general_ci"),
    Column("en", L.STRING, "enum('a','b c') COLLATE utf8mb4_general_ci"),
    Column("st", L.STRING, "set('x','y') COLLATE utf8mb4_general_ci"),
    Column("d", L.DATE, "date"), Column("dt", L.TIMESTAMP, "datetime(6)"),
    Column("dt0", L.TIMESTAMP, "datetime"), Column("ts", L.TIMESTAMP_TZ, "timestamp(6)"),
    Column("bn", L.BINARY, "binary(4)"), Column("bl", L.BINARY, "blob"),
    Column("tx", L.STRING, "text COLLATE utf8mb4_general_ci"))
"""A MySQL table as the MySQL dialect describes it."""
MYSQL_ROWS = [
    (1, -128, 1, 65535, 4294967295, Decimal("18446744073709551615"),
     Decimal("18446744073709551615"), 1023, 2155,
     Decimal("-1234567890123456789012345678.5000000000"),
     "ab", "b c", "x,y", dt.date(1000, 1, 1), dt.datetime(2024, 2, 29, 23, 59, 59, 999999),
     dt.datetime(2024, 1, 1), dt.datetime(2038, 1, 19, 3, 14, 7, 1, tzinfo=UTC),
     b"\x01\x02\x00\x00", b"", "ünï 😀"),
    (2, 127, 0, 0, 0, Decimal("0"), Decimal("0"), 0, 0, Decimal("0E-10"), "", "a", "",
     dt.date(9999, 12, 31), dt.datetime(1000, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59),
     dt.datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC), b"\x00\x00\x00\x00", b"\x00\xff", ""),
    (3, None, None, None, None, None, None, None, 1901, Decimal("1.5000000000"), None, None,
     None, None, None, None, None, None, None, None),
    (4, 0, None, None, None, Decimal("1"), None, None, None, Decimal("100.0000000000"), " x",
     None, None, dt.date(2024, 2, 29), dt.datetime(2024, 1, 1, 0, 0, 0, 500000), None,
     dt.datetime(2024, 3, 9, 21, 0, tzinfo=UTC), None, None, "a\\N"),
    (5, None, None, None, None, None, None, None, None, Decimal("-0.5000000000"), None, None,
     None, None, None, None, None, None, None, None),
]
"""Values as the MySQL dialect's ``read_range`` gives them."""


def test_a_mirror_of_a_mysql_table_hashes_as_its_source(pg: Dialect, conn: Any,
                                                       schema: str) -> None:
    source = TableSchema(TableId("shop", "items"), MYSQL_COLUMNS, ("id",))
    _check_mirror(pg, conn, source, TableId(schema, "from_mysql"), MYSQL_ROWS)
