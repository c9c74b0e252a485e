"""The hooks every DB-API database answers the same way, as a base class for dialects.

Discovery from ``information_schema``, key ends, split boundaries by index seeks and keyset
``read_range`` differ between SQL databases only in quoting, parameter markers, how a key range
is spelled and the column types: a dialect subclasses :class:`SqlDialect`, says those, and writes
what is its own (``dialect_info``, ``connect``, the four fetch tasks of its log, ``column``)::

    class MyDialect(SqlDialect):
        def dialect_info(self) -> DialectInfo: ...
        def connect(self, config: ConnectionConfig) -> Any: ...
        def column(self, name, data_type, nullable, precision, scale) -> Column: ...
        def current_offset(self, conn) -> Offset: ...
        def stream_log(self, conn, tables, start, end): ...
        def compare_offset(self, a, b) -> int: ...

    dialect = MyDialect()  # the object the ``sdk.dialects`` entry point names

Methods named after a hook (sdk/dialect/hookspecs.py) are hook implementations, whether or not the
subclass marks them with ``@hookimpl``: overriding one never drops it. The dialect's connection
object is handed to :meth:`SqlDialect.dbapi` to find the DB-API connection inside it (by
default it is one). ``examples/sdk-pgtrigger`` is a complete dialect written this way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

from .errors import ConfigurationError
from .hookspecs import CONTRACT, hookimpl
from .sql import lexicographic_range, row_range, with_condition
from .types import Column, Key, Row, SnapshotSplit, TableId, TableSchema, TableStats


class SqlDialect:
    """Discovery, key ends, split boundaries and keyset reads over a DB-API connection."""

    mark: ClassVar[str] = "%s"
    """The driver's parameter marker: ``%s`` (format, pyformat) or ``?`` (qmark)."""

    row_values: ClassVar[bool] = True
    """Key ranges as row-value comparisons ``(a, b) >= (%s, %s)``; False spells them out
    (``a > %s OR (a = %s AND b >= %s)``) for servers that use no index for row values."""

    system_schemas: ClassVar[tuple[str, ...]] = (
        "information_schema", "pg_catalog", "pg_toast", "mysql", "performance_schema", "sys")
    """Schemas ``list_tables`` leaves out."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in vars(cls).items():
            if name in CONTRACT and callable(value) and not hasattr(value, "sdk_impl"):
                setattr(cls, name, hookimpl(value))

    # --- what a subclass says -------------------------------------------------------------------

    def column(self, name: str, data_type: str, nullable: bool, precision: int | None,
               scale: int | None) -> Column:
        """The column of an ``information_schema.columns`` row (``data_type`` as the server
        spells it there): its logical type. Required."""
        raise NotImplementedError(f"{type(self).__name__}.column maps the database's types")

    def dbapi(self, conn: Any) -> Any:
        """The DB-API connection inside the dialect's connection object."""
        return conn

    def quote(self, name: str) -> str:
        """An identifier quoted for the database (SQL's double quotes by default)."""
        return '"' + name.replace('"', '""') + '"'

    def qualified(self, table: TableId) -> str:
        return f"{self.quote(table.schema)}.{self.quote(table.name)}"

    def key_term(self, table: TableSchema, name: str) -> str:
        """Key column ``name`` as it is compared and ordered: add a collation here when the
        database's order of text differs from Python's (``COLLATE "C"`` on PostgreSQL)."""
        return self.quote(name)

    def estimate_rows(self, conn: Any, table: TableSchema) -> int:
        """The catalogue's estimate of the table's rows; 0 (unknown: splits are cut by index
        seeks) unless overridden, since an exact count would read the whole table."""
        return 0

    # --- the hooks --------------------------------------------------------------------------------

    def query(self, conn: Any, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of one statement on the dialect's connection."""
        cursor = self.dbapi(conn).cursor()
        try:
            cursor.execute(sql, tuple(args))
            return [tuple(r) for r in cursor.fetchall()]
        finally:
            cursor.close()

    @hookimpl
    def list_tables(self, conn: Any) -> list[TableId]:
        skip = ", ".join([self.mark] * len(self.system_schemas))
        return [TableId(s, t) for s, t in self.query(
            conn, "SELECT table_schema, table_name FROM information_schema.tables WHERE "
            f"table_type = 'BASE TABLE' AND table_schema NOT IN ({skip}) ORDER BY 1, 2",
            self.system_schemas)]

    @hookimpl
    def describe_table(self, conn: Any, table: TableId) -> TableSchema:
        m = self.mark
        rows = self.query(
            conn, "SELECT column_name, data_type, is_nullable, numeric_precision, "
            "numeric_scale FROM information_schema.columns WHERE table_schema = "
            f"{m} AND table_name = {m} ORDER BY ordinal_position", (table.schema, table.name))
        if not rows:
            raise ConfigurationError(f"table {table} does not exist or is not readable")
        columns = tuple(self.column(name, kind, nullable == "YES", p, s)
                        for name, kind, nullable, p, s in rows)
        keys: dict[tuple[str, str], list[str]] = {}
        for constraint, kind, name in self.query(
                conn, "SELECT c.constraint_name, c.constraint_type, k.column_name FROM "
                "information_schema.table_constraints c JOIN "
                "information_schema.key_column_usage k ON k.constraint_schema = "
                "c.constraint_schema AND k.constraint_name = c.constraint_name AND "
                "k.table_schema = c.table_schema AND k.table_name = c.table_name WHERE "
                f"c.table_schema = {m} AND c.table_name = {m} AND c.constraint_type IN "
                "('PRIMARY KEY', 'UNIQUE') ORDER BY c.constraint_name, k.ordinal_position",
                (table.schema, table.name)):
            keys.setdefault((kind, constraint), []).append(name)
        not_null = {c.name for c in columns if not c.nullable}
        primary = next((tuple(c) for (kind, _), c in keys.items() if kind == "PRIMARY KEY"), ())
        unique = tuple(tuple(c) for (kind, _), c in keys.items()
                       if kind == "UNIQUE" and set(c) <= not_null)
        return TableSchema(table, columns, primary, unique)

    def _range(self, table: TableSchema, start: Key | None, end: Key | None
               ) -> tuple[str, list[Any]]:
        terms = [self.key_term(table, k) for k in table.key]
        spell = row_range if self.row_values else lexicographic_range
        return spell(terms, start, end, self.mark, "1 = 1")

    def _order(self, table: TableSchema, descending: bool = False) -> str:
        suffix = " DESC" if descending else ""
        return ", ".join(self.key_term(table, k) + suffix for k in table.key)

    @hookimpl
    def table_stats(self, conn: Any, table: TableSchema) -> TableStats:
        names = ", ".join(map(self.quote, table.key))
        ends = [self.query(conn, f"SELECT {names} FROM {self.qualified(table.table)} "
                                 f"ORDER BY {self._order(table, descending)} LIMIT 1")
                for descending in (False, True)]
        first, last = (tuple(rows[0]) if rows else None for rows in ends)
        return TableStats(first, last, self.estimate_rows(conn, table))

    @hookimpl
    def next_boundary(self, conn: Any, table: TableSchema, start: Key | None, size: int
                      ) -> Key | None:
        where, args = self._range(table, start, None)
        rows = self.query(
            conn, f"SELECT {', '.join(map(self.quote, table.key))} FROM "
            f"{self.qualified(table.table)} WHERE {where} ORDER BY {self._order(table)} "
            f"LIMIT 1 OFFSET {int(size)}", args)
        return tuple(rows[0]) if rows else None

    @hookimpl
    def read_range(self, conn: Any, table: TableSchema, split: SnapshotSplit, fetch_size: int
                   ) -> Iterator[Sequence[Row]]:
        where, args = self._range(table, split.start, split.end)
        where = with_condition(where, split.where, self.mark)
        columns = ", ".join(self.quote(c.name) for c in table.columns)
        cursor = self.dbapi(conn).cursor()
        try:
            cursor.execute(f"SELECT {columns} FROM {self.qualified(table.table)} WHERE {where}",
                           tuple(args))
            while batch := cursor.fetchmany(fetch_size):
                yield batch
        finally:
            cursor.close()
