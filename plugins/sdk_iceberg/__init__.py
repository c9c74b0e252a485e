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

Types: Iceberg has no 8/16-bit integers (they are stored as ``int``), no interval (its ISO 8601
text, ``P1Y2M3DT4H5M6.789S``: months, days and microseconds each kept) and decimals of at most
38 digits (a wider or unconstrained one is kept as its exact text); times of day are ``time``,
timestamps ``timestamp``/``timestamptz``.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
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
    TableId,
    TableSchema,
    hookimpl,
)
from sdk.dialect.arrow import arrow_type
from sdk.dialect.codec import decode_value, dumps, encode_value
from sdk.dialect.tableformat import (
    SOURCE_COMMIT,
    SOURCE_POSITION,
    Compacted,
    arrow_rows,
    arrow_schema,
    check_interval_columns,
    compact,
    holds_any,
    key_bounds,
    source_marks,
    split_batches,
)
from sdk.dialect.types import Column, LogicalType

log = logging.getLogger(__name__)

NAME = "iceberg"
SCHEMES = ("iceberg", "iceberg+file", "iceberg+http", "iceberg+https")
BATCH = "sdk.batch"
"""The snapshot summary property holding the id of the batch a commit applied."""
COMMIT_TRIES = 50
RETRIES = {"commit.retry.num-retries": "50", "commit.retry.min-wait-ms": "5",
           "commit.retry.max-wait-ms": "500", "write.metadata.delete-after-commit.enabled":
           "true", "write.metadata.previous-versions-max": "20"}
"""The tasks of a snapshot batch commit to one table at once: a commit that loses the race
is redone soon (pyiceberg's default waits 100 ms, doubling, four times); the metadata files of
earlier commits beyond the last 20 are deleted (a commit per split makes many)."""


def iceberg_type(column: Column) -> pa.DataType:
    """The Arrow type a column is written as (see the module doc)."""
    if column.type in (LogicalType.INT8, LogicalType.INT16):
        return pa.int32()
    if column.type is LogicalType.TIME:
        return pa.time64("us")
    return arrow_type(column)


@dataclass
class Catalog:
    """The "connection": an open pyiceberg catalog; ``lock``: for a catalog on a local
    SQLite file, the file the tasks of this machine take in turn to commit."""

    catalog: Any
    lock: Path | None = None
    opened: dict[tuple[str, str], Any] = field(default_factory=dict)
    """Tables loaded before, by identifier: their location and file IO (a commit loads
    the table's latest metadata again)."""

    @contextlib.contextmanager
    def committing(self) -> Iterator[None]:
        """Hold the commit lock (a local catalog): tasks committing to one table at once
        would mostly lose their races and redo their commits; in turn, none is lost. A
        REST catalog has no lock: its races are redone."""
        if self.lock is None:
            yield
            return
        with self.lock.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def identifier(self, table: TableSchema) -> tuple[str, str]:
        return (table.table.schema or "default", table.table.name)

    def name(self, table: TableSchema) -> str:
        """The table's name in messages: ``namespace.table``."""
        return ".".join(self.identifier(table))

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
        return Catalog(catalogs.load_catalog("sdk", type="rest", uri=uri, **options))
    if parts.netloc or not parts.path.startswith("/"):
        raise ConfigurationError("an iceberg URL names a warehouse directory by its absolute "
                                 "path: iceberg:///path/to/warehouse (or "
                                 "iceberg+https://host/path for a REST catalog)")
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = Path(unquote(parts.path))
    warehouse.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog("sdk", uri=f"sqlite:///{warehouse / 'catalog.db'}",
                         warehouse=warehouse.as_uri(), **options)
    return Catalog(catalog, warehouse / ".sdk-commit.lock")


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
                properties={"sdk.source": str(table.table), "sdk.key": ",".join(table.key),
                            **RETRIES})
        except TableAlreadyExistsError:  # another task created it meanwhile
            existing = _load(conn, table)
            assert existing is not None
    names = [f.name for f in existing.schema().fields]
    if names != list(wanted.names):
        raise ConfigurationError(
            f"Iceberg table {conn.name(table)} exists with other columns "
            f"({', '.join(names)}; the source has {', '.join(wanted.names)}): drop or rename "
            "it, or choose another target")
    check_interval_columns(table, existing.schema().as_arrow(), conn.name(table))
    if sorted(existing.schema().identifier_field_names()) != sorted(table.key):
        with existing.update_schema() as update:
            update.set_identifier_fields(*table.key)


@hookimpl
def applied_tables(conn: Catalog, tables: Sequence[TableSchema]) -> dict[TableId, bool]:
    """Of ``tables``, those whose Iceberg table exists, each with whether a snapshot of it
    records a batch (its summary's ``sdk.batch``): a table made again holds none."""
    out: dict[TableId, bool] = {}
    for table in tables:
        iceberg = _load(conn, table)
        if iceberg is not None:
            out[table.table] = any(
                s.summary is not None and BATCH in s.summary.additional_properties
                for s in iceberg.metadata.snapshots)
    return out


def _applied(iceberg: Any, batch_id: str) -> bool:
    return any(s.summary is not None and s.summary.additional_properties.get(BATCH) == batch_id
               for s in iceberg.metadata.snapshots)


def _expressions() -> Any:
    """pyiceberg's row filter expressions (pydantic models whose declared signatures do not
    match how they are called)."""
    return importlib.import_module("pyiceberg.expressions")


def _keys_filter(table: TableSchema, keys: Sequence[Key]) -> Any:
    x = _expressions()
    if len(table.key) == 1:
        return x.In(table.key[0], [k[0] for k in keys])
    each = [reduce(x.And, [x.EqualTo(c, v) for c, v in zip(table.key, k, strict=True)])
            for k in keys]
    return reduce(x.Or, each)


