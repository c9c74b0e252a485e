"""The mirror sink: apply each micro-batch to tables in a target database, idempotently.

Use it with ``foreachBatch``::

    mirror = Mirror("sqlite:///mirror.db", source_schemas)
    stream.writeStream.foreachBatch(mirror).option("checkpointLocation", ...).start()

Per batch: rows are spread over ``partitions`` tasks by a hash of the table and key, each task
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

import datetime as dt
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

from ..codec import decode_value
from ..config import ConnectionConfig
from ..dialects import default_manager, get_dialect
from ..errors import ConfigurationError
from ..temporal import date_from_days, datetime_from_micros, time_from_text
from ..types import Capability, ChangeEvent, LogicalType, Offset, TableId, TableSchema

_MICROS = dt.timedelta(microseconds=1)
_EPOCH_NTZ = "TIMESTAMP_NTZ '1970-01-01 00:00:00'"


def spark_name(name: str) -> str:
    """A column name as Spark's column expressions take it: backquoted, inner backquotes
    doubled (a name may hold dots, spaces or backquotes)."""
    return "`" + name.replace("`", "``") + "`"


def _as_units(name: str, logical: LogicalType) -> Any:
    """The Spark column ``name`` as :func:`_from_spark` takes it: dates and timestamps as the
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


def _from_spark(value: Any, logical: LogicalType) -> Any:
    """A value from a Spark Row (selected with :func:`_as_units`) back to the dialect's Python
    value; binary comes as bytearray."""
    if value is None:
        return None
    if logical is LogicalType.DATE:
        return date_from_days(value)
    if logical is LogicalType.TIMESTAMP_TZ:
        return datetime_from_micros(value, aware=True)
    if logical is LogicalType.TIMESTAMP:
        return datetime_from_micros(value // _MICROS, aware=False)
    if logical is LogicalType.TIME:
        return time_from_text(value)
    if isinstance(value, bytearray):
        return bytes(value)
    return value


class Mirror:
    """A ``foreachBatch`` function keeping target tables equal to the source tables."""

    def __init__(self, target_url: str, tables: Sequence[TableSchema], partitions: int = 2,
                 envelope: bool | None = None, target_schema: str | None = None) -> None:
        """``tables`` are the source tables; each is mirrored under the same name, in
        ``target_schema`` when given (else in the source's schema name)."""
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

        if self.envelope:
            spread = df.repartition(self.partitions, F.col("table"), F.col("key"))
        else:
            table = self.tables[0]
            df = df.select(*[_as_units(c.name, c.type) for c in table.columns],
                           *[F.col(c) for c in df.columns if c not in table.column_names])
            keys = [F.col(spark_name(k)) for k in table.key]
            spread = df.repartition(self.partitions, *keys)
        apply = _PartitionApplier(self, batch_id)
        newest: float | None = None
        for table, applied, committed in spread.rdd.mapPartitionsWithIndex(apply).collect():
            self.applied[table] = self.applied.get(table, 0) + applied
            if committed is not None and (newest is None or committed > newest):
                newest = committed
        if newest is not None:
            self.lag_seconds = max(0.0, time.time() - newest)


class _PartitionApplier:
    """Runs on executors: compact one partition's changes and apply them."""

    def __init__(self, mirror: Mirror, batch_id: int) -> None:
        self.dialect_name = mirror.dialect_name
        self.config: ConnectionConfig = mirror.config
        self.tables = {target.table: target for target in mirror.targets.values()}
        self.by_name = {str(source): target for source, target in mirror.targets.items()}
        self.envelope = mirror.envelope
        self.batch_id = batch_id

    def __call__(self, task: int, rows: Iterator[Any]
                 ) -> Iterator[tuple[str, int, float | None]]:
        latest: dict[tuple[TableId, tuple[Any, ...]], tuple[int, ChangeEvent]] = {}
        newest: dict[TableId, dt.datetime] = {}  # naive local times, as Spark gives them
        stamp = "commit_ts" if self.envelope else "_commit_ts"
        for row in rows:
            record = row.asDict()
            seq, event = self._event(record)
            committed = record[stamp]
            if committed is not None and (event.table not in newest
                                          or committed > newest[event.table]):
                newest[event.table] = committed
            slot = (event.table, event.key)
            if slot not in latest or latest[slot][0] <= seq:
                latest[slot] = (seq, event)
        per_table: dict[TableId, list[ChangeEvent]] = {}
        for _, event in sorted(latest.values(), key=lambda item: item[0]):
            per_table.setdefault(event.table, []).append(event)
        if not per_table:
            return
        dialect = get_dialect(self.dialect_name)
        with dialect.passing_faults():  # a target that drops out is retried like a source
            conn = dialect.connect(self.config)
            try:
                for table, events in per_table.items():
                    done = dialect.apply_changes(conn, self.tables[table], events,
                                                 f"{self.batch_id}-{task}")
                    last = newest.get(table)
                    yield (str(table), len(events) if done else 0,
                           None if last is None else last.timestamp())
            finally:
                conn.close()

    def _event(self, record: dict[str, Any]) -> tuple[int, ChangeEvent]:
        offset = Offset("mirror")
        if self.envelope:
            table = self.by_name[record["table"]]
            key = tuple(decode_value(v) for v in json.loads(record["key"]))
            row = None
            if record["op"] != "d":  # a delete needs only its key
                values = json.loads(record["after"])
                row = tuple(decode_value(values[c]) for c in table.column_names)
            return record["seq"], ChangeEvent(table.table, record["op"], key, row, offset)
        table = next(iter(self.by_name.values()))
        row = tuple(_from_spark(record[c.name], c.type) for c in table.columns)
        return record["_seq"], ChangeEvent(table.table, record["_op"], table.key_of(row),
                                           None if record["_op"] == "d" else row, offset)
