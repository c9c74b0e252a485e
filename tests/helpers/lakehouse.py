"""The table the Delta Lake / Iceberg target tests write, and the batch ids its commits record."""

from __future__ import annotations

from typing import Any

from sdk import (
    Column,
    Dialect,
    LogicalType,
    TableId,
    TableSchema,
)

TABLE = TableSchema(TableId("shop", "orders"), (
    Column("id", LogicalType.INT64, "bigint", False),
    Column("v", LogicalType.STRING, "varchar(20)"),
    Column("amount", LogicalType.DECIMAL, "decimal(12,2)", precision=12, scale=2),
    Column("at", LogicalType.TIMESTAMP_TZ, "timestamptz"),
    Column("n", LogicalType.INT16, "smallint"),
), ("id",))


def commits(dialect: Dialect, conn: Any, table: TableSchema = TABLE) -> list[str]:
    """The batch ids recorded by the table's commits, oldest first."""
    return [marks["sdk.batch"] for marks in commit_marks(dialect, conn, table)]


def commit_marks(dialect: Dialect, conn: Any, table: TableSchema = TABLE
                 ) -> list[dict[str, str]]:
    """What each commit of a batch records (``sdk.*`` properties), oldest first."""
    if dialect.name == "delta":
        from deltalake import DeltaTable

        history = DeltaTable(conn.table_uri(table)).history()
        return [{k: v for k, v in h.items() if k.startswith("sdk.")}
                for h in reversed(history) if "sdk.batch" in h]
    iceberg = conn.catalog.load_table(conn.identifier(table))
    return [{k: v for k, v in s.summary.additional_properties.items() if k.startswith("sdk.")}
            for s in iceberg.metadata.snapshots
            if s.summary is not None and "sdk.batch" in s.summary.additional_properties]
