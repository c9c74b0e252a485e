"""Delta Lake as a sync target, written with delta-rs (``deltalake``): no JVM, no Maven.

``delta:///abs/path`` (local) or ``delta+s3://bucket/prefix`` (also ``+gs``, ``+az``,
``+abfss``, ``+file``; query options are delta-rs storage options such as ``AWS_REGION``)
holds one Delta table per source table at ``<root>/<schema>/<table>``. A task's changes of a
table are reduced to the last state of each key and written in one Delta commit that also
records the batch id as an application transaction (``txn``): a replayed batch finds its id
with ``transaction_version`` and writes nothing. Rows of a snapshot whose keys the table does
not hold yet are appended; anything else is one MERGE (delete, update, insert by key).

Types: Delta has no time of day, interval or unsigned 64-bit integer types, and decimals of
at most 38 digits: a TIME is kept as its ISO text, an INTERVAL as its ISO 8601 text
(``P1Y2M3DT4H5M6.789S``: months, days and microseconds each kept), a wider (or unconstrained)
decimal as its exact text; the rest map one to one (timestamps with a time
zone as UTC instants, without one as ``timestamp_ntz``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import pyarrow as pa

from sdk import (
    ChangeEvent,
    ConfigurationError,
    ConnectionConfig,
    DialectInfo,
    DriverMissingError,
    Key,
    Row,
    SnapshotSplit,
    TableId,
    TableSchema,
    hookimpl,
)
from sdk.dialect.arrow import arrow_type
from sdk.dialect.tableformat import (
    arrow_rows,
    arrow_schema,
    check_interval_columns,
    compact,
    holds_any,
    key_bounds,
    source_marks,
    split_batches,
)
from sdk.dialect.types import Column

log = logging.getLogger(__name__)

NAME = "delta"
SCHEMES = ("delta", "delta+file", "delta+s3", "delta+s3a", "delta+gs", "delta+az",
           "delta+abfs", "delta+abfss")
DELETE = "_sdk_delete"
"""The column of a MERGE's source rows that marks a key to delete."""


def delta_type(column: Column) -> pa.DataType:
    """The Arrow type a column is stored as in Delta (see the module doc)."""
    return arrow_type(column)  # TIME, INTERVAL and wide decimals are text already


@dataclass
class DeltaRoot:
    """The "connection": the root URI under which each table is a Delta table."""

    uri: str
    storage_options: dict[str, str] = field(default_factory=dict, repr=False)

    def table_uri(self, table: TableSchema) -> str:
        parts = [p for p in (table.table.schema, table.table.name) if p]
        return "/".join([self.uri.rstrip("/"), *parts])

    def close(self) -> None:
        """Nothing to release: every call opens the table it writes."""


def root_of(config: ConnectionConfig) -> DeltaRoot:
    """The root a ``delta`` URL names."""
    parts = urlsplit(config.url)
    store = parts.scheme.lower().partition("+")[2]
    if not store or store == "file":
        if parts.netloc or not parts.path.startswith("/"):
            raise ConfigurationError("a delta URL names a directory by its absolute path: "
                                     "delta:///path/to/tables (or delta+s3://bucket/prefix)")
        uri = unquote(parts.path)
    else:
        uri = f"{store}://{parts.netloc}{unquote(parts.path)}"
    return DeltaRoot(uri, dict(config.options))


def _driver() -> Any:
    try:
        import deltalake
    except ImportError:
        raise DriverMissingError("the delta target needs delta-rs: pip install 'sdk[delta]'") \
            from None
    return deltalake


@hookimpl
def dialect_info() -> DialectInfo:
    return DialectInfo(NAME, "Delta Lake (delta-rs)", drivers=("deltalake",), extra="delta",
                       url_schemes=SCHEMES, target_only=True)


@hookimpl
def connect(config: ConnectionConfig) -> DeltaRoot:
    _driver()
    return root_of(config)


def _open(root: DeltaRoot, table: TableSchema) -> Any | None:
    deltalake = _driver()
    uri = root.table_uri(table)
    if not deltalake.DeltaTable.is_deltatable(uri, storage_options=root.storage_options):
        return None
    return deltalake.DeltaTable(uri, storage_options=root.storage_options)


def _same_columns(found: pa.Schema, wanted: pa.Schema) -> bool:
    return [(f.name, f.type) for f in found] == [(f.name, f.type) for f in wanted]


def _schema_of(delta: Any) -> pa.Schema:
    return pa.schema(delta.schema().to_arrow())


HISTORY_LOOK = 100
"""The newest commits of a table in which ``applied_tables`` looks for a batch of the sync's
(the sync's commits are nearly all; an OPTIMIZE or VACUUM adds one now and then)."""


@hookimpl
def applied_tables(conn: DeltaRoot, tables: Sequence[TableSchema]) -> dict[TableId, bool]:
    """Of ``tables``, those whose Delta table exists, each with whether its history holds a
    commit of a batch (``sdk.batch`` in its commit info): a table made again (a new
    directory) holds none."""
    out: dict[TableId, bool] = {}
    for table in tables:
        delta = _open(conn, table)
        if delta is not None:
            out[table.table] = any("sdk.batch" in commit
                                   for commit in delta.history(HISTORY_LOOK))
    return out


