"""Reading the binlog with python-mysql-replication: between two offsets, or following the log.

An offset is ``(file, pos, n)``: ``pos`` is where the change's transaction starts in ``file``
(its GTID or BEGIN event) and ``n`` the change's index inside the transaction, so a read can
start inside a multi-row event exactly: it starts the replication stream at the transaction and
skips the first ``n`` changes. Watermarks from the server (``SHOW BINLOG STATUS``,
``Binlog_snapshot_position``) are transaction boundaries with ``n = 0``.

The library is asked for file/position streaming (``is_mariadb`` stays False, since with it the
start position is ignored) and for the transaction and row events only; a transaction's start
is its GTID (or BEGIN) event's own position, taken from the event header. The end is checked
once per transaction (and per row only inside the transaction the end points into), because the
stream does not always end with EOF and ``end_log_pos`` ignores the file name.

Rows of tables not read are decoded only when a change of a table read follows them in the same
transaction, since ``n`` counts every row of the transaction (so an offset means the same
whatever tables a read follows): transactions of other tables cost their events' headers and
table maps, not their rows. The library decodes a rows event's rows lazily, from the event's
own packet, so this is exact; at most ``MAX_UNREAD`` such events wait, then they are counted.

On MariaDB each offset also carries the GTID position at its transaction's start (see
``_offsets``): the reader starts from the position's GTID state and adds each transaction's GTID
as it passes, so the per-row cost is one more tuple item.

Following the log (no end) keeps one blocking replication connection with the protocol's
heartbeat (``slave_heartbeat``): an idle server sends a heartbeat event carrying the binlog
file and the end of the last event sent, which is a transaction boundary. A ``Heartbeat`` is
yielded at such boundaries: on each server heartbeat, on rotation, and at the end of a
transaction when the last one is ``heartbeat_seconds`` old, so the offset advances while other
tables are written, too.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Sequence
from operator import itemgetter
from typing import Any

from sdk import ChangeEvent, Heartbeat, Offset, OffsetExpiredError, RetriableError, TableSchema

from ._connect import open_connection
from ._offsets import NAME, MariadbGtidState, make_offset, position_key
from ._types import fix_binlog_time, normalizer

_MARIADB_STANDALONE = 1  # MariaDB GTID event flag FL_STANDALONE: a statement without Xid
MAX_UNREAD = 64  # rows events of other tables held undecoded per transaction, at most


class TableDecoder:
    """Turns one table's binlog row dicts into row tuples in schema order, normalised."""

    def __init__(self, table: TableSchema) -> None:
        self.table = table
        self.names = table.column_names
        self.index = {name: i for i, name in enumerate(self.names)}
        getter = itemgetter(*self.names)
        # itemgetter of one name returns the value itself, not a 1-tuple
        self.values: Any = getter if len(self.names) > 1 else lambda d: (getter(d),)
        # table.key_of, without its generator: it runs once or twice per change
        key = table.key_index
        if len(key) == 1:
            (at,) = key
            self.key_of: Any = lambda row: (row[at],)
        elif key:
            self.key_of = itemgetter(*key)
        else:
            self.key_of = table.key_of
        self.converters: list[tuple[int, Any]] = []
        self.sets: list[str] = []  # SET columns: an empty set arrives as None
        for i, column in enumerate(table.columns):
            convert = normalizer(column)
            kind = column.source_type.lower()
            if kind.startswith("time") and not kind.startswith("timestamp"):
                convert = fix_binlog_time
            if convert is not None:
                self.converters.append((i, convert))
            if kind.startswith("set"):
                self.sets.append(column.name)

    def row(self, values: dict[str, Any], none_sources: dict[str, Any]) -> tuple[Any, ...]:
        try:
            out: tuple[Any, ...] = self.values(values)
        except KeyError as missing:
            raise OffsetExpiredError(
                f"binlog rows of {self.table.table} have no column {missing}: the server "
                "needs binlog_row_metadata=FULL, or the table changed since") from None
        if not self.converters and not self.sets:
            return out
        mutable = list(out)
        for name in self.sets:
            if none_sources.get(name) == "empty set":
                mutable[self.index[name]] = set()
        for i, convert in self.converters:
            mutable[i] = convert(mutable[i])
        return tuple(mutable)


