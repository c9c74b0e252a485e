"""Row checksums computed in the server (hooks ``checksum_range`` and ``row_hashes``).

Each column becomes a SQL expression of its canonical text (:mod:`sdk.dialect.checksum`),
NULL for a NULL; a row's text is those joined by ``CONCAT_WS`` with the separator, ``\\N``
standing for a NULL, in utf8mb4, and its hash the first 16 hex digits of the text's MD5 as a
``BIGINT UNSIGNED``. The expression is chosen by the column's logical type, so it holds for a
source table and for a mirror table that ``create_table`` made from another database's
schema (:func:`._target.target_type`); a source type is looked at only where MySQL's text of
the value differs from the one ``read_range`` gives (BIT and YEAR are added to 0: a BIT's text
is its bytes, a zero YEAR's ``0000``), which on a mirror's integer column changes nothing.

Declined (None): floats, MySQL TIME (an interval), JSON, decimals a mirror stores as text
(wider than DECIMAL(65,30)), and spatial columns (a source stores an SRID before the WKB that
``read_range`` gives, a mirror only the WKB: their texts cannot be told apart). Expressions
are written for statements with parameters (pymysql formats them: a ``%`` is doubled).
"""

from __future__ import annotations

from collections.abc import Callable

from sdk import Column, LogicalType, TableSchema
from sdk.dialect.checksum import IN_SERVER_TYPES

from ._target import target_type
from ._types import _SPATIAL as SPATIAL

L = LogicalType
SEPARATOR = "_utf8mb4 X'1F'"
NULL_TEXT = "_utf8mb4 X'5C4E'"
"""``\\N``, whether or not the session has ``NO_BACKSLASH_ESCAPES``."""
_INTEGERS = frozenset({L.INT8, L.INT16, L.INT32, L.INT64})
_ADDED_TO_ZERO = frozenset({"bit", "year"})
_CLOCK = "%%H:%%i:%%s.%%f"


def _base(column: Column) -> str:
    """The source type's name, lower case, without its length or attributes."""
    return column.source_type.lower().split("(")[0].split(" ")[0]


def _valid(ref: str, zero_dates: str) -> str:
    """A date or time column as it is, or (``zero_dates=null``) NULL where ``read_range``
    reads NULL: a date Python cannot hold, which ``DATE_ADD`` makes NULL too (a zero year,
    month or day, a day past the end of its month)."""
    return f"DATE_ADD({ref}, INTERVAL 0 DAY)" if zero_dates == "null" else ref


def _decimal(column: Column, ref: str) -> str | None:
    """Plain digits without trailing zeros after the point; None for a decimal a mirror
    keeps as text."""
    if not target_type(column, False).startswith("DECIMAL"):
        return None
    if _base(column) == "bit":  # BIT(64)
        return f"({ref} + 0)"
    if not column.scale:
        return ref
    return f"TRIM(TRAILING '.' FROM TRIM(TRAILING '0' FROM {ref}))"


_SIMPLE: dict[LogicalType, Callable[[str], str]] = {
    L.BOOLEAN: lambda ref: f"({ref} <> 0)",
    L.STRING: lambda ref: f"CONVERT({ref} USING utf8mb4)",
    L.BINARY: lambda ref: f"LOWER(HEX({ref}))",
    L.TIME: lambda ref: f"TIME_FORMAT({ref}, '{_CLOCK}')",
}


def column_text(column: Column, ref: str, zero_dates: str = "error") -> str | None:
    """The canonical text of ``column`` (named ``ref`` in SQL) as an expression, NULL for a
    NULL; None for a type the server does not write canonically."""
    kind = column.type
    if kind not in IN_SERVER_TYPES or _base(column) in SPATIAL:
        return None
    if kind in _INTEGERS:
        return f"({ref} + 0)" if _base(column) in _ADDED_TO_ZERO else ref
    if kind is L.DECIMAL:
        return _decimal(column, ref)
    if kind is L.DATE:
        return _valid(ref, zero_dates)
    if kind in (L.TIMESTAMP, L.TIMESTAMP_TZ):  # the session's time zone is UTC
        return f"DATE_FORMAT({_valid(ref, zero_dates)}, '%%Y-%%m-%%d {_CLOCK}')"
    simple = _SIMPLE.get(kind)
    return simple(ref) if simple is not None else None


def row_hash(table: TableSchema, quote: Callable[[str], str], zero_dates: str = "error"
             ) -> str | None:
    """The expression of a row's unsigned 64-bit hash; None when a column's text cannot be
    written in the server."""
    texts = [column_text(c, quote(c.name), zero_dates) for c in table.columns]
    if None in texts:
        return None
    row = f"CONCAT_WS({SEPARATOR}, {', '.join(f'COALESCE({t}, {NULL_TEXT})' for t in texts)})"
    return f"CAST(CONV(LEFT(MD5({row}), 16), 16, 10) AS UNSIGNED)"
