"""MySQL/MariaDB as a sync target: mirror tables kept with idempotent batches.

Instants (``timestamp_tz``) are stored as UTC in ``DATETIME(6)``, since ``TIMESTAMP`` ends in
2038; intervals in ``TIME(6)`` (up to 838 hours either way); decimals wider than MySQL's 65
digits, and text or binary key columns, in types MySQL can index.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sdk import Column, LogicalType, TableSchema
from sdk.apply import Ledger

L = LogicalType

_TYPES = {
    L.BOOLEAN: "TINYINT(1)", L.INT8: "TINYINT", L.INT16: "SMALLINT", L.INT32: "INT",
    L.INT64: "BIGINT", L.FLOAT32: "FLOAT", L.FLOAT64: "DOUBLE", L.STRING: "LONGTEXT",
    L.BINARY: "LONGBLOB", L.DATE: "DATE", L.TIME: "TIME(6)", L.TIMESTAMP: "DATETIME(6)",
    L.TIMESTAMP_TZ: "DATETIME(6)", L.INTERVAL: "TIME(6)", L.JSON: "JSON",
}


def target_type(column: Column, in_key: bool) -> str:
    if column.type is L.DECIMAL:
        p, s = column.precision, column.scale or 0
        if p is None or p > 65 or s > 30:
            return "VARCHAR(191)" if in_key else "LONGTEXT"
        return f"DECIMAL({p},{s})"
    if in_key and column.type in (L.STRING, L.JSON):
        return "VARCHAR(191) COLLATE utf8mb4_bin"
    if in_key and column.type is L.BINARY:
        return "VARBINARY(255)"
    return _TYPES[column.type]


def create_sql(table: TableSchema, quoted: str, q: Any) -> str:
    columns = ", ".join(f"{q(c.name)} {target_type(c, c.name in table.key)}"
                        for c in table.columns)
    return (f"CREATE TABLE IF NOT EXISTS {quoted} ({columns}, "
            f"PRIMARY KEY ({', '.join(q(k) for k in table.key)})) CHARSET utf8mb4")


def statements(table: TableSchema, quoted: str, q: Any) -> tuple[str, str]:
    delete = f"DELETE FROM {quoted} WHERE " + " AND ".join(f"{q(k)} = %s" for k in table.key)
    updates = ", ".join(f"{q(c)} = VALUES({q(c)})" for c in table.column_names)
    upsert = (f"INSERT INTO {quoted} VALUES ({', '.join(['%s'] * len(table.columns))}) "
              f"ON DUPLICATE KEY UPDATE {updates}")
    return delete, upsert


def value(v: Any) -> Any:
    """A Python value as pymysql should send it: instants as naive UTC."""
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.UTC).replace(tzinfo=None)
    return v


def ledger(schema: str) -> Ledger:
    """The applied-batch ledger of the mirror tables in ``schema`` (quoted): MySQL cannot key a
    TEXT column, and 191 utf8mb4 characters fit the 767-byte key of older InnoDB formats."""
    return Ledger(schema, "VARCHAR(191)", insert_ignore=True)