CONNECTION_LOST = {2003, 2006, 2013}
"""Can't connect, server gone away, connection lost (or silent past ``read_timeout``)."""


def read_changes(settings: dict[str, Any], tables: Sequence[TableSchema],
                 start: tuple[str, int, int], end: tuple[str, int, int] | None,
                 gtid: str | None = None, heartbeat_seconds: float = 0.5
                 ) -> Iterator[ChangeEvent | Heartbeat]:
    """Changes of ``tables`` with ``start <= offset < end`` in log order. ``end`` None follows
    the log for ever, with heartbeats (see the module docstring). ``gtid`` is MariaDB's GTID
    position at ``start``'s transaction (None: offsets get no ``gtid``)."""
    from pymysql.err import OperationalError
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import (
        GtidEvent,
        HeartbeatLogEvent,
        MariadbGtidEvent,
        QueryEvent,
        RotateEvent,
        XidEvent,
    )
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    decoders = {(t.table.schema, t.table.name): TableDecoder(t) for t in tables}
    start_file, start_pos, start_n = start
    follow = end is None
    end_key = position_key(end) if end is not None else None
    end_txn = (end[0], end[1]) if end is not None else None
    events: list[Any] = [GtidEvent, MariadbGtidEvent, QueryEvent, WriteRowsEvent,
                         UpdateRowsEvent, DeleteRowsEvent]
    if follow:
        events += [XidEvent, RotateEvent, HeartbeatLogEvent]
    reader = BinLogStreamReader(
        connection_settings=settings, server_id=random.randint(1 << 20, (1 << 31) - 1),
        log_file=start_file, log_pos=start_pos, resume_stream=True, blocking=follow,
        slave_heartbeat=heartbeat_seconds if follow else None, only_events=events,
        pymysql_wrapper=open_connection)
    row_events = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)
    ops = {WriteRowsEvent: "c", UpdateRowsEvent: "u", DeleteRowsEvent: "d"}
    state = MariadbGtidState(gtid) if gtid is not None else None
    txn_gtid = gtid
    txn_file, txn_pos = start_file, start_pos
    skip = start_n  # changes of this transaction before the start
    limit: int | None = None  # the end's index when the end lies in this transaction
    after_gtid = standalone = in_txn = txn_mariadb = False
    index = 0
    numbered_file, file_number = "", 0
    unread: list[Any] = []  # this transaction's rows events of other tables, not decoded yet
    # following: the last transaction boundary passed (never behind start) and its GTID state
    boundary, boundary_gtid = start, gtid
    last_beat = time.monotonic()

    def beat(file: str, pos: int) -> Heartbeat:
        """A heartbeat at the boundary ``file:pos``, or at the last one if that is further."""
        nonlocal boundary, boundary_gtid, last_beat
        last_beat = time.monotonic()
        if position_key((file, pos, 0)) > position_key(boundary):
            boundary, boundary_gtid = (file, pos, 0), state.text if state else None
        return Heartbeat(make_offset(*boundary, boundary_gtid))

    try:
        for event in reader:
            if isinstance(event, row_events):
                decoder = decoders.get((event.schema, event.table))
                if decoder is None and limit is None and len(unread) < MAX_UNREAD:
                    unread.append(event)  # its rows are counted only if a change follows
                    after_gtid = False
                    continue
                if unread:
                    index += sum(len(e.rows) for e in unread)
                    unread.clear()
                rows = event.rows
                first = index
                index += len(rows)
                if decoder is not None:
                    low = max(first, skip)
                    high = index if limit is None else min(index, limit)
                    if low < high:
                        if low > first or high < index:
                            rows = rows[low - first:high - first]
                        yield from _changes(decoder, ops.get(type(event), "u"), event, rows,
                                            txn_file, txn_pos, low, txn_gtid)
                if limit is not None and index >= limit:
                    return
                after_gtid = False
                continue
            # A transaction starts at its GTID event (MariaDB, MySQL with GTIDs), else at its
            # BEGIN (MySQL's anonymous GTID event is not decoded).
            mariadb = isinstance(event, MariadbGtidEvent)
            is_gtid = mariadb or isinstance(event, GtidEvent)
            if is_gtid or (isinstance(event, QueryEvent) and event.query == "BEGIN"
                           and not after_gtid):
                txn_file = reader.log_file
                txn_pos, index = event.packet.log_pos - event.packet.event_size, 0
                after_gtid, in_txn, txn_mariadb = is_gtid, True, mariadb
                standalone = mariadb and bool(event.flags & _MARIADB_STANDALONE)
                if end_key is not None:
                    if txn_file != numbered_file:  # the file's number, once per file
                        numbered_file, file_number = txn_file, position_key((txn_file, 0, 0))[0]
                    if (file_number, txn_pos, 0) >= end_key:
                        return
                unread.clear()
                skip = start_n if (txn_file, txn_pos) == (start_file, start_pos) else 0
                limit = end[2] if end is not None and (txn_file, txn_pos) == end_txn else None
                if state is not None:
                    txn_gtid = state.text
                    if mariadb:
                        state.add(event.domain_id, event.gtid)
                continue
            if not follow:
                after_gtid = False
                continue
            # following the log: find transaction boundaries for heartbeats
            header = event.packet
            if isinstance(event, HeartbeatLogEvent):
                # sent only when the server has nothing more to send: the binlog's end, where
                # whole transactions are written at once, so a boundary even if the events
                # seen do not say the last transaction ended (XA PREPARE, ROLLBACK of a
                # non-transactional change)
                if header.log_pos:
                    in_txn = False
                    yield beat(event.ident, header.log_pos)
                continue
            if isinstance(event, RotateEvent):
                if not in_txn and not header.log_pos:  # the fake rotate naming the next file
                    yield beat(event.next_binlog, event.position)
                continue
            ends = (not isinstance(event, QueryEvent) or event.query in ("COMMIT", "ROLLBACK")
                    or standalone
                    or (after_gtid and not txn_mariadb and event.query != "BEGIN"))
            after_gtid = False
            if ends and in_txn:
                in_txn = False
                if time.monotonic() - last_beat >= heartbeat_seconds:
                    yield beat(reader.log_file, header.log_pos)
    except OperationalError as exc:
        code = exc.args[0] if exc.args else None
        if code == 1236:
            raise OffsetExpiredError(
                f"the binlog no longer holds {start_file}:{start_pos} ({exc.args[1]}); the "
                "server purged it: take a new snapshot and keep binlogs longer "
                "(binlog_expire_logs_seconds)") from None
        if code in CONNECTION_LOST:
            raise RetriableError(
                f"the binlog connection to {settings['host']}:{settings['port']} failed and "
                f"could not be reopened ({exc.args[-1]}; a connection silent for "
                f"read_timeout={settings.get('read_timeout')} s counts as lost): the read can "
                "be retried from its start offset") from None
        raise
    finally:
        reader.close()


