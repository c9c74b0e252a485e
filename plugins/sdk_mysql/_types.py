"""MySQL/MariaDB column types as logical types, and the one value each stored value reads as.

The snapshot reads rows with pymysql (``read_range``), the log decodes the binlog's storage
format (``_rows``): :func:`normalizer` brings pymysql's values to the values the binlog decoder
gives directly. Differences found on MariaDB 10.11
(``tests/dialects/mysql/test_mysql_dialect.py`` and ``tests/dialects/mysql/test_mysql_binlog.py``
pin each):

- FLOAT: the binlog holds the float32 value, SELECT text MariaDB rounds to 6 digits
  (3.40282e38 for 3.402823466e38): the snapshot selects ``col * 1e0`` (the value widened to a
  DOUBLE, exactly), and both become the float32 value.
- BINARY(n): the binlog strips the zero padding SELECT keeps: both padded bytes.
- SET: the binlog holds a bit mask, SELECT ``'a,b'``: both the text in definition order.
- BIT: the binlog holds big-endian bytes, as SELECT: both an int (a Decimal for BIT(64)).
- TIMESTAMP: the binlog holds seconds since the epoch, SELECT naive UTC (the session runs at
  ``+00:00``): both aware UTC instants.
- zero dates: SELECT gives the text, the decoder the parts: both a :class:`~sdk.BadValue` of the
  text SELECT gives (``'0000-00-00 00:00:00.000000'`` for DATETIME(6)), which the engine stops
  at or sets aside under ``errors.mode``; with the URL option ``zero_dates=null`` both None, as
  Debezium reads them. So do dates of year 0, with a zero month or day, or a day past the end
  of their month (``ALLOW_INVALID_DATES``), and a zero TIMESTAMP.
- spatial: both the internal format (4-byte SRID, then WKB): both the WKB.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from sdk import BadValue, Column, ConfigurationError, LogicalType
from sdk.dialect.temporal import Interval

L = LogicalType
ZERO_DATES = ("error", "null")
"""The choices of the source URL option ``zero_dates``: what a date Python cannot hold reads as."""
NOT_A_DATE = ("is not a date (MySQL's zero date, a zero year, month or day, or a day past the end "
              "of its month): add zero_dates=null to the source URL to read such dates as NULL")
"""The reason of the :class:`~sdk.BadValue` a date Python cannot hold reads as."""
_SPATIAL = {"geometry", "point", "linestring", "polygon", "multipoint", "multilinestring",
            "multipolygon", "geometrycollection"}
_TEXT = {"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "enum", "set"}
_BINARY = {"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob"}


def logical_column(name: str, data_type: str, column_type: str, nullable: bool,
                   precision: int | None, scale: int | None) -> Column:
    """A column from ``information_schema.COLUMNS``."""
    data_type = data_type.lower()
    unsigned = "unsigned" in column_type.lower()

    def col(logical: LogicalType, p: int | None = None, s: int | None = None) -> Column:
        return Column(name, logical, column_type, nullable, p, s)

    if data_type == "tinyint":
        return col(L.INT16 if unsigned else L.INT8)
    if data_type == "smallint":
        return col(L.INT32 if unsigned else L.INT16)
    if data_type == "mediumint":
        return col(L.INT32)
    if data_type in ("int", "integer"):
        return col(L.INT64 if unsigned else L.INT32)
    if data_type == "bigint":
        return col(L.DECIMAL, 20, 0) if unsigned else col(L.INT64)
    if data_type in ("decimal", "numeric"):
        return col(L.DECIMAL, precision, scale)
    if data_type == "float":
        return col(L.FLOAT32)
    if data_type in ("double", "real"):
        return col(L.FLOAT64)
    if data_type == "bit":
        bits = int(column_type[column_type.index("(") + 1:column_type.index(")")])
        return col(L.INT64) if bits < 64 else col(L.DECIMAL, 20, 0)
    if data_type == "year":
        return col(L.INT16)
    if data_type == "date":
        return col(L.DATE)
    if data_type == "time":
        return col(L.INTERVAL)
    if data_type == "datetime":
        return col(L.TIMESTAMP)
    if data_type == "timestamp":
        return col(L.TIMESTAMP_TZ)
    if data_type == "json":
        return col(L.JSON)
    if data_type in _BINARY or data_type in _SPATIAL:
        return col(L.BINARY)
    return col(L.STRING)


def select_term(column: Column, quoted: str) -> str:
    """How the snapshot selects ``column`` (quoted as ``quoted``): a FLOAT widened to DOUBLE,
    whose text keeps every bit (``* 1e0`` keeps -0 too), anything else as it is."""
    return f"{quoted} * 1e0" if column.type is L.FLOAT32 else quoted


def _float32(value: Any) -> Any:
    return struct.unpack("<f", struct.pack("<f", value))[0] if value is not None else None


def _bits(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return int.from_bytes(value, "big")
    return value


def zero_dates(options: Mapping[str, str]) -> str:
    """The ``zero_dates`` URL option, checked: ``error`` (the default) or ``null``."""
    choice = options.get("zero_dates", "error").lower()
    if choice not in ZERO_DATES:
        raise ConfigurationError(f"zero_dates={choice!r}: use one of {', '.join(ZERO_DATES)}")
    return choice


def not_a_date(text: str) -> BadValue:
    """The value a date Python cannot hold reads as under ``zero_dates=error``: its text as
    SELECT gives it."""
    return BadValue(text, NOT_A_DATE)


def _utc(value: Any) -> Any:
    if isinstance(value, str):
        return not_a_date(value)  # a zero TIMESTAMP as SELECT gives it
    if isinstance(value, dt.datetime):
        return value.replace(tzinfo=dt.UTC) if value.tzinfo is None \
            else value.astimezone(dt.UTC)
    return value


def _utc_or_none(value: Any) -> Any:
    return None if isinstance(value, str) else _utc(value)


def zero_date_none(value: Any) -> Any:
    """A zero date (the text SELECT gives for it) as None; any other value as it is."""
    return None if isinstance(value, str) else value


def zero_date_bad(value: Any) -> Any:
    """A zero date (the text SELECT gives for it) as a :class:`~sdk.BadValue` of that text; any
    other value as it is."""
    return not_a_date(value) if isinstance(value, str) else value


def zero_date(policy: str) -> Callable[[Any], Any]:
    """:func:`zero_date_bad` under ``zero_dates=error``, :func:`zero_date_none` under ``null``."""
    return zero_date_none if policy == "null" else zero_date_bad


def _wkb(value: Any) -> Any:
    return bytes(value[4:]) if isinstance(value, (bytes, bytearray)) else value


def _json_text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _binary(length: int) -> Callable[[Any], Any]:
    """Bytes, zero-padded to ``length`` (BINARY(n))."""
    def convert(value: Any) -> Any:
        if isinstance(value, (bytes, bytearray)):
            return bytes(value).ljust(length, b"\0")
        return value
    return convert


def _interval(value: Any) -> Any:
    """pymysql's timedelta of a TIME as the binlog's Interval: its hours (838:59:59 is not
    34 days 22:59:59)."""
    return Interval.of(value) if isinstance(value, dt.timedelta) else value


def _decimal(value: Any) -> Any:
    if value is None or isinstance(value, Decimal):
        return value
    return Decimal(_bits(value))


def normalizer(column: Column, policy: str = "error") -> Callable[[Any], Any] | None:
    """The function that brings pymysql's value of ``column`` to the one the binlog decoder
    gives, or None when they already agree; ``policy`` is the ``zero_dates`` option."""
    kind = column.source_type.lower()
    base = kind.split("(")[0].split(" ")[0]
    if column.type is L.FLOAT32:
        return _float32
    if base == "bit":
        return _decimal if column.type is L.DECIMAL else _bits
    if column.type is L.DECIMAL and base == "bigint":
        return _decimal
    if base == "binary":
        return _binary(int(kind[kind.index("(") + 1:kind.index(")")]))
    if base in _BINARY:
        return _binary(0)
    if column.type is L.TIMESTAMP_TZ:
        return _utc_or_none if policy == "null" else _utc
    if column.type in (L.DATE, L.TIMESTAMP):
        return zero_date(policy)
    if base in _SPATIAL:
        return _wkb
    if column.type is L.JSON:
        return _json_text
    if column.type is L.INTERVAL:
        return _interval
    return None
