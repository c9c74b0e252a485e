"""PostgreSQL column types as logical types.

A column's ``source_type`` is ``"<kind>|<format_type>"``: ``kind`` is the type name when
psycopg's loader gives the value the engine wants (numbers, bytea, dates and times, text), and
``astext`` for every other type (uuid, json, jsonb, arrays, enums, domains, network and
geometric types...), which both the snapshot (``col::text``) and the log carry as the server's
text, so the two paths always agree.
"""

from __future__ import annotations

from sdk import Column, LogicalType

L = LogicalType
TEXT_TYPES = {"astext"}

_LOADED = {
    "bool": L.BOOLEAN, "int2": L.INT16, "int4": L.INT32, "int8": L.INT64, "oid": L.INT64,
    "float4": L.FLOAT32, "float8": L.FLOAT64, "numeric": L.DECIMAL, "bytea": L.BINARY,
    "date": L.DATE, "time": L.TIME, "timestamp": L.TIMESTAMP, "timestamptz": L.TIMESTAMP_TZ,
    "interval": L.INTERVAL, "text": L.STRING, "varchar": L.STRING, "bpchar": L.STRING,
    "name": L.STRING,
}
_JSON = {"json", "jsonb"}


def kind_of(column: Column) -> str:
    """The ``kind`` part of a column's source type."""
    return column.source_type.split("|", 1)[0]


def logical_column(name: str, typname: str, typtype: str, formatted: str, nullable: bool,
                   typmod: int, base: str | None) -> Column:
    """A column from ``pg_attribute`` joined with ``pg_type``."""
    if typtype == "b" and typname in _LOADED:
        logical = _LOADED[typname]
        precision = scale = None
        if typname == "numeric" and typmod >= 4:
            precision, scale = ((typmod - 4) >> 16) & 0xFFFF, (typmod - 4) & 0xFFFF
        return Column(name, logical, f"{typname}|{formatted}", nullable, precision, scale)
    logical = L.JSON if typname in _JSON else L.STRING
    return Column(name, logical, f"astext|{formatted}", nullable)
