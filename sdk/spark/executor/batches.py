"""One type mapping from dialect values to Arrow record batches and Spark schemas.

Snapshot rows and log rows go through the same functions, so the same stored value gives the
same Spark value in both phases. Instants are UTC; decimals wider than Spark's 38 digits (or of
unknown precision) are kept exactly as strings; TIME is kept as its ISO text, an INTERVAL as
its ISO 8601 text (months, days and microseconds each kept: Spark's interval types hold either
months or days and time, never both). Dates and
timestamps Python cannot hold (``sdk.dialect.temporal.WideTemporal``: infinity, BC, years past 9999)
go in as the days or microseconds Spark stores; a value no Spark type can take (a NaN in a
``DecimalType``) stops the read with an error naming its table, key and column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import types as T

from ...dialect.arrow import arrow_type, python_values
from ...dialect.arrow import converter as _converter
from ...dialect.arrow import units as _units
from ...dialect.arrow import wide as _wide
from ...dialect.codec import dumps, encode_value
from ...dialect.errors import FatalSyncError
from ...dialect.types import ChangeEvent, Column, LogicalType, TableSchema

#: Metadata columns added after a table's own columns.
META_COLUMNS = (
    ("_op", T.StringType(), pa.string()),
    ("_offset", T.StringType(), pa.string()),
    ("_commit_ts", T.TimestampType(), pa.timestamp("us", tz="UTC")),
    ("_seq", T.LongType(), pa.int64()),
    ("_schema_version", T.IntegerType(), pa.int32()),
)

#: The envelope that carries changes of several tables in one stream.
ENVELOPE_COLUMNS = (
    ("table", T.StringType(), pa.string()),
    ("op", T.StringType(), pa.string()),
    ("key", T.StringType(), pa.string()),
    ("before", T.StringType(), pa.string()),
    ("after", T.StringType(), pa.string()),
    ("offset", T.StringType(), pa.string()),
    ("commit_ts", T.TimestampType(), pa.timestamp("us", tz="UTC")),
    ("seq", T.LongType(), pa.int64()),
    ("schema_version", T.IntegerType(), pa.int32()),
)

REPORT_ARROW = pa.schema([("table", pa.string()), ("applied", pa.int64()),
                          ("committed", pa.float64()), ("skipped", pa.int64())])
REPORT_SPARK = T.StructType([T.StructField("table", T.StringType()),
                             T.StructField("applied", T.LongType()),
                             T.StructField("committed", T.DoubleType()),
                             T.StructField("skipped", T.LongType())])
"""Arrow and Spark schemas of a task's report (:data:`sdk.job.target.REPORT_SCHEMA`)."""


def spark_type(column: Column) -> T.DataType:
    """The Spark type a column's values land in."""
    logical = column.type
    if logical is LogicalType.DECIMAL:
        if _wide(column):
            return T.StringType()
        return T.DecimalType(column.precision or 10, column.scale or 0)
    return _SPARK[logical]


_SPARK: dict[LogicalType, T.DataType] = {
    LogicalType.BOOLEAN: T.BooleanType(), LogicalType.INT8: T.ByteType(),
    LogicalType.INT16: T.ShortType(), LogicalType.INT32: T.IntegerType(),
    LogicalType.INT64: T.LongType(), LogicalType.FLOAT32: T.FloatType(),
    LogicalType.FLOAT64: T.DoubleType(), LogicalType.STRING: T.StringType(),
    LogicalType.BINARY: T.BinaryType(), LogicalType.DATE: T.DateType(),
    LogicalType.TIME: T.StringType(), LogicalType.TIMESTAMP: T.TimestampNTZType(),
    LogicalType.TIMESTAMP_TZ: T.TimestampType(),
    LogicalType.INTERVAL: T.StringType(), LogicalType.JSON: T.StringType(),
}

def table_schema(table: TableSchema) -> tuple[T.StructType, pa.Schema]:
    """Spark and Arrow schemas of one table's typed output: its columns, then the metadata."""
    fields = [(c.name, spark_type(c), arrow_type(c), c.nullable) for c in table.columns]
    fields += [(name, st, at, True) for name, st, at in META_COLUMNS]
    return (T.StructType([T.StructField(n, st, True) for n, st, _, _ in fields]),
            pa.schema([pa.field(n, at, True) for n, _, at, _ in fields]))