@hookimpl
def create_table(conn: DeltaRoot, table: TableSchema) -> None:
    """A Delta table of the source table's columns (the key named in its description)."""
    deltalake = _driver()
    wanted = arrow_schema(table, delta_type)
    existing = _open(conn, table)
    if existing is not None:
        found = _schema_of(existing)
        check_interval_columns(table, found, conn.table_uri(table))
        if not _same_columns(found, wanted):
            raise ConfigurationError(
                f"Delta table {conn.table_uri(table)} exists with other columns "
                f"({', '.join(found.names)}; the source has {', '.join(wanted.names)}): "
                "move it away or choose another target")
        return
    deltalake.DeltaTable.create(
        conn.table_uri(table), wanted, mode="ignore", name=table.table.name,
        description=f"mirrored by sdk from {table.table}; key ({', '.join(table.key)})",
        storage_options=conn.storage_options)


def _commit(batch_id: str, events: Sequence[ChangeEvent]) -> Any:
    """A batch's commit: its id (a replay finds it) and where in the source it reaches."""
    deltalake = _driver()
    return deltalake.CommitProperties(
        app_transactions=[deltalake.Transaction(batch_id, 1)],
        custom_metadata={"sdk.batch": batch_id, **source_marks(events)}, max_commit_retries=50)


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _held_keys(delta: Any, table: TableSchema, keys: Sequence[Key]) -> bool:
    """Whether the Delta table holds any of ``keys`` (files are skipped by their key range)."""
    import pyarrow.dataset as ds

    low, high = key_bounds(keys)
    first = table.key[0]
    dataset = delta.to_pyarrow_dataset()
    found = dataset.to_table(columns=list(table.key),
                             filter=(ds.field(first) >= low) & (ds.field(first) <= high))
    return holds_any(found, table, keys)


@hookimpl
def apply_changes(conn: DeltaRoot, table: TableSchema, events: Sequence[ChangeEvent],
                  batch_id: str) -> bool:
    deltalake = _driver()
    delta = _open(conn, table)
    if delta is None:
        raise ConfigurationError(f"Delta table {conn.table_uri(table)} is missing: it is "
                                 "created when the sync starts")
    if delta.transaction_version(batch_id) is not None:
        return False  # a replayed batch: written before
    batch = compact(table, events)
    rows = arrow_rows(table, batch.upserts, delta_type)
    if batch.inserts_only and (not batch.upserts or  # an empty batch: recorded, no rows
                               not _held_keys(delta, table, [table.key_of(r)
                                                             for r in batch.upserts])):
        deltalake.write_deltalake(delta, rows, mode="append",
                                  commit_properties=_commit(batch_id, events))
        return True
    gone = arrow_rows(table, [table.key_row(k) for k in batch.deleted], delta_type)
    source = pa.concat_tables([
        rows.append_column(DELETE, pa.repeat(pa.scalar(False), rows.num_rows)),
        gone.append_column(DELETE, pa.repeat(pa.scalar(True), gone.num_rows))])
    on = " AND ".join(f"t.{_quoted(k)} = s.{_quoted(k)}" for k in table.key)
    values = {_quoted(c): f"s.{_quoted(c)}" for c in table.column_names}
    updates = {k: v for k, v in values.items() if k not in {_quoted(n) for n in table.key}}
    merger = delta.merge(source, predicate=on, source_alias="s", target_alias="t",
                         commit_properties=_commit(batch_id, events)) \
        .when_matched_delete(predicate=f"s.{DELETE}")
    if updates:
        merger = merger.when_matched_update(updates=updates, predicate=f"NOT s.{DELETE}")
    merger.when_not_matched_insert(updates=values, predicate=f"NOT s.{DELETE}").execute()
    return True


@hookimpl
def alter_table(conn: DeltaRoot, old: TableSchema, new: TableSchema) -> None:
    """Columns added are added (nullable) in place; a dropped or retyped column rewrites the
    table with the new columns (Delta cannot drop or widen a column without column mapping
    and type widening, which delta-rs does not write): a new version, history kept."""
    deltalake = _driver()
    delta = _open(conn, old)
    if delta is None:
        return
    wanted = arrow_schema(new, delta_type)
    found = _schema_of(delta)
    if _same_columns(found, wanted):
        return
    have = {f.name: f.type for f in found}
    changed = [f for f in wanted if f.name in have and have[f.name] != f.type]
    dropped = [n for n in have if n not in wanted.names]
    if not changed and not dropped:
        empty = wanted.empty_table()
        deltalake.write_deltalake(delta, empty, mode="append", schema_mode="merge")
        return
    current = delta.to_pyarrow_table()
    columns = [current.column(f.name).cast(f.type) if f.name in have
               else pa.nulls(current.num_rows, f.type) for f in wanted]
    rewritten = pa.Table.from_arrays(columns, schema=wanted)
    deltalake.write_deltalake(delta, rewritten, mode="overwrite", schema_mode="overwrite")
    log.warning("Delta table %s rewritten with its new columns (%s)", conn.table_uri(new),
                ", ".join(wanted.names))


@hookimpl
def read_range(conn: DeltaRoot, table: TableSchema, split: SnapshotSplit, fetch_size: int
               ) -> Iterator[list[Row]]:
    """The rows of the split's key range (files skipped by their key statistics)."""
    import pyarrow.dataset as ds

    delta = _open(conn, table)
    if delta is None:
        return
    first = ds.field(table.key[0])
    condition = None
    if split.start is not None:
        condition = first >= split.start[0]
    if split.end is not None:
        below = first <= split.end[0]
        condition = below if condition is None else condition & below
    data = delta.to_pyarrow_dataset().to_table(columns=list(table.column_names),
                                               filter=condition)
    yield from split_batches(table, data, split, fetch_size)


@hookimpl
def is_retriable(error: BaseException) -> bool | None:
    """A commit that lost a race with another writer past its retries: try again."""
    return "CommitFailed" in type(error).__name__ or "conflict" in str(error).lower() or None
