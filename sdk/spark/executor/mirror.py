"""The mirror sink: apply each micro-batch to tables in a target database, idempotently.

Use it with ``foreachBatch``::

    mirror = Mirror("sqlite:///mirror.db", source_schemas)
    stream.writeStream.foreachBatch(mirror).option("checkpointLocation", ...).start()

Per batch: rows go to one task where the target applies a batch in one transaction
(``consistency="transaction"``, the default, on a target that can), else they are spread over
``partitions`` tasks by a hash of the table and key (a transaction per table and task); with
``shuffle=False`` each input partition is a task (a stream straight from the ``cdc`` source: a
log batch is one). Each task reads its rows as Arrow batches, keeps the last change per key (by
``_seq``) and applies its changes with the target dialect's ``apply_changes``, recording
``<batch id>-<task>``. A replayed batch has the
same rows, so the same tasks get the same keys and every ``apply_changes`` is a no-op.

Dates and timestamps leave Spark as the days and microseconds it stores (``unix_date``,
``unix_micros``), never through PySpark's own datetime conversion, which fails on years outside
1..9999 (and on year 1 in a session time zone west of UTC): those become
``sdk.dialect.temporal.WideTemporal``. A task turns all its rows into change events before it
writes, and each table's changes are written with the batch's ledger row in the same transaction,
so a value the target refuses fails before that transaction commits, and the rerun after the fix
skips what was committed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import pyarrow as pa

from ...dialect.codec import decode_value
from ...dialect.errors import ConfigurationError
from ...dialect.types import ChangeEvent, LogicalType, Offset, TableId, TableSchema
from ...job.target import REPORT_SCHEMA, TRIM_BEHIND, Applier, Target, add_reports
from .batches import REPORT_ARROW, python_values

_EPOCH_NTZ = "TIMESTAMP_NTZ '1970-01-01 00:00:00'"


def spark_name(name: str) -> str:
    """A column name as Spark's column expressions take it: backquoted, inner backquotes
    doubled (a name may hold dots, spaces or backquotes)."""
    return "`" + name.replace("`", "``") + "`"


def _as_units(name: str, logical: LogicalType) -> Any:
    """The Spark column ``name`` as :func:`~sdk.spark.executor.batches.python_values` takes it:
    dates and timestamps as the numbers Spark stores, so PySpark never builds a datetime of them."""
    from pyspark.sql import functions as F

    column = F.col(spark_name(name))
    if logical is LogicalType.DATE:
        return F.unix_date(column).alias(name)
    if logical is LogicalType.TIMESTAMP_TZ:
        return F.unix_micros(column).alias(name)
    if logical is LogicalType.TIMESTAMP:  # an interval from the epoch: a timedelta in Python
        return (column - F.expr(_EPOCH_NTZ)).alias(name)
    return column


class Mirror:
    """A ``foreachBatch`` function keeping target tables equal to the source tables."""

    def __init__(self, target_url: str, tables: Sequence[TableSchema], partitions: int = 2,
                 envelope: bool | None = None, target_schema: str | None = None,
                 shuffle: bool = True,
                 more_tables: Callable[[], Iterable[TableSchema]] | None = None,
                 own_tables: bool = False,
                 ledger_prefix: Callable[[], str] | None = None,
                 consistency: str = "transaction") -> None:
        """``tables`` are the source tables; each is mirrored under the same name, in
        ``target_schema`` when given (else in the source's schema name). ``shuffle=False``
        applies each input partition as it is, for a stream straight from the ``cdc`` source,
        whose batches already hold each key in one partition (a snapshot batch's splits do not
        overlap; a log batch is one partition): no exchange of rows between tasks.
        ``more_tables`` is asked before each batch for tables the stream captures now (a
        table added to a running sync): they are mirrored too, their target tables created;
        ``own_tables``: the target tables are this sync's (resumed), altered to ``tables``
        when a schema change left them behind. ``ledger_prefix`` gives what each batch's
        ledger id begins with (the sync's id: another sync into the same target never takes
        this one's batches for its own). ``consistency``: ``transaction`` commits a batch in
        one target transaction where the target can (in one task; with ``shuffle=False``,
        each input partition's: a stream straight from the ``cdc`` source has a log batch in
        one), ``table`` each table and task by itself, over ``partitions`` tasks."""
        self.target = Target.of(target_url, target_schema, consistency)
        self.tables = list(tables)
        self.more_tables = more_tables
        self.partitions = partitions
        self.shuffle = shuffle
        self.envelope = len(self.tables) > 1 if envelope is None else envelope
        self.tally = Tally()
        self.ledger_prefix = ledger_prefix
        self.target.create_tables(self.tables, own=own_tables)

    def _learn_tables(self) -> None:
        """Mirror the tables ``more_tables`` names that this mirror does not know yet, and
        alter the target tables of those whose columns changed."""
        if self.more_tables is None:
            return
        known = {t.table: i for i, t in enumerate(self.tables)}
        new = []
        for table in self.more_tables():
            at = known.get(table.table)
            if at is None:
                new.append(table)
            elif self.tables[at] != table:
                applier = Applier(self.target)
                try:
                    applier.alter(self.tables[at], table)
                finally:
                    applier.close()
                self.tables[at] = table
        if new:
            self.target.create_tables(new)
            self.tables.extend(new)

    @property
    def applied(self) -> dict[str, int]:
        """Changes applied so far, per source table name."""
        return self.tally.applied

    @property
    def skipped(self) -> dict[str, int]:
        """Changes set aside so far (``errors.mode=skip``), per source table name."""
        return self.tally.skipped

    @property
    def lag_seconds(self) -> float | None:
        """Now minus the commit time of the newest change applied (:attr:`Tally.lag_seconds`)."""
        return self.tally.lag_seconds

    @property
    def newest(self) -> float | None:
        """The commit time of the newest change applied (:attr:`Tally.newest`)."""
        return self.tally.newest

    @property
    def batch_lag(self) -> float | None:
        """Commit-to-applied time of the newest change of the last batch that applied one."""
        return self.tally.batch_lag

    def __call__(self, df: Any, batch_id: int) -> None:
        from pyspark.sql import functions as F

        self._learn_tables()
        if not self.envelope:
            table = self.tables[0]
            df = df.select(*[_as_units(c.name, c.type) for c in table.columns],
                           *[F.col(spark_name(c)) for c in df.columns
                             if c not in table.column_names])
        if self.shuffle:  # a batch in one transaction: in one task
            keys = [F.col("table"), F.col("key")] if self.envelope else \
                [F.col(spark_name(k)) for k in self.tables[0].key]
            df = df.repartition(1 if self.target.transactional else self.partitions, *keys)
        prefix = self.ledger_prefix() if self.ledger_prefix is not None else ""
        applier = _PartitionApplier(self, prefix, batch_id, df.columns)
        # mapInArrow resolves each column by name, which fails on dots and backquotes
        plain = df.toDF(*[f"c{i}" for i in range(len(df.columns))])
        self.tally(plain.mapInArrow(applier, REPORT_SCHEMA), batch_id)


class Tally:
    """A ``foreachBatch`` step over a stream of task reports (:data:`REPORT_SCHEMA`): collects
    them, which runs the batch, and keeps the totals and the lag."""

    def __init__(self) -> None:
        self.applied: dict[str, int] = {}
        self.skipped: dict[str, int] = {}
        """Changes set aside (``errors.mode=skip``) per table name."""
        self.newest: float | None = None
        """The commit time (seconds since the epoch) of the newest change applied."""
        self.batch_lag: float | None = None
        """Commit-to-applied time of the newest change of the last batch that applied one."""

    @property
    def lag_seconds(self) -> float | None:
        """Now minus the commit time of the newest change applied (so, while changes wait,
        at least the age of the oldest of them); None until a change with a commit time was
        applied. It grows while a batch runs and drops when one commits."""
        return None if self.newest is None else max(0.0, time.time() - self.newest)

    def __call__(self, df: Any, batch_id: int) -> None:
        self.add([tuple(row) for row in df.collect()])

    def add(self, reports: list[tuple[Any, ...]]) -> None:
        """Count task reports (:data:`REPORT_SCHEMA` rows), however their batch ran."""
        newest = add_reports(self.applied, reports, self.skipped)
        if newest is not None:
            self.batch_lag = max(0.0, time.time() - newest)
            if self.newest is None or newest > self.newest:
                self.newest = newest


class _PartitionApplier:
    """Runs on executors: compact one partition's changes (Arrow batches) and apply them."""

    def __init__(self, mirror: Mirror, prefix: str, number: int, columns: Sequence[str]
                 ) -> None:
        self.position = {name: i for i, name in enumerate(columns)}
        """Where each column of the batch is (the batches carry positional names)."""
        self.target = mirror.target
        self.by_name = {str(t.table): t for t in mirror.tables}
        self.by_id = {t.table: t for t in mirror.tables}
        self.envelope = mirror.envelope
        self.batch_id = f"{prefix}{number:012d}"
        """The batch's ledger id, before its task's number: the sync's id and the Spark batch's
        number, 12 digits, so the ids sort by it and a range of them can be trimmed."""
        self.trims = [(f"{prefix}{0:012d}", f"{prefix}{number - TRIM_BEHIND + 1:012d}")] \
            if number >= TRIM_BEHIND else []
        """The ledger ids no replay asks about (Spark replays at most its last batch)."""

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None, "the mirror's applier runs in a Spark task"
        task = context.partitionId()  # stable for a batch's replay: the ledger's id
        latest: dict[tuple[TableId, tuple[Any, ...]], tuple[int, ChangeEvent]] = {}
        reads: list[ChangeEvent] = []  # snapshot rows: distinct keys, nothing to compact
        for batch in batches:
            for seq, event in self._events(batch):
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
        applier = Applier(self.target)
        try:
            applier.begin()  # the task's tables commit together (apply.consistency)
            for table, events in per_table.items():
                applier.apply(self.by_id[table], events, f"{self.batch_id}-{task}")
            applier.trim(self.trims)
            applier.commit()
        finally:
            applier.close()
        yield pa.RecordBatch.from_pylist(applier.report(), schema=REPORT_ARROW)

    def _column(self, batch: pa.RecordBatch, name: str) -> pa.Array:
        return batch.column(self.position[name])

    def _events(self, batch: pa.RecordBatch) -> list[tuple[int, ChangeEvent]]:
        """A batch's rows as (sequence, change event) pairs."""
        offset = Offset("mirror")
        stamps = self._column(batch, "commit_ts" if self.envelope else "_commit_ts") \
            .cast(pa.int64()).to_pylist()  # microseconds since the epoch
        if self.envelope:
            out = []
            columns = [self._column(batch, n).to_pylist() for n in ("table", "op", "key", "after",
                                                               "seq")]
            for name, op, key_text, after, seq, stamp in zip(*columns, stamps, strict=True):
                table = self.by_name.get(name)
                if table is None:
                    raise ConfigurationError(
                        f"the batch has changes of table {name}, which this Mirror was not "
                        "given: pass its schema in tables (or more_tables)")
                key = tuple(decode_value(v) for v in json.loads(key_text))
                row = None
                if op != "d":  # a delete needs only its key
                    values = json.loads(after)
                    row = tuple(decode_value(values.get(c)) for c in table.column_names)
                out.append((seq, ChangeEvent(table.table, op, key, row, offset,
                                             commit_ts=stamp)))
            return out
        table = next(iter(self.by_name.values()))
        values = [python_values(self._column(batch, c.name), c.type) for c in table.columns]
        ops = self._column(batch, "_op").to_pylist()
        seqs = self._column(batch, "_seq").to_pylist()
        key_of, name = table.key_of, table.table
        return [(seq, ChangeEvent(name, op, key_of(row), None if op == "d" else row, offset,
                                  commit_ts=stamp))
                for seq, op, row, stamp in zip(seqs, ops, zip(*values, strict=True), stamps,
                                               strict=True)]

