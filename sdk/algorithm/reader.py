"""Reading one snapshot split: low watermark, range read, high watermark, backfill.

The split read of docs/design.md, 'Reading a split', written once for every dialect (as
flink-cdc-base's ``AbstractScanFetchTask``):

1. ``low = current_offset()`` (or the exact offset of a consistent snapshot view);
2. ``rows = read_range(split)``;
3. ``high = current_offset()``;
4. exactly-once and ``high > low``: replay the log window ``[low, high)`` for the split's keys
   on a buffer of the rows keyed by key; emit the buffer, watermark ``high``. At-least-once:
   emit the rows as read, watermark ``low``. A snapshot view: ``low == high``, no backfill.

Memory is the split's rows plus the window's changes for its keys, never a whole table.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ..dialect.errors import ConfigurationError
from ..dialect.manager import Dialect
from ..dialect.types import (
    Capability,
    ChangeEvent,
    Connection,
    Key,
    Offset,
    Row,
    SchemaChange,
    SnapshotSplit,
    TableSchema,
    TableTruncated,
)
from .schema import projector
from .settings import SyncOptions
from .throttle import Throttle

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

SplitHook = Callable[[SnapshotSplit], None]


def _nothing(split: SnapshotSplit) -> None:
    return None


@dataclass
class PhaseHooks:
    """Test seams between the steps of a split read and before each log batch, so tests can
    write rows at the worst moments (flink-cdc-base's ``SnapshotPhaseHooks``)."""

    before_low_watermark: SplitHook = _nothing
    after_low_watermark: SplitHook = _nothing
    after_read: SplitHook = _nothing
    after_high_watermark: SplitHook = _nothing
    before_log_batch: Callable[[Offset], None] = field(default=lambda position: None)


@dataclass
class SplitResult:
    """What a split read produced: its rows (in no order), and the watermark from which the
    log phase must emit changes to the split's keys."""

    split: SnapshotSplit
    rows: list[Row]
    watermark: Offset
    low: Offset
    high: Offset
    window_events: int = 0
    peak_buffer: int = 0
    deleted: list[Key] = field(default_factory=list)
    """Keys of the split gone at the watermark that the sync may have emitted before (a read
    ``since`` a log position): a table read again must delete them downstream."""
    columns: pa.Table | None = None
    """The rows as the dialect's ``read_range_arrow`` read them (``rows`` then empty)."""

    @property
    def count(self) -> int:
        """How many rows the split holds."""
        return len(self.rows) if self.columns is None else self.columns.num_rows


def read_split(dialect: Dialect, conn: Connection, table: TableSchema, split: SnapshotSplit,
               options: SyncOptions, hooks: PhaseHooks | None = None,
               view_token: str | None = None, pace: Throttle | None = None,
               columnar: bool = False) -> SplitResult:
    """Read ``split`` and merge it with the log window read during it (see module doc);
    ``pace`` paces the rows read (``snapshot.rows-per-second``). A split with ``since``
    reads again a table whose changes were emitted up to there (see :func:`reread`).
    ``columnar``: the caller takes the rows as Arrow, so a split read in a snapshot view
    goes through the dialect's ``read_range_arrow`` when it has one."""
    # a split read again (``since``) reads what the live table has from the start, as rows
    # (:func:`reread` completes them)
    reading = None if split.since is None else live_columns(dialect, conn, table)
    try:
        result = _read_split(dialect, conn, table, split, options, hooks, view_token, pace,
                             reading, columnar=columnar and split.since is None)
    except Exception as failure:
        # a column dropped while the split is read (the log phase follows the drop when it
        # meets it): read the columns the table still has, the dropped one None
        try:
            again = live_columns(dialect, conn, table)
        except Exception:
            raise failure from None
        if again is None or (reading is not None and
                             again[0].column_names == reading[0].column_names):
            raise
        log.warning("table %s no longer has column(s) %s: split %s reads the others",
                    table.table, ", ".join(sorted(set(table.column_names) -
                                                  set(again[0].column_names))),
                    split.split_id)
        result = _read_split(dialect, conn, table, split, options, hooks, view_token, pace,
                             again)
    return result if split.since is None else reread(dialect, conn, table, result, split.since)


Reading = tuple[TableSchema, Callable[[Row | None], Row | None]]
"""The columns to read, and how their rows become the split's (by column name)."""


def live_columns(dialect: Dialect, conn: Connection, table: TableSchema) -> Reading | None:
    """For a table read while its changes flow: when the live table no longer has every
    column of ``table`` (a change the log phase has not met yet), the columns it still has,
    read as ``table``'s with the others None; None when it has them all. The log phase then
    meets the change and reads the table again with the new columns."""
    live = {c.name for c in dialect.describe_table(conn, table.table).columns}
    present = tuple(c for c in table.columns if c.name in live)
    if len(present) == len(table.columns):
        return None
    missing = [k for k in table.key if k not in live]
    if missing:
        raise ConfigurationError(f"table {table.table} no longer has key column(s) "
                                 f"{', '.join(missing)}: take a new snapshot")
    reduced = TableSchema(table.table, present, table.primary_key, table.unique_keys,
                          table.key)
    return reduced, projector(reduced, table)


def reread(dialect: Dialect, conn: Connection, table: TableSchema, result: SplitResult,
           since: Offset) -> SplitResult:
    """``result`` completed for a table read again while its changes were emitted up to
    ``since``: each key of the split changed in ``[since, watermark)`` gets its state at the
    watermark, the row of its last change or, when that removed it, a delete (in
    ``deleted``). Downstream then holds every key of the split as at the watermark, whatever
    the rows' condition (``where``) selects, and the log phase may drop the split's changes
    below it (docs/design.md, 'Snapshots on demand')."""
    if dialect.compare_offset(result.watermark, since) <= 0:
        return result
    split = result.split
    last: dict[Key, Row | None] = {}
    events = 0
    for item in changes_of(dialect, conn, table, since, result.watermark):
        events += 1
        if isinstance(item, TableTruncated):  # the keys changed before are gone at that point
            last = dict.fromkeys(last)  # (the rows read, as at the watermark, came after it)
            continue
        if item.old_key is not None and split.contains(item.old_key):
            last[item.old_key] = None
        if split.contains(item.key):
            last[item.key] = None if item.op == "d" else item.after
    if not last:
        return result
    rows = {table.key_of(row): row for row in result.rows}
    deleted = []
    for key, row in last.items():
        if row is None:
            rows.pop(key, None)
            deleted.append(key)
        else:
            rows[key] = row
    log.debug("split %s read again: %d changes since %s, %d keys gone", split.split_id,
              events, since, len(deleted))
    return replace(result, rows=list(rows.values()), deleted=deleted,
                   window_events=result.window_events + events)


def _read_split(dialect: Dialect, conn: Connection, table: TableSchema, split: SnapshotSplit,
                options: SyncOptions, hooks: PhaseHooks | None, view_token: str | None,
                pace: Throttle | None, reading: Reading | None = None,
                columnar: bool = False) -> SplitResult:
    hooks = hooks or PhaseHooks()
    sid = split.split_id
    hooks.before_low_watermark(split)
    view = dialect.begin_snapshot(conn, view_token) if options.atomic_snapshot else None
    if view is not None:
        try:
            log.debug("split %s step 1: snapshot view at %s", sid, view.offset)
            hooks.after_low_watermark(split)
            columns = dialect.read_range_arrow(conn, table, split) \
                if columnar and reading is None else None
            if columns is not None:
                rows: list[Row] = []
                if pace is not None:
                    pace.take(columns.num_rows)
            else:
                rows = _read_rows(dialect, conn, table, split, options, pace, reading)
            hooks.after_read(split)
        finally:
            dialect.end_snapshot(conn)
        hooks.after_high_watermark(split)
        return SplitResult(split, rows, view.offset, view.offset, view.offset,
                           peak_buffer=len(rows), columns=columns)

    low = dialect.current_offset(conn)
    log.debug("split %s step 1: low watermark %s", sid, low)
    hooks.after_low_watermark(split)
    rows = _read_rows(dialect, conn, table, split, options, pace, reading)
    log.debug("split %s step 2: read %d rows", sid, len(rows))
    hooks.after_read(split)
    high = dialect.current_offset(conn)
    log.debug("split %s step 3: high watermark %s", sid, high)
    hooks.after_high_watermark(split)
    if not options.exactly_once:
        return SplitResult(split, rows, low, low, high, peak_buffer=len(rows))
    if dialect.compare_offset(high, low) <= 0:
        return SplitResult(split, rows, high, low, high, peak_buffer=len(rows))

    buffer: dict[Key, Row] = {table.key_of(row): row for row in rows}
    del rows
    peak = len(buffer)
    events = 0
    for item in changes_of(dialect, conn, table, low, high):
        events += 1
        apply_to_buffer(buffer, split, item)
        peak = max(peak, len(buffer))
    log.debug("split %s step 4: backfilled %d changes of [%s, %s)", sid, events, low, high)
    return SplitResult(split, list(buffer.values()), high, low, high, events, peak)


def changes_of(dialect: Dialect, conn: Connection, table: TableSchema, start: Offset,
               end: Offset) -> Iterator[ChangeEvent | TableTruncated]:
    """The changes of ``table`` in ``[start, end)``, their rows shaped by ``table`` even
    after a schema change in the window (by column name: the split holds ``table``'s
    columns; the log phase follows the change and reads the table again if it must), and
    where the log removed all its rows (:class:`TableTruncated`)."""
    project = None
    for item in dialect.stream_log(conn, [table], start, end):
        if isinstance(item, SchemaChange) and item.table == table.table:
            project = projector(item.schema, table)
        elif isinstance(item, ChangeEvent) and item.table == table.table:
            if project is not None:
                item = replace(item, after=project(item.after), before=project(item.before))
            yield item
        elif isinstance(item, TableTruncated) and item.table == table.table:
            yield item


def _read_rows(dialect: Dialect, conn: Connection, table: TableSchema, split: SnapshotSplit,
               options: SyncOptions, pace: Throttle | None, reading: Reading | None = None
               ) -> list[Row]:
    rows: list[Row] = []
    read = table if reading is None else reading[0]
    for batch in dialect.read_range(conn, read, split, options.fetch_size):
        rows.extend(batch if reading is None else [reading[1](r) or () for r in batch])
        if pace is not None:
            pace.take(len(batch))
    return rows


def apply_to_buffer(buffer: dict[Key, Row], split: SnapshotSplit,
                    event: ChangeEvent | TableTruncated) -> None:
    """Replay one change on a split's buffer: only keys inside the split count, and an update
    that moved the key is a delete of the old key and an insert of the new one; a truncation
    empties it."""
    if isinstance(event, TableTruncated):
        buffer.clear()
        return
    if event.old_key is not None and split.contains(event.old_key):
        buffer.pop(event.old_key, None)
    if not split.contains(event.key):
        return
    if event.op == "d":
        buffer.pop(event.key, None)
    else:
        assert event.after is not None
        buffer[event.key] = event.after


class SharedView:
    """One consistent view for all the splits of a snapshot, when the dialect's views can be
    joined by token (a PostgreSQL exported snapshot): opened once on a connection of its own,
    joined by every split read, closed when the snapshot ends.

    Opening a view can cost more than reading a split (PostgreSQL creates a temporary slot), so
    sharing one keeps an atomic snapshot as fast as a plain one. A dialect whose views cannot
    be joined (``token`` None, MySQL's consistent snapshots) keeps one view per split. A view
    that can no longer be joined (its owner gone after a restart) makes ``begin_snapshot``
    return None, and that split falls back to watermarks.
    """

    def __init__(self, dialect: Dialect, connect: Callable[[], Connection],
                 options: SyncOptions) -> None:
        self.dialect = dialect
        self._connect = connect
        self._enabled = options.atomic_snapshot and dialect.has(Capability.ATOMIC_SNAPSHOT)
        self._owner: Connection | None = None
        self._token: str | None = None
        self._tried = False

    def token(self) -> str | None:
        """The token splits join with, opening the view on first use; None: no shared view."""
        if not self._enabled or self._tried:
            return self._token
        self._tried = True
        owner = self._connect()
        view = self.dialect.begin_snapshot(owner, None)
        if view is None or view.token is None:
            if view is not None:
                self.dialect.end_snapshot(owner)
            owner.close()
            return None
        log.info("snapshot: splits share the view at %s", view.offset)
        self._owner, self._token = owner, view.token
        return self._token

    def close(self) -> None:
        """End the view (splits still reading it keep their own transaction's snapshot)."""
        owner, self._owner, self._token = self._owner, None, None
        self._tried = False
        if owner is not None:
            try:
                self.dialect.end_snapshot(owner)
            finally:
                owner.close()