def _changes(decoder: TableDecoder, op: str, event: Any, rows: list[dict[str, Any]],
             file: str, pos: int, n: int, gtid: str | None) -> Iterator[ChangeEvent]:
    """The change events (``op`` c, u or d) of ``rows`` of one rows event, the first being
    change ``n`` of the transaction at ``file:pos``."""
    table = decoder.table.table
    row_of, key_of = decoder.row, decoder.key_of
    commit_ts = int(event.timestamp) * 1_000_000
    if op == "c":
        for row in rows:
            after = row_of(row["values"], row["none_sources"])
            yield ChangeEvent(table, "c", key_of(after), after, _offset(file, pos, n, gtid),
                              None, None, commit_ts)
            n += 1
    elif op == "d":
        for row in rows:
            before = row_of(row["values"], row["none_sources"])
            yield ChangeEvent(table, "d", key_of(before), None, _offset(file, pos, n, gtid),
                              before, None, commit_ts)
            n += 1
    else:
        for row in rows:
            before = row_of(row["before_values"], row["before_none_sources"])
            after = row_of(row["after_values"], row["after_none_sources"])
            key, old_key = key_of(after), key_of(before)
            yield ChangeEvent(table, "u", key, after, _offset(file, pos, n, gtid), before,
                              old_key if old_key != key else None, commit_ts)
            n += 1


def _offset(file: str, pos: int, n: int, gtid: str | None) -> Offset:
    """``make_offset`` inlined for the per-row path."""
    if gtid is None:
        return Offset.from_sorted(NAME, (("file", file), ("n", n), ("pos", pos)))
    return Offset.from_sorted(NAME, (("file", file), ("gtid", gtid), ("n", n), ("pos", pos)))
