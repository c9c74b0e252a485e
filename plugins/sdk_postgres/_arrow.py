"""Snapshot splits read straight into Arrow (``read_range_arrow``).

On the row path a split's numerics, dates and timestamps become Python ``Decimal``, ``date``
and ``datetime`` objects (psycopg's C loaders, the timestamps through the Python wrapper that
catches values Python cannot hold), and Arrow then takes them apart again: 2.18 s of client
CPU for 1M rows of benchmarks/e2e_sync.py's six columns. Here those columns are loaded as the
server's text (psycopg's C text loader, on this cursor only) and cast by Arrow a column at a
time; integers, floats, booleans, text and bytea keep their C loaders, whose Python values
Arrow takes as the row path gives them: 1.07 s.

A value Arrow's cast refuses (``infinity``, a BC date, a year past 9999, a NaN numeric) sends
the split back to ``read_range``, which reads it as before. Columns carried as text
(``astext``), times, intervals and numerics wider than ``decimal128`` are left to it too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sdk import Column, LogicalType, TableSchema
from sdk.dialect.arrow import arrow_type

from ._types import kind_of

if TYPE_CHECKING:
    import pyarrow as pa

L = LogicalType
_AS_LOADED = {"bool", "int2", "int4", "int8", "oid", "float4", "float8", "bytea", "text",
              "varchar", "bpchar", "name"}
"""Kinds whose psycopg value Arrow converts exactly as the row path does (no converter)."""
_AS_TEXT = {"numeric", "date", "timestamp", "timestamptz"}
"""Kinds loaded as the server's text (``DateStyle=ISO``, ``TimeZone=UTC``) and cast by Arrow."""


def readable(column: Column) -> bool:
    """Whether this path reads the column as the row path does."""
    kind = kind_of(column)
    if kind == "numeric":
        import pyarrow as pa

        return bool(pa.types.is_decimal128(arrow_type(column)))
    return kind in _AS_LOADED or kind in _AS_TEXT


def read_split(raw: Any, table: TableSchema, sql: str, args: list[Any]) -> pa.Table | None:
    """Run ``sql`` (the split's SELECT of ``table``'s columns, ``args`` its parameters) on
    psycopg connection ``raw`` and return its rows as Arrow, or None when a value does not
    cast as the row path reads it."""
    import pyarrow as pa
    from psycopg.types.string import TextLoader

    with raw.cursor() as cur:
        for kind in {kind_of(c) for c in table.columns} & _AS_TEXT:
            cur.adapters.register_loader(kind, TextLoader)
        cur.execute(sql, args)
        rows = cur.fetchall()
    values: list[Any] = list(zip(*rows, strict=True)) if rows else [()] * len(table.columns)
    del rows
    columns = []
    try:
        for column, column_values in zip(table.columns, values, strict=True):
            kind = arrow_type(column)
            if kind_of(column) in _AS_TEXT:
                columns.append(pa.array(column_values, pa.string()).cast(kind))
            else:
                columns.append(pa.array(column_values, kind))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, TypeError, ValueError,
            OverflowError):
        return None
    return pa.Table.from_arrays(columns, names=list(table.column_names))