def envelope_schema() -> tuple[T.StructType, pa.Schema]:
    """Spark and Arrow schemas of the multi-table envelope."""
    return (T.StructType([T.StructField(n, st, True) for n, st, _ in ENVELOPE_COLUMNS]),
            pa.schema([pa.field(n, at, True) for n, _, at in ENVELOPE_COLUMNS]))


class TableBatcher:
    """Turns one table's rows and events into Arrow batches of its typed output schema."""

    def __init__(self, table: TableSchema) -> None:
        self.table = table
        self.spark_schema, self.arrow_schema = table_schema(table)
        self._converters = [_converter(c) for c in table.columns]
        self._width = len(table.columns)

    def batch(self, rows: Sequence[Sequence[Any] | None], ops: Sequence[str],
              offsets: Sequence[str], commit_ts: Sequence[int | None], first_seq: int,
              version: int = 1) -> pa.RecordBatch:
        """A record batch: ``rows`` (None for a key-only delete) with their metadata;
        ``version``: the table's schema version the rows were read at."""
        n = len(rows)
        meta = [pa.array(ops, type=pa.string()), pa.array(offsets, type=pa.string()),
                pa.array(commit_ts, type=pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                pa.array(range(first_seq, first_seq + n), type=pa.int64()),
                pa.repeat(pa.scalar(version, pa.int32()), n)]
        return self._assemble(rows, meta, complete=False)

    def _assemble(self, rows: Sequence[Sequence[Any] | None], meta: list[pa.Array],
                  complete: bool) -> pa.RecordBatch:
        """Columns from rows; ``complete`` says no row is None (skips a scan)."""
        if rows and (complete or all(r is not None for r in rows)):
            transposed: list[Sequence[Any]] = list(zip(*rows, strict=True))
        else:
            transposed = [[None if r is None else r[i] for r in rows]
                          for i in range(self._width)]
        columns = []
        for index, (values, convert, field) in enumerate(zip(
                transposed, self._converters, self.arrow_schema, strict=False)):
            if convert is not None:
                values = [convert(v) for v in values]
            try:
                columns.append(pa.array(values, type=field.type))
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                columns.append(self._column(index, values, rows))
        if not rows:
            columns = [pa.array([], type=f.type) for f in list(self.arrow_schema)[:self._width]]
        return pa.RecordBatch.from_arrays(columns + meta, schema=self.arrow_schema)

    def _column(self, index: int, values: Sequence[Any],
                rows: Sequence[Sequence[Any] | None]) -> pa.Array:
        """Column ``index`` when Arrow refused it: WideTemporal values as their units, else
        an error naming the first value no Spark type of the column can take."""
        field = self.arrow_schema.field(index)
        values = [_units(v) for v in values]
        try:
            return pa.array(values, type=field.type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            pass
        column = self.table.columns[index]
        for j, value in enumerate(values):
            try:
                pa.array([value], type=field.type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                row = rows[j]
                key = "?" if row is None else repr(self.table.key_of(tuple(row)))
                raise FatalSyncError(
                    f"{self.table.table} key {key} column {column.name!r} "
                    f"({column.source_type}): the value {value!r} does not fit Spark's "
                    f"{spark_type(column).simpleString()} ({exc}). Fix the value at the "
                    "source, or change the column to a type the sync carries exactly (a "
                    "PostgreSQL NaN needs an unconstrained numeric, which goes as text)"
                    ) from None
        raise AssertionError("unreachable: the column failed but no value does")

    def snapshot_batch(self, rows: Sequence[Sequence[Any]], watermark: str, version: int = 1
                       ) -> pa.RecordBatch:
        """Snapshot rows: op ``r``, all at the split's watermark, ``_seq`` 0 (their keys are
        distinct, so their order does not matter)."""
        return self._assemble(rows, _snapshot_meta(len(rows), watermark, version),
                              complete=True)

    def columns_batches(self, columns: pa.Table, watermark: str, version: int = 1
                        ) -> list[pa.RecordBatch]:
        """Snapshot rows read as Arrow (a dialect's ``read_range_arrow``: the table's columns
        in order) as :meth:`snapshot_batch` gives them, without a Python value per cell."""
        meta = _snapshot_meta(columns.num_rows, watermark, version)
        own = [column.combine_chunks().cast(field.type) for column, field in
               zip(columns.columns, self.arrow_schema, strict=False)]
        if len(own) != self._width:
            raise ValueError(f"{self.table.table}: read_range_arrow gave {len(own)} columns, "
                             f"the table has {self._width}")
        return [pa.RecordBatch.from_arrays(own + meta, schema=self.arrow_schema)]

    def rows_of(self, table: pa.Table) -> list[tuple[Any, ...]]:
        """The rows of batches made here (a staged split), back as Python values (see
        :func:`python_values`)."""
        columns = [python_values(field, column.type)
                   for column, field in zip(self.table.columns, table.columns, strict=False)]
        return list(zip(*columns, strict=True)) if columns else []

    def key_only(self, key: Sequence[Any]) -> tuple[Any, ...]:
        """A row with only the key columns set, for a delete whose log has no before image."""
        return self.table.key_row(tuple(key))


def _snapshot_meta(n: int, watermark: str, version: int) -> list[pa.Array]:
    """The metadata columns of ``n`` snapshot rows (see :meth:`TableBatcher.snapshot_batch`)."""
    return [pa.repeat(pa.scalar("r"), n), pa.repeat(pa.scalar(watermark), n),
            pa.nulls(n, pa.timestamp("us", tz="UTC")), pa.repeat(pa.scalar(0), n),
            pa.repeat(pa.scalar(version, pa.int32()), n)]


def event_rows(batcher: TableBatcher, events: Sequence[ChangeEvent]
               ) -> tuple[list[Any], list[str], list[str], list[int | None]]:
    """Columns for the events of one table, a key-moving update as a delete of the old key
    followed by the update, so a sink applying rows in order stays right."""
    rows: list[Any] = []
    ops: list[str] = []
    offsets: list[str] = []
    stamps: list[int | None] = []
    for e in events:
        offset = e.offset.json_text()
        if e.old_key is not None:
            rows.append(e.before if e.before is not None else batcher.key_only(e.old_key))
            ops.append("d")
            offsets.append(offset)
            stamps.append(e.commit_ts)
        if e.op == "d":
            rows.append(e.before if e.before is not None else batcher.key_only(e.key))
        else:
            rows.append(e.after)
        ops.append(e.op)
        offsets.append(offset)
        stamps.append(e.commit_ts)
    return rows, ops, offsets, stamps


def _image(table: TableSchema, row: Sequence[Any] | None) -> str | None:
    if row is None:
        return None
    return dumps({c: encode_value(v) for c, v in zip(table.column_names, row, strict=True)})


def envelope_batch(tables: Mapping[Any, TableSchema], events: Sequence[ChangeEvent],
                   first_seq: int, versions: Mapping[Any, int] | None = None
                   ) -> pa.RecordBatch:
    """Events of any tables as envelope rows; images are JSON objects of column -> value
    (values as :func:`sdk.dialect.codec.encode_value` writes them); ``versions``: each table's
    schema version (absent: 1)."""
    cols: dict[str, list[Any]] = {n: [] for n, _, _ in ENVELOPE_COLUMNS}
    versions = versions or {}
    for e in events:
        table = tables[e.table]
        version = versions.get(e.table, 1)
        parts: list[tuple[str, Any, Any, Any]] = []
        if e.old_key is not None:
            parts.append(("d", e.old_key, e.before, None))
            parts.append(("c" if e.op == "r" else e.op, e.key, None, e.after))
        else:
            parts.append((e.op, e.key, e.before, e.after))
        for op, key, before, after in parts:
            cols["table"].append(str(e.table))
            cols["op"].append(op)
            cols["key"].append(dumps([encode_value(v) for v in key]))
            if op == "d" and before is None:  # no before image: the key columns alone
                cols["before"].append(dumps({c: encode_value(v) for c, v in
                                             zip(table.key, key, strict=True)}))
                cols["after"].append(None)
                cols["offset"].append(e.offset.json_text())
                cols["commit_ts"].append(e.commit_ts)
                cols["schema_version"].append(version)
                continue
            cols["before"].append(_image(table, before))
            cols["after"].append(_image(table, after))
            cols["offset"].append(e.offset.json_text())
            cols["commit_ts"].append(e.commit_ts)
            cols["schema_version"].append(version)
    n = len(cols["op"])
    cols["seq"] = list(range(first_seq, first_seq + n))
    _, schema = envelope_schema()
    arrays = [pa.array(cols[f.name], type=pa.int64()).cast(f.type) if f.name == "commit_ts"
              else pa.array(cols[f.name], type=f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


__all__ = ["TableBatcher", "envelope_batch", "envelope_schema", "event_rows",
           "python_values", "table_schema"]
