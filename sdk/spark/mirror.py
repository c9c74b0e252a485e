"""The mirror sink: apply each micro-batch to tables in a target database, idempotently.

Use it with ``foreachBatch``::

    mirror = Mirror("sqlite:///mirror.db", source_schemas)
    stream.writeStream.foreachBatch(mirror).option("checkpointLocation", ...).start()

Per batch: rows are spread over ``partitions`` tasks by a hash of the table and key (or, with
``shuffle=False``, each input partition is a task), each task reads its rows as Arrow batches,
keeps the last change per key (by ``_seq``) and applies its changes with the target dialect's
``apply_changes`` in one transaction that records ``<batch id>-<task>``. A replayed batch has the
same rows, so the same tasks get the same keys and every ``apply_changes`` is a no-op.

Dates and timestamps leave Spark as the days and microseconds it stores (``unix_date``,
``unix_micros``), never through PySpark's own datetime conversion, which fails on years outside
1..9999 (and on year 1 in a session time zone west of UTC): those become
``sdk.temporal.WideTemporal``. A task turns all its rows into change events before it writes,
and each table's changes are written in one transaction with the batch's ledger row, so a value
the target refuses fails before that table's transaction writes, and the rerun after the fix
skips what was committed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import pyarrow as pa

from ..codec import decode_value
from ..config import ConnectionConfig
from ..dialects import default_manager, get_dialect
from ..errors import ConfigurationError
from ..temporal import date_from_days, datetime_from_micros, time_from_text
from ..types import Capability, ChangeEvent, LogicalType, Offset, TableId, TableSchema

_EPOCH_NTZ = "TIMESTAMP_NTZ '1970-01-01 00:00:00'"


def spark_name(name: str) -> str:
    """A column name as Spark's column expressions take it: backquoted, inner backquotes
    doubled (a name may hold dots, spaces or backquotes)."""
    return "`" + name.replace("`", "``") + "`"


def _as_units(name: str, logical: LogicalType) -> Any:
    """The Spark column ``name`` as :func:`_column_values` takes it: dates and timestamps as the
    numbers Spark stores, so PySpark never builds a datetime of them."""
    from pyspark.sql import functions as F

    column = F.col(spark_name(name))
    if logical is LogicalType.DATE:
        return F.unix_date(column).alias(name)
    if logical is LogicalType.TIMESTAMP_TZ:
        return F.unix_micros(column).alias(name)
    if logical is LogicalType.TIMESTAMP:  # an interval from the epoch: a timedelta in Python
        return (column - F.expr(_EPOCH_NTZ)).alias(name)
    return column


def _column_values(column: pa.Array, logical: LogicalType) -> list[Any]:
    """An Arrow column of a batch (selected with :func:`_as_units`) as the dialect's Python
    values: dates and timestamps from the numbers Spark stores, times from their text, and the
    rest as Arrow gives them (decimals, bytes, strings, numbers)."""
    if logical is LogicalType.DATE:
        return [None if v is None else date_from_days(v) for v in column.to_pylist()]
    if logical in (LogicalType.TIMESTAMP_TZ, LogicalType.TIMESTAMP):
        aware = logical is LogicalType.TIMESTAMP_TZ
        micros = column.cast(pa.int64()).to_pylist()  # an interval from the epoch for NTZ
        return [None if v is None else datetime_from_micros(v, aware=aware) for v in micros]
    if logical is LogicalType.TIME:
        return [None if v is None else time_from_text(v) for v in column.to_pylist()]
    values: list[Any] = column.to_pylist()
    return values


class Mirror:
    """A ``foreachBatch`` function keeping target tables equal to the source tables."""

    def __init__(self, target_url: str, tables: Sequence[TableSchema], partitions: int = 2,
                 envelope: bool | None = None, target_schema: str | None = None,
                 shuffle: bool = True) -> None:
        """``tables`` are the source tables; each is mirrored under the same name, in
        ``target_schema`` when given (else in the source's schema name). ``shuffle=False``
        applies each input partition as it is, for a stream straight from the ``cdc`` source,
        whose batches already hold each key in one partition (a snapshot batch's splits do not
        overlap; a log batch is one partition): no exchange of rows between tasks."""
        dialect, config = default_manager().dialect_for_url(target_url)
        if not dialect.has(Capability.APPLY):
            raise ConfigurationError(f"dialect {dialect.name!r} cannot be a sync target "
                                     "(it does not implement apply_changes)")
        self.dialect_name = dialect.name
        self.config = config
        self.tables = list(tables)
        self.targets = {t.table: replace(t, table=TableId(target_schema or t.table.schema,
                                                           t.table.name))
                        for t in self.tables}
        self.partitions = partitions
        self.shuffle = shuffle
        self.envelope = len(self.tables) > 1 if envelope is None else envelope
        self.applied: dict[str, int] = {}
        self.lag_seconds: float | None = None
        """Seconds from the commit of the newest change the last batch applied to the end of
        that batch; None until a batch applied a change with a commit time."""
        conn = dialect.connect(config)
        try:
            for table in self.targets.values():
                dialect.create_table(conn, table)
        finally:
            conn.close()

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        if not self.envelope:
            table = self.tables[0]
            df = df.select(*[_as_units(c.name, c.type) for c in table.columns],
                           *[F.col(spark_name(c)) for c in df.columns
                             if c not in table.column_names])
        if self.shuffle:
            keys = [F.col("table"), F.col("key")] if self.envelope else \
                [F.col(spark_name(k)) for k in self.tables[0].key]
            df = df.repartition(self.partitions, *keys)
        applier = _PartitionApplier(self, batch_id, df.columns)
        # mapInArrow resolves each column by name, which fails on dots and backquotes
        plain = df.toDF(*[f"c{i}" for i in range(len(df.columns))])
        newest: float | None = None
        for table, applied, committed in plain.mapInArrow(applier, _APPLIED).collect():
            self.applied[table] = self.applied.get(table, 0) + applied
            if committed is not None and (newest is None or committed > newest):
                newest = committed
        if newest is not None:
            self.lag_seconds = max(0.0, time.time() - newest)


_APPLIED = "table string, applied long, committed double"
"""What each task reports: per table, the changes applied and the newest commit time."""


class _PartitionApplier:
    """Runs on executors: compact one partition's changes (Arrow batches) and apply them."""

    def __init__(self, mirror: Mirror, batch_id: int, columns: Sequence[str]) -> None:
        self.position = {name: i for i, name in enumerate(columns)}
        """Where each column of the batch is (the batches carry positional names)."""
        self.dialect_name = mirror.dialect_name
        self.config: ConnectionConfig = mirror.config
        self.tables = {target.table: target for target in mirror.targets.values()}
        self.by_name = {str(source): target for source, target in mirror.targets.items()}
        self.envelope = mirror.envelope
        self.batch_id = batch_id

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None, "the mirror's applier runs in a Spark task"
        task = context.partitionId()  # stable for a batch's replay: the ledger's id
        latest: dict[tuple[TableId, tuple[Any, ...]], tuple[int, ChangeEvent]] = {}
        reads: list[ChangeEvent] = []  # snapshot rows: distinct keys, nothing to compact
        newest: dict[TableId, int] = {}  # commit times, microseconds since the epoch
        for batch in batches:
            stamps = self._column(batch, "commit_ts" if self.envelope else "_commit_ts")
            for (seq, event), committed in zip(self._events(batch),
                                               stamps.cast(pa.int64()).to_pylist(),
                                               strict=True):
                if committed is not None and committed > newest.get(event.table, -2**63):
                    newest[event.table] = committed
                if event.op == "r" and not latest:
                    reads.append(event)
                    continue
                if reads:  # a change after snapshot rows: compact them all together
                    latest.update(((e.table, e.key), (0, e)) for e in reads)
                    reads.clear()
                slot = (event.table, event.key)
                if slot not in latest or latest[slot][0] <= seq:
                    latest[slot] = (seq, event)
        per_table: dict[TableId, list[ChangeEvent]] = {}
        for change in reads:
            per_table.setdefault(change.table, []).append(change)
        for _, change in sorted(latest.values(), key=lambda item: item[0]):
            per_table.setdefault(change.table, []).append(change)
        if not per_table:
            return
        dialect = get_dialect(self.dialect_name)
        report: list[dict[str, Any]] = []
        with dialect.passing_faults():  # a target that drops out is retried like a source
            conn = dialect.connect(self.config)
            try:
                for table, events in per_table.items():
                    done = dialect.apply_changes(conn, self.tables[table], events,
                                                 f"{self.batch_id}-{task}")
                    last = newest.get(table)
                    report.append({"table": str(table), "applied": len(events) if done else 0,
                                   "committed": None if last is None else last / 1e6})
            finally:
                conn.close()
        yield pa.RecordBatch.from_pylist(report, schema=_REPORT)

    def _column(self, batch: pa.RecordBatch, name: str) -> pa.Array:
        return batch.column(self.position[name])

    def _events(self, batch: pa.RecordBatch) -> list[tuple[int, ChangeEvent]]:
        """A batch's rows as (sequence, change event) pairs."""
        offset = Offset("mirror")
        if self.envelope:
            out = []
            columns = [self._column(batch, n).to_pylist() for n in ("table", "op", "key", "after",
                                                               "seq")]
            for name, op, key_text, after, seq in zip(*columns, strict=True):
                table = self.by_name[name]
                key = tuple(decode_value(v) for v in json.loads(key_text))
                row = None
                if op != "d":  # a delete needs only its key
                    values = json.loads(after)
                    row = tuple(decode_value(values[c]) for c in table.column_names)
                out.append((seq, ChangeEvent(table.table, op, key, row, offset)))
            return out
        table = next(iter(self.by_name.values()))
        values = [_column_values(self._column(batch, c.name), c.type) for c in table.columns]
        ops = self._column(batch, "_op").to_pylist()
        seqs = self._column(batch, "_seq").to_pylist()
        key_of, name = table.key_of, table.table
        return [(seq, ChangeEvent(name, op, key_of(row), None if op == "d" else row, offset))
                for seq, op, row in zip(seqs, ops, zip(*values, strict=True), strict=True)]


_REPORT = pa.schema([("table", pa.string()), ("applied", pa.int64()),
                     ("committed", pa.float64())])
