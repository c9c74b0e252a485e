"""One type mapping: every logical type reaches Spark with the same value through the typed
output and through the envelope turned back into typed columns."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pytest
from helpers.spark import probe

from sdk import ChangeEvent, Column, LogicalType, Offset, TableId, TableSchema
from sdk.dialect.temporal import Interval
from sdk.spark import split_tables
from sdk.spark.executor.batches import TableBatcher, envelope_batch, envelope_schema, event_rows

pytestmark = pytest.mark.spark

L = LogicalType
TABLE = TableSchema(TableId("db", "all_types"), (
    Column("id", L.INT64, "bigint", False),
    Column("flag", L.BOOLEAN, "tinyint(1)"), Column("i8", L.INT8, "tinyint"),
    Column("i16", L.INT16, "smallint"), Column("i32", L.INT32, "int"),
    Column("f32", L.FLOAT32, "float"), Column("f64", L.FLOAT64, "double"),
    Column("dec", L.DECIMAL, "decimal(20,0)", True, 20, 0),
    Column("wide", L.DECIMAL, "decimal(65,30)", True, 65, 30),
    Column("txt", L.STRING, "text"), Column("bin", L.BINARY, "blob"),
    Column("day", L.DATE, "date"), Column("tod", L.TIME, "time(6)"),
    Column("wall", L.TIMESTAMP, "datetime(6)"), Column("instant", L.TIMESTAMP_TZ, "timestamp"),
    Column("span", L.INTERVAL, "interval"), Column("doc", L.JSON, "json"),
), ("id",))

ROWS = [
    (1, True, -128, -32768, -2**31, 1.5, 0.1 + 0.2, Decimal("18446744073709551615"),
     Decimal("-12345678901234567890123456789012345.123456789012345678901234567890"),
     "😀 ünï", b"\x00\xff", dt.date(1, 1, 1), dt.time(23, 59, 59, 999999),
     dt.datetime(2024, 2, 29, 12, 30, 0, 123456),
     dt.datetime(2024, 3, 1, 0, 0, tzinfo=dt.UTC), Interval(10, 3, -14_706_000_001),
     '{"a": [1, 2]}'),
    (2,) + (None,) * 16,
]


def test_typed_output_and_envelope_agree_on_every_type(spark: Any) -> None:
    batcher = TableBatcher(TABLE)
    events = [ChangeEvent(TABLE.table, "c", (r[0],), r, Offset("x", n=i), commit_ts=10**15)
              for i, r in enumerate(ROWS)]
    rows, ops, offsets, stamps = event_rows(batcher, events)
    typed = probe(spark, "typed_probe", [batcher.batch(rows, ops, offsets, stamps, 0, 3)],
                  batcher.spark_schema)
    envelope = probe(spark, "envelope_probe",
                     [envelope_batch({TABLE.table: TABLE}, events, 0, {TABLE.table: 3})],
                     envelope_schema()[0])
    back = split_tables(envelope, [TABLE])["db.all_types"]
    assert back.schema == typed.schema
    got_typed = sorted(typed.collect())
    assert got_typed == sorted(back.collect())
    first = got_typed[0].asDict()
    assert first["_schema_version"] == 3  # the schema version travels in both outputs
    assert first["dec"] == Decimal("18446744073709551615")
    assert first["wide"] == str(ROWS[0][8])  # wider than 38 digits: kept exactly as text
    assert first["instant"].astimezone(dt.UTC) == ROWS[0][14]
    # a month, a day and an hour kept apart: PostgreSQL's iso_8601 text of
    # '1 year -2 mons +3 days -04:05:06.000001'
    assert first["wall"] == ROWS[0][13] and first["span"] == "P10M3DT-4H-5M-6.000001S"
    assert first["tod"] == "23:59:59.999999" and first["bin"] == bytearray(b"\x00\xff")
    assert all(v is None for k, v in got_typed[1].asDict().items()
               if k not in ("id", "_op", "_offset", "_commit_ts", "_seq", "_schema_version"))


def test_key_moving_update_becomes_delete_then_insert(spark: Any) -> None:
    batcher = TableBatcher(TABLE)
    row = (5, *ROWS[1][1:])
    event = ChangeEvent(TABLE.table, "u", (5,), row, Offset("x", n=1), old_key=(4,))
    rows, ops, _, _ = event_rows(batcher, [event])
    assert ops == ["d", "u"] and rows[0][0] == 4 and rows[1][0] == 5
    envelope = probe(spark, "moving_probe", [envelope_batch({TABLE.table: TABLE}, [event], 0)],
                     envelope_schema()[0])
    back = split_tables(envelope, [TABLE])["db.all_types"].orderBy("_seq").collect()
    assert [(r._op, r.id) for r in back] == [("d", 4), ("u", 5)]


def test_staged_rows_come_back_as_the_values_they_were() -> None:
    """A chained task that replays a staged split applies what ``rows_of`` rebuilds from the
    stage: the same values, including those Python's datetime cannot hold."""
    from sdk.dialect.temporal import DATE, TIMESTAMP, WideTemporal

    batcher = TableBatcher(TABLE)
    wide_day = WideTemporal.infinity(DATE, -1)
    wide_wall = WideTemporal.of(TIMESTAMP, 12024, 5, 6, 7, 8, 9, 10)
    edge = (3,) + (None,) * 10 + (wide_day, None, wide_wall) + (None,) * 3
    rows = [*ROWS, edge]
    back = batcher.rows_of(pa.Table.from_batches([batcher.snapshot_batch(rows, "{}")]))
    assert back[1] == ROWS[1]
    first = list(back[0])
    assert first[8] == str(ROWS[0][8])  # wider than Spark's decimals: staged as exact text
    first[8] = ROWS[0][8]
    assert tuple(first) == ROWS[0]
    assert back[2][11] == wide_day and back[2][13] == wide_wall
