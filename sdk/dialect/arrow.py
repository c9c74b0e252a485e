"""Dialect values as Arrow columns and back, Spark-free: the one value mapping the Spark
engine (:mod:`sdk.spark.executor.batches`) and the table-format targets
(:mod:`sdk.dialect.tableformat`) share.

Instants are UTC; decimals wider than 38 digits (or of unknown precision) are kept exactly as
strings; TIME is kept as its ISO text unless the format has a time type, an INTERVAL as its
ISO 8601 text (:meth:`sdk.dialect.temporal.Interval.isoformat`: Arrow's ``month_day_nano``
counts nanoseconds in 64 bits, ±2,562,047 hours, where PostgreSQL holds ±2,562,047,788, and
Spark takes no such column). Dates and timestamps
Python cannot hold (:class:`sdk.dialect.temporal.WideTemporal`: infinity, BC, years past 9999) go in
as the days or microseconds Arrow stores.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from .temporal import (
    DATE_DAYS,
    DATETIME_MICROS,
    Interval,
    WideTemporal,
    date_from_days,
    datetime_from_micros,
    time_from_text,
)
from .types import Column, LogicalType

MAX_DECIMAL = 38
"""The most digits an Arrow ``decimal128`` (and Spark, Delta, Iceberg) holds."""


def wide(column: Column) -> bool:
    """Whether a decimal column's values may not fit ``decimal128`` (kept as text)."""
    return column.precision is None or column.precision > MAX_DECIMAL


_ARROW: dict[LogicalType, pa.DataType] = {
    LogicalType.BOOLEAN: pa.bool_(), LogicalType.INT8: pa.int8(),
    LogicalType.INT16: pa.int16(), LogicalType.INT32: pa.int32(),
    LogicalType.INT64: pa.int64(), LogicalType.FLOAT32: pa.float32(),
    LogicalType.FLOAT64: pa.float64(), LogicalType.STRING: pa.string(),
    LogicalType.BINARY: pa.binary(), LogicalType.DATE: pa.date32(),
    LogicalType.TIME: pa.string(), LogicalType.TIMESTAMP: pa.timestamp("us"),
    LogicalType.TIMESTAMP_TZ: pa.timestamp("us", tz="UTC"),
    LogicalType.INTERVAL: pa.string(), LogicalType.JSON: pa.string(),
}


def arrow_type(column: Column) -> pa.DataType:
    """The Arrow type a column's values land in."""
    if column.type is LogicalType.DECIMAL:
        if wide(column):
            return pa.string()
        return pa.decimal128(column.precision or 10, column.scale or 0)
    return _ARROW[column.type]


def as_text(value: Any) -> Any:
    """A value kept as text: times, dates and intervals in ISO form, JSON compact, others
    ``str``."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, dt.timedelta):
        return Interval.of(value).isoformat()
    if isinstance(value, (dt.time, dt.date)):
        return value.isoformat()
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def utc(value: Any) -> Any:
    """An instant for a UTC timestamp column (a naive one is taken as UTC)."""
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    if isinstance(value, WideTemporal):
        return value.units
    return value


def units(value: Any) -> Any:
    """A WideTemporal as the days or microseconds Arrow stores (Arrow takes them mixed with
    dates and datetimes)."""
    return value.units if isinstance(value, WideTemporal) else value


def converter(column: Column, arrow: pa.DataType | None = None
              ) -> Callable[[Any], Any] | None:
    """A per-value conversion needed before Arrow takes a value of ``column`` as ``arrow``
    (default :func:`arrow_type`), or None."""
    arrow = arrow_type(column) if arrow is None else arrow
    if pa.types.is_string(arrow) and column.type is not LogicalType.STRING:
        return as_text
    if column.type is LogicalType.TIMESTAMP_TZ:
        return utc
    if column.type is LogicalType.BOOLEAN:
        return lambda v: None if v is None else bool(v)
    return None


def python_values(column: pa.Array | pa.ChunkedArray, logical: LogicalType) -> list[Any]:
    """An Arrow column as the values a dialect takes: dates and timestamps rebuilt from the
    days and microseconds Arrow or Spark store (those past Python's range come back as
    :class:`sdk.dialect.temporal.WideTemporal`), times from their text, intervals from their
    ISO 8601 text (or whole microseconds, or a duration), and the rest as Arrow gives them (a
    wide decimal as its text). Dates may come as days (``unix_date``) and timestamps as
    intervals from the epoch: both are read as the numbers they hold."""
    if logical is LogicalType.DATE:
        days = column.cast(pa.int32()).to_pylist()
        return [None if v is None else date_from_days(v) for v in days]
    if logical in (LogicalType.TIMESTAMP_TZ, LogicalType.TIMESTAMP):
        aware = logical is LogicalType.TIMESTAMP_TZ
        stamps = column.cast(pa.int64()).to_pylist()
        return [None if v is None else datetime_from_micros(v, aware=aware) for v in stamps]
    if logical is LogicalType.TIME and pa.types.is_string(column.type):
        return [None if v is None else time_from_text(v) for v in column.to_pylist()]
    if logical is LogicalType.INTERVAL:
        return [None if v is None else _interval(v) for v in column.to_pylist()]
    values: list[Any] = column.to_pylist()
    return values


def _interval(value: Any) -> Interval:
    """An interval as Arrow or Spark held it: ISO 8601 text, a duration or whole microseconds
    (a table an earlier release wrote)."""
    if isinstance(value, str):
        return Interval.parse(value)
    if isinstance(value, int):
        return Interval(0, 0, value)
    return Interval.of(value)


def python_units(column: pa.Array | pa.ChunkedArray, logical: LogicalType
                 ) -> pa.Array | pa.ChunkedArray | None:
    """A date column's days (int32) or a timestamp column's microseconds (int64), as Arrow or
    Spark store them, when every one lies in years 1-9999: what Python's date and datetime hold,
    so a target may write the column's text as Arrow gives it. None when a value lies outside
    (infinity, BC, past 9999), or the column is of another type or unit."""
    import pyarrow.compute as pc

    kind = column.type
    if logical is LogicalType.DATE and (pa.types.is_date32(kind) or pa.types.is_integer(kind)):
        units, (low, high) = column.cast(pa.int32()), DATE_DAYS
    elif logical in (LogicalType.TIMESTAMP, LogicalType.TIMESTAMP_TZ) and (
            (pa.types.is_timestamp(kind) and kind.unit == "us") or pa.types.is_integer(kind)):
        units, (low, high) = column.cast(pa.int64()), DATETIME_MICROS
    else:
        return None
    bounds = pc.min_max(units).as_py()
    if bounds["min"] is None or (bounds["min"] >= low and bounds["max"] <= high):
        return units
    return None


__all__ = ["MAX_DECIMAL", "arrow_type", "as_text", "converter", "python_units",
           "python_values", "units", "utc", "wide"]
