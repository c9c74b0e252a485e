"""A table's columns and keys as the catalog has them: the dialect's ``describe_table``, and
what the log stream asks when a relation message changes a table's shape."""

from __future__ import annotations

from sdk import ConfigurationError, TableId, TableSchema

from ._connection import PgConnection
from ._types import logical_column


def describe(conn: PgConnection, table: TableId) -> TableSchema:
    """The table's columns and keys. Generated columns are left out: pgoutput never sends
    them (before PostgreSQL 18, and by default after), so the snapshot leaves them out too
    and the log's rows match it instead of looking like a dropped column."""
    # attgenerated: PostgreSQL 12+ ('' for a plain column, 's' stored, 'v' virtual)
    plain = " AND a.attgenerated = ''" if conn.raw.info.server_version >= 120000 else ""
    rows = conn.query(
        "SELECT a.attname, t.typname, t.typtype, format_type(a.atttypid, a.atttypmod), "
        "NOT a.attnotnull, a.atttypmod, bt.typname FROM pg_attribute a "
        "JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "JOIN pg_type t ON t.oid = a.atttypid LEFT JOIN pg_type bt ON bt.oid = t.typbasetype "
        "WHERE n.nspname = %s AND c.relname = %s AND a.attnum > 0 AND NOT a.attisdropped"
        f"{plain} ORDER BY a.attnum", (table.schema, table.name))
    if not rows:
        raise ConfigurationError(f"table {table} does not exist or is not readable")
    columns = tuple(logical_column(*row) for row in rows)
    indexes = conn.query(
        "SELECT i.indisprimary, array_agg(a.attname ORDER BY k.ord) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace "
        "CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum "
        "WHERE n.nspname = %s AND c.relname = %s AND i.indisunique AND i.indpred IS NULL "
        "GROUP BY i.indexrelid, i.indisprimary ORDER BY i.indexrelid",
        (table.schema, table.name))
    not_null = {c.name for c in columns if not c.nullable}
    primary = next((tuple(cols) for is_pk, cols in indexes if is_pk), ())
    unique = tuple(tuple(cols) for is_pk, cols in indexes
                   if not is_pk and set(cols) <= not_null)
    return TableSchema(table, columns, primary, unique)
