"""SQL Server types: the logical type of each column type, the text conversions that avoid
pymssql's lossy ones, and one value for the same data from ``read_range`` and ``stream_log``."""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import pytest
from helpers.sqlserver_fakes import (
    FakeColumn,
    FakeInstance,
    FakeServer,
    FakeTable,
    change,
    events,
    lsn,
    mark,
)

from sdk import LogicalType, SnapshotSplit, TableId
from sdk_sqlserver import _types, describe_table, read_range, stream_log

L = LogicalType


@pytest.mark.parametrize(("type_name", "size", "precision", "scale", "logical", "declared"), [
    ("bit", 1, 1, 0, L.BOOLEAN, "bit"),
    ("tinyint", 1, 3, 0, L.INT16, "tinyint"),
    ("smallint", 2, 5, 0, L.INT16, "smallint"),
    ("int", 4, 10, 0, L.INT32, "int"),
    ("bigint", 8, 19, 0, L.INT64, "bigint"),
    ("real", 4, 24, 0, L.FLOAT32, "real"),
    ("float", 8, 53, 0, L.FLOAT64, "float"),
    ("decimal", 17, 38, 10, L.DECIMAL, "decimal(38,10)"),
    ("numeric", 5, 9, 0, L.DECIMAL, "numeric(9,0)"),
    ("money", 8, 19, 4, L.DECIMAL, "money"),
    ("smallmoney", 4, 10, 4, L.DECIMAL, "smallmoney"),
    ("nvarchar", -1, 0, 0, L.STRING, "nvarchar(max)"),
    ("nvarchar", 80, 0, 0, L.STRING, "nvarchar(40)"),
    ("varchar", -1, 0, 0, L.STRING, "varchar(max)"),
    ("varbinary", -1, 0, 0, L.BINARY, "varbinary(max)"),
    ("uniqueidentifier", 16, 0, 0, L.STRING, "uniqueidentifier"),
    ("date", 3, 10, 0, L.DATE, "date"),
    ("time", 5, 16, 7, L.TIME, "time(7)"),
    ("datetime", 8, 23, 3, L.TIMESTAMP, "datetime"),
    ("datetime2", 8, 27, 7, L.TIMESTAMP, "datetime2(7)"),
    ("datetimeoffset", 10, 34, 7, L.TIMESTAMP_TZ, "datetimeoffset(7)"),
    ("xml", -1, 0, 0, L.STRING, "xml"),
    ("geography", -1, 0, 0, L.BINARY, "geography"),
    ("timestamp", 8, 0, 0, L.BINARY, "timestamp"),
])
def test_each_type_maps_to_a_logical_type_that_holds_it(
        type_name: str, size: int, precision: int, scale: int, logical: LogicalType,
        declared: str) -> None:
    column = _types.logical_column("c", type_name, size, precision, scale, True)
    assert column.type is logical
    assert column.source_type.endswith("|" + declared)
    if logical is L.DECIMAL:
        assert (column.precision, column.scale) == (
            (19, 4) if type_name == "money" else (10, 4) if type_name == "smallmoney"
            else (precision, scale))


def test_temporal_text_keeps_microseconds_and_truncates_the_100ns_digit() -> None:
    assert _types.parse_timestamp("2024-02-29 23:59:59.1234567") == \
        dt.datetime(2024, 2, 29, 23, 59, 59, 123456)
    # the largest DATETIME2 (pymssql #792 raises on it): truncation never overflows
    assert _types.parse_timestamp("9999-12-31 23:59:59.9999999") == dt.datetime.max
    assert _types.parse_timestamp("2024-01-01 00:00:00") == dt.datetime(2024, 1, 1)
    assert _types.parse_timestamp("2024-01-01 00:00:00.12") == dt.datetime(2024, 1, 1, 0, 0, 0,
                                                                           120000)
    assert _types.parse_time("23:59:59.9999999") == dt.time(23, 59, 59, 999999)


def test_exact_time_keeps_every_digit_as_text() -> None:
    column = _types.logical_column("t", "datetime2", 8, 27, 7, True, exact_time=True)
    assert column.type is L.STRING
    assert _types.converter(column)("2024-01-01 00:00:00.1234567") == \
        "2024-01-01 00:00:00.1234567"
    narrower = _types.logical_column("t", "datetime2", 8, 25, 5, True, exact_time=True)
    assert narrower.type is L.TIMESTAMP  # fits a datetime exactly: stays a timestamp


