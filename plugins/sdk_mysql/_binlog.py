"""Reading the binlog between two offsets with python-mysql-replication.

An offset is ``(file, pos, n)``: ``pos`` is where the change's transaction starts in ``file``
(its GTID or BEGIN event) and ``n`` the change's index inside the transaction, so a read can
start inside a multi-row event exactly: it starts the replication stream at the transaction and
skips the first ``n`` changes. Watermarks from the server (``SHOW BINLOG STATUS``,
``Binlog_snapshot_position``) are transaction boundaries with ``n = 0``.

The library is asked for file/position streaming (``is_mariadb`` stays False, since with it the
start position is ignored) and for the transaction and row events only; a transaction's start
is its GTID (or BEGIN) event's own position, taken from the event header. The end is checked per
event, because the stream does not always end with EOF and ``end_log_pos`` ignores the file
name.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from typing import Any

from sdk import ChangeEvent, OffsetExpiredError, TableId, TableSchema

from ._offsets import make_offset, position_key
from ._types import fix_binlog_time, normalizer


class TableDecoder:
    """Turns one table's binlog row dicts into row tuples in schema order, normalised."""

    def __init__(self, table: TableSchema) -> None:
        self.table = table
        self.names = table.column_names
        self.index = {name: i for i, name in enumerate(self.names)}
        self.converters: list[tuple[int, Any]] = []
        for i, column in enumerate(table.columns):
            convert = normalizer(column)
            kind = column.source_type.lower()
            if kind.startswith("time") and not kind.startswith("timestamp"):
                convert = fix_binlog_time
            if convert is not None:
                self.converters.append((i, convert))

    def row(self, values: dict[str, Any], none_sources: dict[str, Any]) -> tuple[Any, ...]:
        try:
            out = [values[name] for name in self.names]
        except KeyError as missing:
            raise OffsetExpiredError(
                f"binlog rows of {self.table.table} have no column {missing}: the server "
                "needs binlog_row_metadata=FULL, or the table changed since") from None
        for name, source in none_sources.items():
            if source == "empty set" and name in self.index:
                out[self.index[name]] = set()
        for i, convert in self.converters:
            out[i] = convert(out[i])
        return tuple(out)


def read_changes(settings: dict[str, Any], tables: Sequence[TableSchema],
                 start: tuple[str, int, int], end: tuple[str, int, int] | None
                 ) -> Iterator[ChangeEvent]:
    """Changes of ``tables`` with ``start <= offset < end`` in log order; ``end`` None reads to
    the end of the binlog as it is now."""
    from pymysql.err import OperationalError
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import GtidEvent, MariadbGtidEvent, QueryEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    decoders = {(t.table.schema, t.table.name): TableDecoder(t) for t in tables}
    start_file, start_pos, start_n = start
    end_key = position_key(end) if end is not None else None
    reader = BinLogStreamReader(
        connection_settings=settings, server_id=random.randint(1 << 20, (1 << 31) - 1),
        log_file=start_file, log_pos=start_pos, resume_stream=True, blocking=False,
        only_events=[GtidEvent, MariadbGtidEvent, QueryEvent, WriteRowsEvent,
                     UpdateRowsEvent, DeleteRowsEvent])
    txn_pos = start_pos
    after_gtid = False
    index = 0
    try:
        for event in reader:
            file = reader.log_file
            # A transaction starts at its GTID event (MariaDB, MySQL with GTIDs), else at its
            # BEGIN (MySQL's anonymous GTID event is not decoded).
            gtid = isinstance(event, (GtidEvent, MariadbGtidEvent))
            if gtid or (isinstance(event, QueryEvent) and event.query == "BEGIN"
                        and not after_gtid):
                txn_pos, index = event.packet.log_pos - event.packet.event_size, 0
                after_gtid = gtid
                if end_key is not None and position_key((file, txn_pos, 0)) >= end_key:
                    return
                continue
            after_gtid = False
            if isinstance(event, QueryEvent):
                continue
            decoder = decoders.get((event.schema, event.table))
            for row in event.rows:
                n = index
                index += 1
                if (file, txn_pos) == (start_file, start_pos) and n < start_n:
                    continue
                if end_key is not None and position_key((file, txn_pos, n)) >= end_key:
                    return
                if decoder is None:
                    continue
                yield _change(decoder, event, row, make_offset(file, txn_pos, n))
    except OperationalError as exc:
        if exc.args and exc.args[0] == 1236:
            raise OffsetExpiredError(
                f"the binlog no longer holds {start_file}:{start_pos} ({exc.args[1]}); the "
                "server purged it: take a new snapshot and keep binlogs longer "
                "(binlog_expire_logs_seconds)") from None
        raise
    finally:
        reader.close()


def _change(decoder: TableDecoder, event: Any, row: dict[str, Any], offset: Any
            ) -> ChangeEvent:
    from pymysqlreplication.row_event import DeleteRowsEvent, WriteRowsEvent

    table: TableId = decoder.table.table
    commit_ts = int(event.timestamp) * 1_000_000
    if isinstance(event, WriteRowsEvent):
        after = decoder.row(row["values"], row.get("none_sources", {}))
        return ChangeEvent(table, "c", decoder.table.key_of(after), after, offset,
                           commit_ts=commit_ts)
    if isinstance(event, DeleteRowsEvent):
        before = decoder.row(row["values"], row.get("none_sources", {}))
        return ChangeEvent(table, "d", decoder.table.key_of(before), None, offset, before,
                           commit_ts=commit_ts)
    before = decoder.row(row["before_values"], row.get("before_none_sources", {}))
    after = decoder.row(row["after_values"], row.get("after_none_sources", {}))
    key, old_key = decoder.table.key_of(after), decoder.table.key_of(before)
    return ChangeEvent(table, "u", key, after, offset, before,
                       old_key if old_key != key else None, commit_ts)
