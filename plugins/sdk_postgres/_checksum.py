"""Row checksums computed in the server (hooks ``checksum_range`` and ``row_hashes``).

Each column becomes a SQL expression of its canonical text (:mod:`sdk.dialect.checksum`),
NULL for a NULL; a row's text is those joined by ``chr(31)``, ``\\N`` standing for a NULL, and
its hash the first 16 hex digits of the text's MD5 as a ``bigint``. The expression is chosen
by the column's logical type, so it holds for a source table and for a mirror table that
``create_table`` made from another database's schema (whose columns have the types
:func:`._target.target_type` gives); a source type is looked at only where PostgreSQL's
text differs from the value ``read_range`` gives (``bpchar``, whose cast to text drops the
padding, and the types carried as text, which it reads as their output function writes them).

Dates and timestamps take a fast path for years 1-9999 (the ``DateStyle=ISO`` text the
dialect's sessions have, fraction padded to six digits: about half the cost of ``to_char``)
and a slow one for infinity, BC (written as Python writes an astronomical year: ``-043``)
and later years.
"""

from __future__ import annotations

from collections.abc import Callable

from sdk import Column, LogicalType, TableSchema
from sdk.dialect.checksum import IN_SERVER_TYPES

from ._types import kind_of, output_text

L = LogicalType
NULL_TEXT = "E'\\\\N'"
"""``\\N``, whatever ``standard_conforming_strings`` says."""
MAX_ARGUMENTS = 90
"""Arguments of one ``concat_ws`` at most (PostgreSQL's functions take 100)."""
_INTEGERS = frozenset({L.INT8, L.INT16, L.INT32, L.INT64})


def _astronomical_year(ref: str) -> str:
    """The year of a BC date or timestamp ``ref`` as Python's ``f"{year:04d}"`` writes its
    astronomical number (1 BC is ``0000``, 44 BC is ``-043``)."""
    year = f"(extract(year FROM {ref}) + 1)"
    return (f"CASE WHEN {year} = 0 THEN '0000' WHEN {year} > -1000 THEN "
            f"to_char({year}, 'FM000') ELSE {year}::text END")


def _date(ref: str) -> str:
    """``YYYY-MM-DD`` (later years with more digits), ``infinity``, ``-infinity``."""
    return (f"CASE WHEN {ref} >= DATE '0001-01-01' THEN {ref}::text "
            f"WHEN isfinite({ref}) THEN {_astronomical_year(ref)} || to_char({ref}, '-MM-DD') "
            f"ELSE {ref}::text END")


def _timestamp(ref: str) -> str:
    """``YYYY-MM-DD HH:MM:SS.ffffff`` of a ``timestamp`` expression: PostgreSQL's text, which
    leaves out trailing zeros of the fraction, padded to six digits."""
    fast = f"{ref}::text || substr('.000000', length({ref}::text) - 18)"
    return (f"CASE WHEN {ref} >= TIMESTAMP '0001-01-01' AND {ref} < TIMESTAMP '10000-01-01' "
            f"THEN {fast} WHEN NOT isfinite({ref}) THEN {ref}::text "
            f"WHEN {ref} >= TIMESTAMP '0001-01-01' THEN to_char({ref}, 'YYYY-MM-DD HH24:MI:SS.US') "
            f"ELSE {_astronomical_year(ref)} || to_char({ref}, '-MM-DD HH24:MI:SS.US') END")


def _time(ref: str) -> str:
    """``HH:MM:SS.ffffff`` (``24:00:00.000000`` too)."""
    return f"{ref}::text || substr('.000000', length({ref}::text) - 7)"


def _string(column: Column, ref: str) -> str:
    """The text ``read_range`` gives: its output function's (:func:`._types.output_text`) for
    a ``bpchar``, which keeps its padding, and for a type carried as text (an ``inet`` host
    without its ``/32``); ``text`` and ``varchar`` are cast."""
    if kind_of(column) in ("text", "varchar"):
        return f"{ref}::text"
    return output_text(ref)


def _decimal(ref: str, trim_scale: bool) -> str:
    """Without trailing zeros (``trim_scale``, PostgreSQL 13+; a pattern before)."""
    if trim_scale:
        return f"trim_scale({ref})::text"
    return f"regexp_replace({ref}::text, '(\\.[0-9]*[1-9])0+$|\\.0+$', '\\1')"


_SIMPLE: dict[LogicalType, Callable[[str], str]] = {
    L.BOOLEAN: lambda ref: f"{ref}::int::text",
    L.BINARY: lambda ref: f"encode({ref}, 'hex')",
    L.DATE: _date,
    L.TIME: _time,
    L.TIMESTAMP: _timestamp,
    L.TIMESTAMP_TZ: lambda ref: _timestamp(f"({ref} AT TIME ZONE 'UTC')"),
}


def column_text(column: Column, ref: str, trim_scale: bool = True) -> str | None:
    """The canonical text of ``column`` (named ``ref`` in SQL) as an expression, NULL for a
    NULL; None for a type the server does not write canonically."""
    kind = column.type
    if kind not in IN_SERVER_TYPES:
        return None
    if kind in _INTEGERS:
        return f"{ref}::text"
    if kind is L.DECIMAL:
        return _decimal(ref, trim_scale)
    if kind is L.STRING:
        return _string(column, ref)
    simple = _SIMPLE.get(kind)
    return simple(ref) if simple is not None else None


def row_hash(table: TableSchema, quote: Callable[[str], str], trim_scale: bool = True,
             utf8: bool = True) -> str | None:
    """The expression of a row's signed 64-bit hash; None when a column's text cannot be
    written in the server. ``utf8``: the database's encoding is UTF-8 (else the text is
    converted before it is hashed)."""
    texts = [column_text(c, quote(c.name), trim_scale) for c in table.columns]
    if None in texts:
        return None
    parts = [f"coalesce({text}, {NULL_TEXT})" for text in texts]
    while len(parts) > MAX_ARGUMENTS:  # no part is NULL, so nested joins join the same
        parts = [f"concat_ws(chr(31), {', '.join(parts[i:i + MAX_ARGUMENTS])})"
                 for i in range(0, len(parts), MAX_ARGUMENTS)]
    row = f"concat_ws(chr(31), {', '.join(parts)})"
    digest = f"md5({row})" if utf8 else f"md5(convert_to({row}, 'UTF8'))"
    return f"('x' || left({digest}, 16))::bit(64)::bigint"
