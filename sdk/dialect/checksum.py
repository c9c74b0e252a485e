"""The row checksum ``sdk verify`` compares a source with its mirror by.

A row's hash is the first 64 bits of the MD5 of its *canonical text*: each column's value
written as :func:`canonical_value` says for its logical type (``\\N`` for NULL), joined by
:data:`SEPARATOR`, in UTF-8. A chunk's checksum is its row count and the sum of its rows' hashes
modulo 2**64: order-free, so a server may add the hashes up in any order, and a dialect whose
server can write the canonical text computes it there (hooks ``checksum_range`` and
``row_hashes``), sending back two numbers a chunk instead of its rows. This module is what those
hooks must agree with, value for value: the engine hashes rows here when a dialect cannot (no
hooks, or a column type its server cannot write canonically), and the two sides of a comparison
need not hash the same way.

Two rows whose texts only differ by a value holding the separator or ``\\N`` itself could hash
alike; a difference hidden so is not reported (the same limit as pt-table-checksum's).
"""

from __future__ import annotations

import datetime as dt
import decimal
import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .temporal import Interval, WideTemporal
from .types import Key, LogicalType, Row, TableSchema

SEPARATOR = "\x1f"
"""Between two columns' texts (the ASCII unit separator)."""
NULL = "\\N"
"""The text of a NULL."""
MODULUS = 1 << 64


@dataclass(frozen=True, slots=True)
class Checksum:
    """The checksum of a set of rows: how many, and the sum of their hashes modulo 2**64."""

    rows: int = 0
    total: int = 0

    def __add__(self, other: Checksum) -> Checksum:
        return Checksum(self.rows + other.rows, (self.total + other.total) % MODULUS)

    @classmethod
    def of_sum(cls, rows: int, total: Any) -> Checksum:
        """From a server's count and sum of hashes (a sum of signed 64-bit hashes, or a
        decimal past 64 bits, is the same modulo 2**64); an empty chunk sums to NULL."""
        return cls(int(rows), int(total or 0) % MODULUS)


def _decimal(value: Any) -> str:
    number = value if isinstance(value, decimal.Decimal) else decimal.Decimal(str(value))
    if number.is_nan():
        return "NaN"
    if number.is_infinite():
        return "Infinity" if number > 0 else "-Infinity"
    text = format(number, "f")  # never an exponent; no rounding (normalize() would round)
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def _wide(value: WideTemporal) -> str:
    if value.infinite:
        return "infinity" if value.infinite > 0 else "-infinity"
    year, month, day, hour, minute, second, micro = value.fields()
    clock = f"{hour:02d}:{minute:02d}:{second:02d}.{micro:06d}"
    if value.type == "time":
        return clock
    if value.type == "date":
        return f"{year:04d}-{month:02d}-{day:02d}"
    return f"{year:04d}-{month:02d}-{day:02d} {clock}"


def _date(value: Any) -> str:
    if isinstance(value, WideTemporal):
        return _wide(value)
    return f"{value.year:04d}-{value.month:02d}-{value.day:02d}"


def _clock(value: dt.time | dt.datetime) -> str:
    return f"{value.hour:02d}:{value.minute:02d}:{value.second:02d}.{value.microsecond:06d}"


def _time(value: Any) -> str:
    if isinstance(value, WideTemporal):
        return _wide(value)
    if isinstance(value, (Interval, dt.timedelta)):  # a MySQL mirror's TIME column reads back so
        seconds, micro = divmod(Interval.of(value).micros, 1_000_000)
        return f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}.{micro:06d}"
    return _clock(value)


def _timestamp(value: Any) -> str:
    if isinstance(value, WideTemporal):
        return _wide(value)
    return f"{_date(value)} {_clock(value)}"


def _instant(value: Any) -> str:
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        value = value.astimezone(dt.UTC)
    return _timestamp(value)


def _interval(value: Any) -> str:
    if isinstance(value, (Interval, dt.timedelta)):
        value = Interval.of(value)
        return str(value.micros) if not (value.months or value.days) else value.isoformat()
    return str(value)


def _json(value: Any) -> str:
    document = json.loads(value) if isinstance(value, str | bytes) else value
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _binary(value: Any) -> str:
    return bytes(value).hex()


def _text(value: Any) -> str:
    return value if isinstance(value, str) else str(value)


