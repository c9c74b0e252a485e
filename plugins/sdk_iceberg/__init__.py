"""Apache Iceberg as a sync target, written with pyiceberg: no JVM, no Maven.

``iceberg:///abs/warehouse`` keeps the catalog in ``<warehouse>/catalog.db`` (pyiceberg's SQL
catalog on SQLite: no server) and the data under the warehouse path;
``iceberg+http://host:port/path`` (or ``+https``) uses a REST catalog, the URL's query options
passed to it as catalog properties (``warehouse``, ``token``, ``s3.endpoint``...). Each source
table is an Iceberg table ``<schema>.<table>`` (namespace = the source schema), its key the
table's identifier fields. A task's changes of a table are reduced to the last state of each
key and committed in one Iceberg transaction: a delete of the keys it changes, then an append
of their new rows whose snapshot summary records the batch id (``sdk.batch``); a replayed
batch finds its id among the table's snapshots and writes nothing. Rows of a snapshot whose
keys the table does not hold yet are only appended. A commit that lost a race with another
task is redone on the table's new state.

Types: Iceberg has no 8/16-bit integers (they are stored as ``int``), no interval (whole
microseconds as ``long``) and decimals of at most 38 digits (a wider or unconstrained one is
kept as its exact text); times of day are ``time``, timestamps ``timestamp``/``timestamptz``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
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
    RetriableError,
    Row,
    SnapshotSplit,
    TableSchema,
    hookimpl,
)
from sdk.arrow import arrow_type
from sdk.tableformat import (
    arrow_rows,
    arrow_schema,
    compact,
    holds_any,
    key_bounds,
    split_batches,
)
from sdk.types import Column, LogicalType

log = logging.getLogger(__name__)

NAME = "iceberg"
SCHEMES = ("iceberg", "iceberg+file", "iceberg+http", "iceberg+https")
BATCH = "sdk.batch"
"""The snapshot summary property holding the id of the batch a commit applied."""
COMMIT_TRIES = 50


def iceberg_type(column: Column) -> pa.DataType:
    """The Arrow type a column is written as (see the module doc)."""
    if column.type in (LogicalType.INT8, LogicalType.INT16):
        return pa.int32()
    if column.type is LogicalType.INTERVAL:
        return pa.int64()
    if column.type is LogicalType.TIME:
        return pa.time64("us")
    return arrow_type(column)


@dataclass
class Catalog:
    """The "connection": an open pyiceberg catalog."""

    catalog: Any
    where: str

    def identifier(self, table: TableSchema) -> tuple[str, str]:
        return (table.table.schema or "default", table.table.name)

    def close(self) -> None:
        engine = getattr(self.catalog, "engine", None)
        if engine is not None:
            engine.dispose()


def _driver() -> Any:
    try:
        import pyiceberg.catalog
    except ImportError:
        raise DriverMissingError("the iceberg target needs pyiceberg: "
                                 "pip install 'sdk[iceberg]'") from None
    return pyiceberg.catalog


@hookimpl
def dialect_info() -> DialectInfo:
    return DialectInfo(NAME, "Apache Iceberg (pyiceberg)", drivers=("pyiceberg",),
                       extra="iceberg", url_schemes=SCHEMES, target_only=True)


@hookimpl
def connect(config: ConnectionConfig) -> Catalog:
    catalogs = _driver()
    parts = urlsplit(config.url)
    kind = parts.scheme.lower().partition("+")[2]
    options = dict(config.options)
    if kind in ("http", "https"):
        uri = f"{kind}://{parts.netloc}{parts.path}"
        return Catalog(catalogs.load_catalog("sdk", type="rest", uri=uri, **options), uri)
    if parts.netloc or not parts.path.startswith("/"):
        raise ConfigurationError("an iceberg URL names a warehouse directory by its absolute "
                                 "path: iceberg:///path/to/warehouse (or "
                                 "iceberg+https://host/path for a REST catalog)")
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = Path(unquote(parts.path))
    warehouse.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog("sdk", uri=f"sqlite:///{warehouse / 'catalog.db'}",
                         warehouse=warehouse.as_uri(), **options)
    return Catalog(catalog, str(warehouse))


def _load(conn: Catalog, table: TableSchema) -> Any | None:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        return conn.catalog.load_table(conn.identifier(table))
    except NoSuchTableError:
        return None


@hookimpl
def create_table(conn: Catalog, table: TableSchema) -> None:
    """An Iceberg table of the source table's columns, its key the identifier fields."""
    from pyiceberg.exceptions import TableAlreadyExistsError

    wanted = arrow_schema(table, iceberg_type)
    existing = _load(conn, table)
    if existing is None:
        namespace, _ = conn.identifier(table)
        conn.catalog.create_namespace_if_not_exists(namespace)
        try:
            existing = conn.catalog.create_table(
                conn.identifier(table), schema=wanted,
                properties={"sdk.source": str(table.table), "sdk.key": ",".join(table.key)})
        except TableAlreadyExistsError:  # another task created it meanwhile
            existing = _load(conn, table)
            assert existing is not None
    names = [f.name for f in existing.schema().fields]
    if names != list(wanted.names):
        raise ConfigurationError(
            f"Iceberg table {'.'.join(conn.identifier(table))} exists with other columns "
            f"({', '.join(names)}; the source has {', '.join(wanted.names)}): drop or rename "
            "it, or choose another target")
    if sorted(existing.schema().identifier_field_names()) != sorted(table.key):
        with existing.update_schema() as update:
            update.set_identifier_fields(*table.key)


