"""PostgreSQL as a target writes ``COPY`` in binary form from Arrow (sdk_postgres/_binary.py)
when every column allows: the rows land as the row-by-row statements write them, for the edge
values of each type; a table whose columns have other types than the sync creates, or a column
the binary form does not write, keeps the text form."""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest

from sdk import (
    ChangeEvent,
    Column,
    LogicalType,
    Offset,
    TableId,
    TableSchema,
    get_dialect,
)
from sdk.dialect.tableformat import arrow_rows
from sdk_postgres import _binary
from sdk_postgres import _target as pg_apply

pytestmark = pytest.mark.postgres

L = LogicalType
OFFSET = Offset("test")
EAST = dt.timezone(dt.timedelta(hours=5, minutes=30))

COLUMNS = (
    Column("id", L.INT64, "bigint"), Column("i1", L.INT8, "tinyint"),
    Column("i2", L.INT16, "smallint"), Column("i4", L.INT32, "int"),
    Column("ok", L.BOOLEAN, "bool"), Column("f8", L.FLOAT64, "float8"),
    Column("n2", L.DECIMAL, "numeric(12,2)", precision=12, scale=2),
    Column("n0", L.DECIMAL, "numeric(18,0)", precision=18, scale=0),
    Column("n5", L.DECIMAL, "numeric(5,5)", precision=5, scale=5),
    Column("n16", L.DECIMAL, "numeric(18,16)", precision=18, scale=16),
    Column("s", L.STRING, "text"), Column("b", L.BINARY, "bytea"), Column("d", L.DATE, "date"),
    Column("ts", L.TIMESTAMP, "timestamp"), Column("tz", L.TIMESTAMP_TZ, "timestamptz"))
ROWS: list[tuple[Any, ...]] = [
    (-128, -2**15, -2**31, True, -0.0, Decimal("-9999999999.99"), Decimal(-(10**18 - 1)),
     Decimal("-0.00001"), Decimal("-0.0000000000000001"), "", b"",
     dt.date(1, 1, 1), dt.datetime(1, 1, 1), dt.datetime(1, 1, 1, tzinfo=dt.UTC)),
    (127, 2**15 - 1, 2**31 - 1, False, 1.7976931348623157e308, Decimal("9999999999.99"),
     Decimal(10**18 - 1), Decimal("0.99999"), Decimal("99.9999999999999999"),
     "ünïcødé 'q' \"dq\" back\\slash \\N tab\tcr\rlf\n", b"\x00\xff\\\t",
     dt.date(9999, 12, 31), dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
     dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC)),
    (0, 0, 0, True, math.nan, Decimal("0.00"), Decimal(0), Decimal("0.00000"),
     Decimal("0E-16"), "x" * 10_000, b"\x01" * 3000, dt.date(1969, 12, 31),
     dt.datetime(1969, 12, 31, 23, 59, 59, 999999),
     dt.datetime(1999, 12, 31, 23, 59, 59, 999999, tzinfo=EAST)),
    (1, -1, 10_000, False, -math.inf, Decimal("-0.05"), Decimal(10_000), Decimal("0.5"),
     Decimal("-1.0000000000000001"), "a", b"b", dt.date(2000, 1, 1),
     dt.datetime(2000, 1, 1), dt.datetime(2000, 1, 1, tzinfo=dt.UTC)),
    (2, 3, 12_345_678, True, 5e-324, Decimal("10000.01"), Decimal(-10_000), Decimal("0.0001"),
     Decimal("0.0001"), "日本語", b"\x80", dt.date(2024, 2, 29),
     dt.datetime(2024, 2, 29, 12, 30, 45, 123456),
     dt.datetime(2024, 2, 29, 12, 30, 45, 123456, tzinfo=EAST)),
    (None,) * 14,
]