_CANONICAL: dict[LogicalType, Callable[[Any], str]] = {
    LogicalType.BOOLEAN: lambda v: "1" if v else "0",
    LogicalType.INT8: lambda v: str(int(v)),
    LogicalType.INT16: lambda v: str(int(v)),
    LogicalType.INT32: lambda v: str(int(v)),
    LogicalType.INT64: lambda v: str(int(v)),
    LogicalType.FLOAT32: lambda v: repr(float(v)),
    LogicalType.FLOAT64: lambda v: repr(float(v)),
    LogicalType.DECIMAL: _decimal,
    LogicalType.STRING: _text,
    LogicalType.BINARY: _binary,
    LogicalType.DATE: _date,
    LogicalType.TIME: _time,
    LogicalType.TIMESTAMP: _timestamp,
    LogicalType.TIMESTAMP_TZ: _instant,
    LogicalType.INTERVAL: _interval,
    LogicalType.JSON: _json,
}
"""Per logical type, the canonical text of a value that is not None. What a server writes for
each:

- ``boolean``: ``1`` or ``0``; integers: decimal digits, ``-`` when negative;
- ``decimal``: plain digits (never an exponent), no trailing zeros after the point and no
  point when none is left (``1.50`` is ``1.5``, ``100.00`` is ``100``), ``0`` for any zero;
  ``NaN``, ``Infinity``, ``-Infinity``;
- ``string``: the text itself; ``binary``: lower-case hex;
- ``date``: ``YYYY-MM-DD``; ``time``: ``HH:MM:SS.ffffff``; ``timestamp``:
  ``YYYY-MM-DD HH:MM:SS.ffffff``; ``timestamp_tz``: the same in UTC; ``infinity`` and
  ``-infinity``;
- ``float32``/``float64`` (Python's ``repr`` of the float), ``interval`` (its microseconds
  when it has no months or days, else its ISO 8601 text) and ``json`` (keys sorted, no
  spaces): hashed by the engine; few servers write them so.
"""

IN_SERVER_TYPES = frozenset(_CANONICAL) - {LogicalType.FLOAT32, LogicalType.FLOAT64,
                                           LogicalType.INTERVAL, LogicalType.JSON}
"""The types a dialect's server is expected to write canonically; a table with a column of
another type is hashed by the engine (a dialect may still do more)."""


_UNFIT = (ValueError, TypeError, AttributeError, ArithmeticError)
"""What a canonical form raises for a value that is not of its column's type (SQLite keeps
any value in any column): such a value is written as its ``str``."""


def canonical_value(value: Any, logical: LogicalType) -> str:
    """The canonical text of one value of a column of type ``logical``."""
    if value is None:
        return NULL
    try:
        return _CANONICAL.get(logical, _text)(value)
    except _UNFIT:
        return _text(value)


def canonical_row(row: Row, types: Sequence[LogicalType]) -> str:
    """The canonical text of a row whose columns have ``types``."""
    try:
        return SEPARATOR.join([NULL if v is None else _CANONICAL.get(t, _text)(v)
                               for v, t in zip(row, types, strict=True)])
    except _UNFIT:  # a value not of its column's type: value by value
        return SEPARATOR.join([canonical_value(v, t) for v, t in zip(row, types, strict=True)])


def text_hash(text: str) -> int:
    """The 64-bit hash of a canonical text: the first 16 hex digits of its MD5."""
    return int(hashlib.md5(text.encode("utf-8", "surrogatepass"),
                           usedforsecurity=False).hexdigest()[:16], 16)


def row_hash(row: Row, types: Sequence[LogicalType]) -> int:
    """The hash of one row (:func:`canonical_row`, :func:`text_hash`)."""
    return text_hash(canonical_row(row, types))


def hash_rows(table: TableSchema, rows: Iterable[Row]) -> Iterable[tuple[Key, int]]:
    """Each row of ``table`` as its key and hash (what ``row_hashes`` yields)."""
    types = [c.type for c in table.columns]
    key_of = table.key_of
    for row in rows:
        yield key_of(row), row_hash(row, types)


def checksum_rows(table: TableSchema, rows: Iterable[Row]) -> Checksum:
    """The checksum of ``rows`` of ``table`` (what ``checksum_range`` returns)."""
    types = [c.type for c in table.columns]
    count = total = 0
    for row in rows:
        count += 1
        total += row_hash(row, types)
    return Checksum(count, total % MODULUS)


def in_server(table: TableSchema, types: Iterable[LogicalType] = IN_SERVER_TYPES) -> bool:
    """Whether every column of ``table`` has one of ``types`` (a dialect's hooks return None
    for a table that has another, and the engine hashes its rows)."""
    allowed = frozenset(types)
    return all(c.type in allowed for c in table.columns)
