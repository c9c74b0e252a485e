"""PostgreSQL as a sync target: mirror tables kept with idempotent batches."""

from __future__ import annotations

from typing import Any

from sdk import Column, LogicalType, TableSchema
from sdk.apply import Ledger

L = LogicalType

_TYPES = {
    L.BOOLEAN: "boolean", L.INT8: "smallint", L.INT16: "smallint", L.INT32: "integer",
    L.INT64: "bigint", L.FLOAT32: "real", L.FLOAT64: "double precision", L.STRING: "text",
    L.BINARY: "bytea", L.DATE: "date", L.TIME: "time", L.TIMESTAMP: "timestamp",
    L.TIMESTAMP_TZ: "timestamptz", L.INTERVAL: "interval", L.JSON: "json",
}


def target_type(column: Column) -> str:
    """The PostgreSQL type that holds every value of ``column`` exactly."""
    if column.type is L.DECIMAL:
        if column.precision is None or column.precision > 1000:
            return "numeric"
        return f"numeric({column.precision},{column.scale or 0})"
    return _TYPES[column.type]


def create_sql(table: TableSchema, quoted: str, q: Any) -> str:
    columns = ", ".join(f"{q(c.name)} {target_type(c)}" for c in table.columns)
    return (f"CREATE TABLE IF NOT EXISTS {quoted} ({columns}, "
            f"PRIMARY KEY ({', '.join(q(k) for k in table.key)}))")


def statements(table: TableSchema, quoted: str, q: Any) -> tuple[str, str]:
    """The DELETE by key and the upsert, each value cast to its column's type."""
    casts = {c.name: target_type(c) for c in table.columns}
    delete = f"DELETE FROM {quoted} WHERE " + " AND ".join(
        f"{q(k)} = %s::{casts[k]}" for k in table.key)
    values = ", ".join(f"%s::{casts[c]}" for c in table.column_names)
    updates = ", ".join(f"{q(c)} = EXCLUDED.{q(c)}" for c in table.column_names
                        if c not in table.key) or f"{q(table.key[0])} = EXCLUDED.{q(table.key[0])}"
    upsert = (f"INSERT INTO {quoted} VALUES ({values}) ON CONFLICT "
              f"({', '.join(q(k) for k in table.key)}) DO UPDATE SET {updates}")
    return delete, upsert


def ledger(schema: str) -> Ledger:
    """The applied-batch ledger of the mirror tables in ``schema`` (quoted)."""
    return Ledger(schema, "text")