@pytest.fixture
def made(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Each binary ``COPY`` made: True, or False where it left the table to the text form."""
    out: list[bool] = []
    real = pg_apply.copy_binary

    def counted(rows: Any, columns: Any) -> bytes | None:
        data = real(rows, columns)
        out.append(data is not None)
        return data

    monkeypatch.setattr(pg_apply, "copy_binary", counted)
    return out


def as_text(conn: Any, table: TableSchema) -> list[Any]:
    names = ", ".join(f'"{c.name}"::text' for c in table.columns)
    return list(conn.query(f'SELECT {names} FROM {table.table.schema}."{table.table.name}" '
                           "ORDER BY id"))


def values() -> list[tuple[Any, ...]]:
    return [(i, *row) for i, row in enumerate(ROWS)]


def test_snapshot_splits_and_staged_batches_copied_in_binary_land_as_rows_do(
        pg_target: Any, made: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    conn, schema = pg_target
    pg = get_dialect("postgres")
    texts = {}
    for how in ("rows", "load", "staged"):
        table = TableSchema(TableId(schema, how), COLUMNS, ("id",))
        pg.create_table(conn, table)
        made.clear()
        monkeypatch.setattr(pg_apply, "BULK_ROWS", 10**9 if how == "rows" else 0)
        if how == "load":
            assert pg.load_snapshot(conn, table, arrow_rows(table, values()), "s/0")
            assert not pg.load_snapshot(conn, table, arrow_rows(table, values()), "s/0")
        else:
            assert pg.apply_changes(conn, table, [ChangeEvent(table.table, "u", (r[0],), r,
                                                              OFFSET) for r in values()], "1-0")
        assert made == ([] if how == "rows" else [True])
        texts[how] = as_text(conn, table)
    assert texts["load"] == texts["rows"] == texts["staged"]
    assert tuple(texts["rows"][1][7:9]) == ("999999999999999999", "0.99999")
    assert texts["rows"][2][14] == "1999-12-31 18:29:59.999999+00"  # the instant, in UTC


def test_a_split_over_rows_there_is_merged_through_a_binary_staging_table(
        pg_target: Any, made: list[bool]) -> None:
    conn, schema = pg_target
    pg = get_dialect("postgres")
    table = TableSchema(TableId(schema, "merged"), COLUMNS, ("id",))
    pg.create_table(conn, table)
    first = values()
    assert pg.load_snapshot(conn, table, arrow_rows(table, first[:3]), "s/0")
    again = [(r[0], *ROWS[(r[0] + 1) % len(ROWS)]) for r in first]  # keys 0-2 there already
    assert pg.load_snapshot(conn, table, arrow_rows(table, again), "s/1")
    assert made == [True, True]
    expected = TableSchema(TableId(schema, "expected"), COLUMNS, ("id",))
    pg.create_table(conn, expected)
    pg.apply_changes(conn, expected, [ChangeEvent(expected.table, "u", (r[0],), r, OFFSET)
                                      for r in again], "1-0")
    assert as_text(conn, table) == as_text(conn, expected)


def test_a_target_table_typed_otherwise_is_loaded_as_text(pg_target: Any,
                                                          made: list[bool]) -> None:
    """A table made by the user with the sync's column names and wider types: a binary
    ``int4`` read as ``int8`` is refused, as ``text`` it would be taken as other characters."""
    conn, schema = pg_target
    pg = get_dialect("postgres")
    table = TableSchema(TableId(schema, "theirs"), COLUMNS[:4], ("id",))
    conn.query(f"CREATE TABLE {schema}.theirs (id bigint PRIMARY KEY, i1 integer, i2 text, "
               "i4 bigint)")
    pg.create_table(conn, table)  # its ledger; the table stays as it is
    rows = [(i, 1, 2, 3 + i) for i in range(5)]
    assert pg.load_snapshot(conn, table, arrow_rows(table, rows), "s/0")
    assert made == []  # the catalog said no before any binary was made
    assert as_text(conn, table) == [tuple(str(v) for v in r) for r in rows]


def test_columns_and_values_the_binary_form_does_not_write_are_left_to_text() -> None:
    real = Column("r", L.FLOAT32, "real")
    wide = Column("w", L.DECIMAL, "numeric(30,2)", precision=30, scale=2)
    fine = Column("n", L.DECIMAL, "numeric(18,17)", precision=18, scale=17)
    key = Column("id", L.INT64, "bigint")
    assert _binary.binary_types([key]) and not _binary.binary_types([key, real])
    assert not _binary.binary_types([key, wide])
    table = TableSchema(TableId("s", "t"), (key, fine), ("id",))
    assert _binary.copy_binary(arrow_rows(table, [(1, Decimal("0.1"))]), table.columns) is None
    table = TableSchema(TableId("s", "t"), (key, Column("d", L.DATE, "date")), ("id",))
    assert _binary.copy_binary(arrow_rows(table, [(1, dt.date(2024, 1, 1))]), table.columns)


def test_the_stream_has_the_header_a_row_and_the_trailer() -> None:
    table = TableSchema(TableId("s", "t"), (Column("id", L.INT64, "bigint"),
                                            Column("s", L.STRING, "text")), ("id",))
    data = _binary.copy_binary(arrow_rows(table, [(1, "ab"), (2, None)]), table.columns)
    assert data == (b"PGCOPY\n\xff\r\n\x00" + bytes(8)
                    + b"\x00\x02" + b"\x00\x00\x00\x08" + (1).to_bytes(8, "big")
                    + b"\x00\x00\x00\x02ab"
                    + b"\x00\x02" + b"\x00\x00\x00\x08" + (2).to_bytes(8, "big")
                    + b"\xff\xff\xff\xff"
                    + b"\xff\xff")


def test_a_table_of_sliced_chunks_is_written_as_the_same_rows_whole() -> None:
    table = TableSchema(TableId("s", "t"), COLUMNS, ("id",))
    whole = arrow_rows(table, values())
    pieces = whole.slice(1, 2).to_batches() + whole.slice(3).to_batches()
    chunked = pa.Table.from_batches(pieces)
    assert _binary.copy_binary(chunked, COLUMNS) == \
        _binary.copy_binary(whole.slice(1).combine_chunks(), COLUMNS)
    empty = _binary.copy_binary(whole.slice(0, 0), COLUMNS)
    assert empty == b"PGCOPY\n\xff\r\n\x00" + bytes(8) + b"\xff\xff"