def _applied(iceberg: Any, batch_id: str) -> bool:
    return any(s.summary is not None and s.summary.additional_properties.get(BATCH) == batch_id
               for s in iceberg.metadata.snapshots)


def _keys_filter(table: TableSchema, keys: Sequence[Key]) -> Any:
    from pyiceberg.expressions import And, EqualTo, In, Or

    if len(table.key) == 1:
        return In(table.key[0], [k[0] for k in keys])
    each = [reduce(And, [EqualTo(c, v) for c, v in zip(table.key, k, strict=True)])
            for k in keys]
    return reduce(Or, each)


def _range_filter(table: TableSchema, low: Any, high: Any) -> Any:
    from pyiceberg.expressions import AlwaysTrue, And, GreaterThanOrEqual, LessThanOrEqual

    condition: Any = AlwaysTrue()
    if low is not None:
        condition = And(condition, GreaterThanOrEqual(table.key[0], low))
    if high is not None:
        condition = And(condition, LessThanOrEqual(table.key[0], high))
    return condition


def _held_keys(iceberg: Any, table: TableSchema, keys: Sequence[Key]) -> bool:
    """Whether the table holds any of ``keys`` (files are skipped by their key range)."""
    low, high = key_bounds(keys)
    found = iceberg.scan(row_filter=_range_filter(table, low, high),
                         selected_fields=tuple(table.key)).to_arrow()
    return holds_any(found, table, keys)


@hookimpl
def apply_changes(conn: Catalog, table: TableSchema, events: Sequence[ChangeEvent],
                  batch_id: str) -> bool:
    from pyiceberg.exceptions import CommitFailedException

    batch = compact(table, events)
    rows = arrow_rows(table, batch.upserts, iceberg_type)
    keys = [table.key_of(r) for r in batch.upserts]
    touched = [*keys, *batch.deleted]
    for attempt in range(COMMIT_TRIES):
        iceberg = _load(conn, table)
        if iceberg is None:
            raise ConfigurationError(f"Iceberg table {'.'.join(conn.identifier(table))} is "
                                     "missing: it is created when the sync starts")
        if _applied(iceberg, batch_id):
            return False  # a replayed batch: committed before
        mark = {BATCH: batch_id}
        try:
            with iceberg.transaction() as tx:
                if touched and not (batch.inserts_only and
                                    not _held_keys(iceberg, table, keys)):
                    tx.delete(_keys_filter(table, touched),
                              snapshot_properties={} if rows.num_rows else mark)
                if rows.num_rows:
                    tx.append(rows, snapshot_properties=mark)
            return True
        except CommitFailedException:
            time.sleep(min(0.05 * (attempt + 1), 1.0))  # another task committed first
    raise RetriableError(f"Iceberg table {'.'.join(conn.identifier(table))}: the commit lost "
                         f"{COMMIT_TRIES} races with other writers")


@hookimpl
def alter_table(conn: Catalog, old: TableSchema, new: TableSchema) -> None:
    """Columns dropped are dropped, added ones added (nullable), widened ones promoted where
    Iceberg allows it (int to long, float to double, a decimal's precision up), in place."""
    iceberg = _load(conn, old)
    if iceberg is None:
        return
    wanted = arrow_schema(new, iceberg_type)
    present = [f.name for f in iceberg.schema().fields]
    with iceberg.update_schema() as update:
        for name in present:
            if name not in wanted.names:
                update.delete_column(name)
        update.union_by_name(pa.schema([f.with_nullable(True) for f in wanted
                                        if f.name not in new.key]))


@hookimpl
def read_range(conn: Catalog, table: TableSchema, split: SnapshotSplit, fetch_size: int
               ) -> Iterator[list[Row]]:
    """The rows of the split's key range (files skipped by their key statistics)."""
    iceberg = _load(conn, table)
    if iceberg is None:
        return
    low = split.start[0] if split.start is not None else None
    high = split.end[0] if split.end is not None else None
    data = iceberg.scan(row_filter=_range_filter(table, low, high),
                        selected_fields=tuple(table.column_names)).to_arrow()
    yield from split_batches(table, data, split, fetch_size)


@hookimpl
def is_retriable(error: BaseException) -> bool | None:
    """A commit that lost its races with other writers: try again."""
    return "CommitFailed" in type(error).__name__ or None
