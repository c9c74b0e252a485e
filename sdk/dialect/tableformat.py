"""Helpers for target plugins that write an open table format (Delta Lake, Apache Iceberg):
tables that take whole files from Arrow, not statements. A batch of changes becomes the last
state of each key it touched (rows to upsert, keys to delete) as Arrow; a scan comes back as
the values the source dialect gives. Spark-free and database-free: ``sdk_delta`` and
``sdk_iceberg`` use them, and so can a third-party format plugin."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from .arrow import arrow_type, converter, python_values, units
from .errors import ConfigurationError, FatalSyncError
from .types import ChangeEvent, Column, Key, LogicalType, Row, SnapshotSplit, TableSchema

TypeMap = Callable[[Column], pa.DataType]
"""A format's Arrow type for a column (``sdk.dialect.arrow.arrow_type`` where the format has it)."""


@dataclass(frozen=True)
class Compacted:
    """A batch of changes of one table reduced to each touched key's last state."""

    upserts: list[Row]
    """The last image of each key the batch leaves present, in the order first seen."""
    deleted: list[Key]
    """The keys the batch leaves absent (deleted, or moved away by a key change)."""
    inserts_only: bool
    """Every change was a read or an insert: nothing was deleted or updated, so where the
    table holds none of the keys the rows may be appended."""


def compact(table: TableSchema, events: Iterable[ChangeEvent]) -> Compacted:
    """The last state of every key ``events`` touch (applied in order: an update that moved
    its key removes the old one first)."""
    last: dict[Key, Row | None] = {}
    plain = True
    for event in events:
        if event.old_key is not None:
            last[event.old_key] = None
            plain = False
        if event.op == "d":
            last[event.key] = None
            plain = False
        else:
            if event.op == "u":
                plain = False
            last[event.key] = event.after
    return Compacted([row for row in last.values() if row is not None],
                     [key for key, row in last.items() if row is None], plain)


def arrow_schema(table: TableSchema, types: TypeMap = arrow_type) -> pa.Schema:
    """The Arrow schema of ``table``'s rows in a format: key columns not null."""
    return pa.schema([pa.field(c.name, types(c), nullable=c.name not in table.key)
                      for c in table.columns])


def check_interval_columns(table: TableSchema, found: pa.Schema, name: str) -> None:
    """Refuse a table-format table whose interval columns hold whole microseconds (an integer
    type, as releases before intervals kept their months and days wrote them) where this one
    writes ISO 8601 text: one message naming the columns and the fix, not a write failing
    later. ``name``: the table as the user knows it."""
    old = [c.name for c in table.columns if c.type is LogicalType.INTERVAL
           and c.name in found.names and pa.types.is_integer(found.field(c.name).type)]
    if old:
        raise ConfigurationError(
            f"table {name} holds the interval column(s) {', '.join(old)} as whole microseconds, "
            "as an earlier release of sdk wrote them; this one writes an interval's ISO 8601 "
            "text (its months, days and microseconds each kept): move the table away to have "
            "it written again, or choose another target")


def arrow_rows(table: TableSchema, rows: Sequence[Row], types: TypeMap = arrow_type
               ) -> pa.Table:
    """``rows`` (in ``table``'s column order) as an Arrow table of :func:`arrow_schema`."""
    schema = arrow_schema(table, types)
    columns: list[pa.Array] = []
    for index, (column, field) in enumerate(zip(table.columns, schema, strict=True)):
        values: list[Any] = [row[index] for row in rows]
        convert = converter(column, field.type)
        if convert is not None:
            values = [convert(v) for v in values]
        try:
            columns.append(pa.array(values, type=field.type))
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            columns.append(_refused(table, column, field.type, [units(v) for v in values],
                                    rows))
    return pa.Table.from_arrays(columns, schema=schema)


def _refused(table: TableSchema, column: Column, kind: pa.DataType, values: list[Any],
             rows: Sequence[Row]) -> pa.Array:
    """Column values Arrow took only as days or microseconds, or an error naming the first
    value the format's type cannot hold."""
    try:
        return pa.array(values, type=kind)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    for row, value in zip(rows, values, strict=True):
        try:
            pa.array([value], type=kind)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            raise FatalSyncError(
                f"{table.table} key {table.key_of(row)!r} column {column.name!r} "
                f"({column.source_type}): the value {value!r} does not fit the target's "
                f"{kind} ({exc}). Fix the value at the source, or change the column to a type "
                "the target holds exactly") from None
    raise AssertionError("unreachable: the column failed but no value does")


def python_rows(table: TableSchema, data: pa.Table) -> list[Row]:
    """An Arrow table of ``table``'s columns (by name) as rows of the values the source
    dialect gives (a decimal kept as text back as a ``Decimal``)."""
    columns = []
    for column in table.columns:
        array = data.column(column.name)
        if column.type is LogicalType.DECIMAL and pa.types.is_string(array.type):
            columns.append([None if v is None else Decimal(v) for v in array.to_pylist()])
        else:
            columns.append(python_values(array, column.type))
    return list(zip(*columns, strict=True)) if columns else []


def split_batches(table: TableSchema, data: pa.Table, split: SnapshotSplit, size: int
                  ) -> Iterator[list[Row]]:
    """The rows of ``data`` (a scan already narrowed by the split's first key column) whose
    key ``split`` contains, ``size`` at a time: what a format's ``read_range`` yields."""
    rows = [row for row in python_rows(table, data) if split.contains(table.key_of(row))]
    for start in range(0, len(rows), size):
        yield rows[start:start + size]


def holds_any(found: pa.Table, table: TableSchema, keys: Sequence[Key]) -> bool:
    """Whether ``found`` (key columns of the rows a format scanned) holds any of ``keys``."""
    if found.num_rows == 0:
        return False
    if len(table.key) == 1:
        column = found.column(table.key[0])
        wanted = pa.array([k[0] for k in keys]).cast(column.type)
        return bool(pc.any(pc.is_in(column, value_set=wanted)).as_py())
    have = set(zip(*(found.column(k).to_pylist() for k in table.key), strict=True))
    return any(tuple(k) in have for k in keys)


SOURCE_POSITION = "sdk.source_position"
SOURCE_COMMIT = "sdk.source_commit"


def source_marks(events: Sequence[ChangeEvent]) -> dict[str, str]:
    """What a format's commit of ``events`` records of the source (neither format commits
    several tables at once, so a reader lines tables up by these): the log position of the
    last change (as ``sdk status`` prints positions) and when the newest source transaction
    among them committed (ISO 8601, UTC; none for snapshot rows)."""
    if not events:
        return {}
    marks = {SOURCE_POSITION: events[-1].offset.json_text()}
    stamps = [e.commit_ts for e in events if e.commit_ts is not None]
    if stamps:
        marks[SOURCE_COMMIT] = dt.datetime.fromtimestamp(max(stamps) / 1e6, dt.UTC).isoformat()
    return marks


def key_bounds(keys: Sequence[Key]) -> tuple[Any, Any]:
    """The least and greatest first key column value among ``keys`` (none of them None)."""
    firsts = [key[0] for key in keys]
    return min(firsts), max(firsts)


__all__ = ["SOURCE_COMMIT", "SOURCE_POSITION", "Compacted", "TypeMap", "arrow_rows",
           "arrow_schema", "compact", "holds_any", "key_bounds", "python_rows", "source_marks",
           "split_batches"]