def _range_filter(table: TableSchema, low: Any, high: Any) -> Any:
    x = _expressions()
    condition: Any = x.AlwaysTrue()
    if low is not None:
        condition = x.And(condition, x.GreaterThanOrEqual(table.key[0], low))
    if high is not None:
        condition = x.And(condition, x.LessThanOrEqual(table.key[0], high))
    return condition


LOW, HIGH = "sdk.key-low", "sdk.key-high"
"""Snapshot summary properties: the least and greatest first key column value of the rows a
commit of ours wrote (JSON, as ``sdk.dialect.codec`` encodes values)."""


def _bounds(keys: Sequence[Key]) -> dict[str, str]:
    if not keys:
        return {}
    low, high = key_bounds(keys)
    return {LOW: dumps(encode_value(low)), HIGH: dumps(encode_value(high))}


def _history_holds(iceberg: Any, low: Any, high: Any) -> bool | None:
    """From the snapshot summaries alone: whether any commit may have written a key whose
    first column lies in ``[low, high]``; None when that cannot be told (history expired, or
    a commit that is not ours added rows)."""
    snapshots = iceberg.metadata.snapshots
    if snapshots and snapshots[0].parent_snapshot_id is not None:
        return None  # the first snapshots were expired: their rows' keys are unknown
    for snapshot in snapshots:
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        if int(props.get("added-records", "0") or 0) == 0:
            continue
        if LOW not in props or HIGH not in props:
            return None
        if not (decode_value(json.loads(props[HIGH])) < low or
                decode_value(json.loads(props[LOW])) > high):
            return True
    return False


def _held_keys(iceberg: Any, table: TableSchema, keys: Sequence[Key]) -> bool:
    """Whether the table holds any of ``keys``: told by the snapshot summaries when they
    can (a snapshot's splits never overlap, so this is the common answer, and it costs no
    file read), else by a scan whose files are skipped by their key range."""
    low, high = key_bounds(keys)
    told = _history_holds(iceberg, low, high)
    if told is not None and not told:
        return False
    found = iceberg.scan(row_filter=_range_filter(table, low, high),
                         selected_fields=tuple(table.key)).to_arrow()
    return holds_any(found, table, keys)


def _data_file(iceberg: Any, rows: pa.Table) -> str:
    """Write ``rows`` as one Parquet data file under the table's location (once: a commit
    that loses a race is redone with the same file)."""
    import pyarrow.parquet as pq

    path = f"{iceberg.location()}/data/sdk-{uuid.uuid4().hex}.parquet"
    with iceberg.io.new_output(path).create(overwrite=True) as stream:
        pq.write_table(rows, stream)
    return path


@hookimpl
def apply_changes(conn: Catalog, table: TableSchema, events: Sequence[ChangeEvent],
                  batch_id: str) -> bool:
    from pyiceberg.exceptions import CommitFailedException

    iceberg = conn.opened.get(conn.identifier(table)) if conn.lock is not None else None
    if iceberg is None:  # (with the lock, the table is loaded fresh to commit anyway)
        iceberg = _load(conn, table)
        if iceberg is None:
            raise ConfigurationError(f"Iceberg table {conn.name(table)} is "
                                     "missing: it is created when the sync starts")
        conn.opened[conn.identifier(table)] = iceberg
        if _applied(iceberg, batch_id):
            return False  # a replayed batch: committed before
    batch = compact(table, events)
    rows = arrow_rows(table, batch.upserts, iceberg_type)
    keys = [table.key_of(r) for r in batch.upserts]
    touched = [*keys, *batch.deleted]
    written = _data_file(iceberg, rows) if rows.num_rows else None
    mark = {BATCH: batch_id, **_bounds(keys), **source_marks(events)}
    for attempt in range(COMMIT_TRIES):
        if attempt:
            time.sleep(min(0.02 * attempt, 0.5))  # another task committed first
        try:
            with conn.committing():
                if attempt or conn.lock is not None:  # the table as the last commit left it
                    iceberg = _load(conn, table)
                    if iceberg is None:
                        raise ConfigurationError(f"Iceberg table {conn.name(table)} "
                                                 "was dropped while the sync wrote it")
                    if _applied(iceberg, batch_id):
                        if written:  # the file of a batch committed before: not needed
                            iceberg.io.delete(written)
                        return False
                _commit(iceberg, table, batch, keys, touched, written, mark, batch_id)
            return True
        except CommitFailedException:
            continue
    raise RetriableError(f"Iceberg table {conn.name(table)}: the commit lost "
                         f"{COMMIT_TRIES} races with other writers")


def _commit(iceberg: Any, table: TableSchema, batch: Compacted, keys: Sequence[Key],
            touched: Sequence[Key], written: str | None, mark: dict[str, str],
            batch_id: str) -> None:
    """One transaction: delete the touched keys unless none can be there, add the file."""
    with iceberg.transaction() as tx:
        if touched and not (batch.inserts_only and not _held_keys(iceberg, table, keys)):
            # a copy-on-write delete adds back the other rows of the files it rewrites:
            # their keys are within the bounds of the commits that wrote them first, so the
            # touched keys' bounds keep the history complete
            tx.delete(_keys_filter(table, touched), snapshot_properties={
                **_bounds(touched), **({} if written else {
                    key: mark[key] for key in (BATCH, SOURCE_POSITION, SOURCE_COMMIT)
                    if key in mark})})
        if written:  # a fresh file name: no need to look for it among the table's files
            tx.add_files([written], snapshot_properties=mark, check_duplicate_files=False)


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