def every_type_server() -> FakeServer:
    """A table with one column of each awkward type, its row in the base table and the same
    row as an insert in the change table."""
    s = FakeServer(scan_end="000000ff:00000000:0001")
    columns = [
        FakeColumn("id", "int", nullable=False), FakeColumn("flag", "bit", 1),
        FakeColumn("d2", "datetime2", 8, 27, 7), FakeColumn("d2s3", "datetime2", 7, 23, 3),
        FakeColumn("legacy", "datetime", 8, 23, 3), FakeColumn("dto", "datetimeoffset", 10, 34, 7),
        FakeColumn("day", "date", 3), FakeColumn("clock", "time", 5, 16, 7),
        FakeColumn("guid", "uniqueidentifier", 16), FakeColumn("big", "decimal", 17, 38, 4),
        FakeColumn("cash", "money", 8, 19, 4), FakeColumn("text", "nvarchar", -1),
        FakeColumn("blob", "varbinary", -1), FakeColumn("doc", "xml", -1),
        FakeColumn("empty", "nvarchar", 20),
    ]
    table = s.table(FakeTable(TableId("dbo", "t"), columns, ["id"]))
    row = {"id": 1, "flag": True, "d2": "2024-05-06 07:08:09.1234567",
           "d2s3": "2024-05-06 07:08:09.1230000", "legacy": "2024-05-06 07:08:09.9970000",
           "dto": "2024-05-06 07:08:09.1234567 +02:00", "day": "2024-05-06",
           "clock": "07:08:09.9999999", "guid": uuid.UUID("6f9619ff-8b86-d011-b42d-00c04fc964ff"),
           "big": Decimal("12345678901234567890123456789012.3456"), "cash": Decimal("-12.3456"),
           "text": "é" * 10_000, "blob": b"\x00\xff" * 5000, "doc": "<a>1</a>", "empty": None}
    table.rows.append(row)
    instance = s.instance(FakeInstance("dbo_t", table.table, [c.name for c in columns],
                                       lsn(0x20, 1)))
    change(instance, lsn(0x21, 1), 1, 2, **row)
    s.max_lsns = [lsn(0x21, 1)]
    return s


def test_snapshot_and_log_give_the_same_values_for_every_type() -> None:
    s = every_type_server()
    conn = s.connect()
    table = describe_table(conn, TableId("dbo", "t"))
    (snapshot,) = [r for batch in read_range(conn, table, SnapshotSplit(table.table, 0, None,
                                                                       None), 100)
                   for r in batch]
    (event,) = events(stream_log(conn, [table], mark(lsn(0x21, 1)), mark(lsn(0x22, 1))))
    assert event.after == snapshot
    values = dict(zip(table.column_names, snapshot, strict=True))
    assert values["d2"] == dt.datetime(2024, 5, 6, 7, 8, 9, 123456)
    assert values["d2s3"] == dt.datetime(2024, 5, 6, 7, 8, 9, 123000)
    assert values["legacy"] == dt.datetime(2024, 5, 6, 7, 8, 9, 997000)
    assert values["dto"] == dt.datetime(2024, 5, 6, 5, 8, 9, 123456, tzinfo=dt.UTC)
    assert values["day"] == dt.date(2024, 5, 6)
    assert values["clock"] == dt.time(7, 8, 9, 999999)
    assert values["guid"] == "6F9619FF-8B86-D011-B42D-00C04FC964FF"
    assert values["big"] == Decimal("12345678901234567890123456789012.3456")
    assert values["cash"] == Decimal("-12.3456")
    assert values["flag"] is True and values["empty"] is None
    assert values["text"] == "é" * 10_000 and values["blob"] == b"\x00\xff" * 5000


def test_every_temporal_decimal_and_guid_column_is_converted_in_sql() -> None:
    s = every_type_server()
    conn = s.connect()
    table = describe_table(conn, TableId("dbo", "t"))
    by_name = {c.name: _types.select_expression(c) for c in table.columns}
    assert by_name["d2"] == "CONVERT(varchar(27), [d2], 121)"
    assert by_name["dto"] == ("CONVERT(varchar(27), CONVERT(datetime2(7), SWITCHOFFSET([dto], "
                              "'+00:00')), 121)")
    assert by_name["cash"] == "CONVERT(varchar(30), [cash], 2)"
    assert by_name["big"] == "CONVERT(varchar(50), [big])"
    assert by_name["id"] == "[id]" and by_name["text"] == "[text]"


def test_key_ranges_are_lexicographic_in_python_order() -> None:
    a = _types.logical_column("a", "nvarchar", 40, 0, 0, False)
    b = _types.logical_column("b", "datetime2", 8, 27, 7, False)
    where, args = _types.key_range([a, b], ("x", dt.datetime(2024, 1, 1, 0, 0, 0, 5)), None)
    assert where == ("(([a] COLLATE Latin1_General_BIN2 > %s) OR ([a] COLLATE "
                     "Latin1_General_BIN2 = %s AND [b] >= CONVERT(datetime2(7), %s, 121)))")
    assert args == ["x", "x", "2024-01-01 00:00:00.0000050"]
    where, args = _types.key_range([a], None, ("y",))
    assert (where, args) == ("(([a] COLLATE Latin1_General_BIN2 < %s))", ["y"])
    assert _types.key_range([a], None, None) == ("1 = 1", [])
    guid = _types.logical_column("g", "uniqueidentifier", 16, 0, 0, False)
    assert _types.key_sql(guid) == ("CONVERT(char(36), [g]) COLLATE Latin1_General_BIN2", "%s")
