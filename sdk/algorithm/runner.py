"""The algorithm end to end in one process: startup, snapshot splits, then the log phase.

:class:`SyncRunner` advances a :class:`SyncState` one step at a time: a step does one batch of
the :class:`~.machine.PhaseMachine` (reads its splits, or its log range) and returns the events
to emit with the state after them. A caller that commits each step's events and state together
(a transactional or idempotent sink) gets exactly-once output across crashes: after a crash it
resumes from the last committed state, and the step in flight is simply done again. The Spark
engine runs the same machine with the reads spread over executors; this runner is its
sequential reference.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ..dialect.manager import Dialect
from ..dialect.types import (
    ChangeEvent,
    Connection,
    FinishedSplit,
    Offset,
    TableSchema,
    TableTruncated,
)
from .machine import Batch, PhaseMachine
from .reader import PhaseHooks, SharedView, SplitResult, read_split, truncation_error
from .settings import SyncOptions
from .state import Phase, SyncState
from .throttle import throttle

log = logging.getLogger(__name__)


class SyncRunner:
    """Runs the snapshot, backfill and incremental algorithm over one dialect."""

    def __init__(self, dialect: Dialect, connect: Callable[[], Connection],
                 options: SyncOptions | None = None, hooks: PhaseHooks | None = None,
                 splits_per_step: int = 1) -> None:
        self.dialect = dialect
        self.options = options or SyncOptions()
        self.hooks = hooks or PhaseHooks()
        self.machine = PhaseMachine(dialect, self.options)
        self.splits_per_step = splits_per_step
        self._connect = connect
        self._conn: Connection | None = None
        self.last_split: SplitResult | None = None
        self.view = SharedView(dialect, connect, self.options)
        self.snapshot_pace = throttle(self.options.snapshot_rows_per_second)
        self.log_pace = throttle(self.options.log_changes_per_second)

    @property
    def conn(self) -> Connection:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def close(self) -> None:
        self.view.close()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def start(self, tables: Sequence[TableSchema]) -> SyncState:
        """The first state for ``tables`` under the configured startup mode."""
        return self.machine.start(self.conn, tables)

    def step(self, state: SyncState) -> tuple[list[ChangeEvent], SyncState]:
        """Do one batch: read the next splits, or the next log range."""
        batch = self.machine.next_batch(self.conn, state, self._head, self.splits_per_step)
        if batch is None:
            return [], state
        if batch.state.phase is not Phase.SNAPSHOT:
            self.view.close()
        if batch.splits:
            return self._read_splits(batch)
        if batch.log_from is not None:
            return self._read_log(batch)
        return [], batch.state

    def _head(self, position: Offset) -> Offset:
        self.hooks.before_log_batch(position)
        return self.dialect.current_offset(self.conn)

    def _read_splits(self, batch: Batch) -> tuple[list[ChangeEvent], SyncState]:
        events: list[ChangeEvent] = []
        done: list[FinishedSplit] = []
        for split in batch.splits:
            schema = batch.state.tables[split.table]
            result = read_split(self.dialect, self.conn, schema, split, self.options,
                                self.hooks, self.view.token(), self.snapshot_pace)
            self.last_split = result
            done.append(FinishedSplit(split, result.watermark, len(result.rows)))
            events.extend(ChangeEvent(split.table, "r", schema.key_of(row), row,
                                      result.watermark) for row in result.rows)
            events.extend(ChangeEvent(split.table, "d", key, None, result.watermark)
                          for key in result.deleted)  # a table read again: keys gone
        return events, self.machine.fold(batch.state, done)

    def _read_log(self, batch: Batch) -> tuple[list[ChangeEvent], SyncState]:
        """The batch's log range, at most ``log.batch.max-events`` of it."""
        assert batch.log_from is not None and batch.state.position is not None
        limit = self.options.log_batch_max_events
        read: list[ChangeEvent] = []
        stream = self.dialect.stream_log(self.conn, list(batch.state.tables.values()),
                                         batch.log_from, batch.state.position)
        try:
            for item in stream:
                if isinstance(item, TableTruncated) and not item.dropped:
                    raise truncation_error(item)
                if not isinstance(item, ChangeEvent):
                    continue
                if len(read) == limit:  # the first event not taken starts the next batch
                    batch = self.machine.cut_log_batch(batch, item.offset)
                    break
                read.append(item)
                if self.log_pace is not None:
                    self.log_pace.take(1)
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        return self.machine.filter_for(batch.state).filter(read), batch.state

    def run(self, state: SyncState, emit: Callable[[list[ChangeEvent], SyncState], None],
            until: Callable[[SyncState], bool]) -> SyncState:
        """Step until ``until(state)``; ``emit`` gets each step's events and state, to commit
        them together."""
        while not until(state):
            events, state = self.step(state)
            emit(events, state)
        return state


def caught_up(runner: SyncRunner, target: Offset) -> Callable[[SyncState], bool]:
    """A stop condition: the log phase reached ``target`` (or the sync is done)."""
    def check(state: SyncState) -> bool:
        if state.phase is Phase.DONE:
            return True
        return state.phase is Phase.LOG and state.position is not None and \
            runner.dialect.compare_offset(state.position, target) >= 0
    return check

